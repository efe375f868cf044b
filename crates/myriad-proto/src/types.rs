//! Domain types that travel on the wire and are stored on disk.

use serde::{Deserialize, Serialize};

pub use myriad_placement::InodeId;

/// Inode id of the root directory.
pub const ROOT_INO: InodeId = InodeId(1);

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum FileKind {
    File,
    Directory,
    Symlink,
    /// Named pipe: metadata only; the kernel of each mount carries its data.
    Fifo,
    /// Unix socket: metadata only.
    Socket,
    /// Server-internal: a name of a hard-linked file. The inode lives as an inode object on
    /// node `Inode::link_home` (the node that held the file when it got its second name);
    /// servers resolve it, clients never see this kind.
    HardLink,
    /// Character device: metadata only (`Inode::rdev` names the device; opening it is the
    /// kernel's business, and mounts are `nodev`).
    CharDevice,
    /// Block device: metadata only, as `CharDevice`.
    BlockDevice,
}

impl FileKind {
    /// Kinds that carry no data of their own here: FIFOs, sockets and devices.
    #[must_use]
    pub fn is_special(self) -> bool {
        matches!(
            self,
            FileKind::Fifo | FileKind::Socket | FileKind::CharDevice | FileKind::BlockDevice
        )
    }
}

/// One extended attribute (only the `user.` namespace is stored).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Xattr {
    pub name: String,
    #[serde(with = "serde_bytes")]
    pub value: Vec<u8>,
}

/// The mark of a directory object inside a tree frozen for its metadata index
/// (docs/metadata-index.md): every change of its entries is refused with `ReadOnly`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReadOnlyMark {
    /// The inode of the frozen tree's root.
    pub root: InodeId,
    /// The version of the tree's index the freeze is for.
    pub version: u64,
}

/// An inode, embedded in its directory entry (FPFS embedded i-nodes). Times are nanoseconds
/// since the Unix epoch.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Inode {
    pub ino: InodeId,
    pub kind: FileKind,
    /// Permission bits only (0o7777); the kind is in `kind`.
    pub mode: u32,
    pub uid: u32,
    pub gid: u32,
    pub size: u64,
    pub nlink: u32,
    pub atime_ns: i64,
    pub mtime_ns: i64,
    pub ctime_ns: i64,
    pub symlink_target: Option<String>,
    /// Extended attributes, embedded like the rest of the inode (bounded by
    /// `limits::XATTR_TOTAL_BYTES_MAX`), so `getxattr` costs no extra lookup.
    pub xattrs: Vec<Xattr>,
    /// For `HardLink` entries: the node holding the inode object. Also set on the inode
    /// object itself (what clients see of a file that ever had a second name): its
    /// changes are applied, and their times stamped, at that node.
    pub link_home: Option<myriad_placement::PartitionId>,
    /// The device of a `CharDevice` or `BlockDevice` (Linux `dev_t`); 0 for other kinds.
    pub rdev: u64,
}

impl Inode {
    /// A new inode of `kind` made at `now`: empty, one link, all three times `now`.
    #[must_use]
    pub fn new(ino: InodeId, kind: FileKind, mode: u32, (uid, gid): (u32, u32), now: i64) -> Inode {
        Inode {
            ino,
            kind,
            mode,
            uid,
            gid,
            size: 0,
            nlink: 1,
            atime_ns: now,
            mtime_ns: now,
            ctime_ns: now,
            symlink_target: None,
            xattrs: Vec::new(),
            link_home: None,
            rdev: 0,
        }
    }

    /// Whether this non-directory is its one name's own: one link, and its inode kept in
    /// that entry rather than in an inode object at a home node (a file that had a second
    /// name stays there), so a change of it is applied where the name is.
    #[must_use]
    pub fn alone_in_its_entry(&self) -> bool {
        self.nlink == 1 && self.link_home.is_none()
    }
}

/// Who is asking. Trusted as sent for now (authentication is a separate issue).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Caller {
    pub uid: u32,
    pub gid: u32,
    pub groups: Vec<u32>,
}

impl Caller {
    /// Whether `gid` is the caller's group or one of its supplementary groups.
    #[must_use]
    pub fn in_group(&self, gid: u32) -> bool {
        self.gid == gid || self.groups.contains(&gid)
    }

    #[must_use]
    pub fn root() -> Caller {
        Caller {
            uid: 0,
            gid: 0,
            groups: Vec::new(),
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DirEntry {
    pub name: String,
    pub inode: Inode,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct StatFs {
    pub total_bytes: u64,
    pub free_bytes: u64,
    pub used_bytes: u64,
    pub files: u64,
    /// Each storage tier of a server with a fast tier (`--fast-dir`); empty: one store.
    pub tiers: Vec<TierStat>,
}

/// One storage tier of a server (docs/redundancy.md "Tiers").
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TierStat {
    /// "fast" or "capacity".
    pub name: String,
    /// Size and free bytes of the disk holding the tier.
    pub total_bytes: u64,
    pub free_bytes: u64,
    /// Bytes of the tier's store.
    pub used_bytes: u64,
    /// Past its high-water mark: new first chunks go to the capacity tier.
    pub overflowing: bool,
    /// First-chunk blocks sent to the capacity tier, and moved back since, since start.
    pub overflowed_blocks: u64,
    pub moved_back_blocks: u64,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct OpCount {
    pub op: String,
    pub count: u64,
}

/// A server's request counters since start or the last reset.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CounterSnapshot {
    pub node_id: myriad_placement::NodeId,
    pub epoch: u64,
    /// Requests received from clients, by operation.
    pub client_requests: Vec<OpCount>,
    /// Requests received from other servers, by operation.
    pub server_requests: Vec<OpCount>,
    /// Requests this server sent to other servers.
    pub server_requests_sent: u64,
    /// Replicated batches this server's copies received, alone or in bundles.
    pub batches_received: u64,
    /// Group commits (fsyncs) and the mutations they covered.
    pub syncs: u64,
    pub synced_mutations: u64,
    /// Ancestor permission checks answered here (own store or a replica) vs. by a remote node.
    pub ancestor_checks_local: u64,
    pub ancestor_checks_remote: u64,
    /// Ancestor replicas held now, and subscribers this node pushes changes to.
    pub replicas_held: u64,
    pub subscriptions_served: u64,
    /// Change notifications sent to subscribers, and their total latency.
    pub invalidations_sent: u64,
    pub invalidation_latency_us: u64,
    /// True while the server holds a lease from the Raft leader (it serves only then).
    pub serving: bool,
    /// The Raft leader as this server knows it (0: none).
    pub raft_leader: myriad_placement::NodeId,
    /// Partitions this server serves as primary and holds backup copies of.
    pub primaries: u64,
    pub backups: u64,
    /// This server's zone (docs/zones.md).
    pub zone: String,
    /// Requests this server served and their bytes, by the zone of the peer that sent
    /// them and by kind, its own zone included (every exchange is counted once, by the
    /// server that serves it). In zone order, then kind order.
    pub zone_traffic: Vec<ZoneTraffic>,
    /// Popular directories whose permissions this server holds replicas of now (TyrFS),
    /// at most `limits::POPULAR_LISTED_MAX`, in path order.
    pub popular: Vec<String>,
}

/// What a request is for, for traffic counters: a client's file and directory operations
/// (`File`, including the server-to-server steps they take: two-phase renames, directory
/// moves, directory times), the permission metadata of ancestors kept as leased replicas
/// (`Ancestors`: TyrFS Algorithm 1's fetches, renewals and change pushes; for a pinned
/// tree, the directories above its root, which live outside it), copies of partitions
/// (`Replication`: batches, catch-up, fragments), the cluster map and leases
/// (`Membership`: Raft, leases), or tools (`Control`: counters, maps, fsck, statfs).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum TrafficKind {
    File,
    Ancestors,
    Replication,
    Membership,
    Control,
}

impl TrafficKind {
    pub const ALL: [TrafficKind; 5] = [
        TrafficKind::File,
        TrafficKind::Ancestors,
        TrafficKind::Replication,
        TrafficKind::Membership,
        TrafficKind::Control,
    ];

    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            TrafficKind::File => "file",
            TrafficKind::Ancestors => "ancestors",
            TrafficKind::Replication => "replication",
            TrafficKind::Membership => "membership",
            TrafficKind::Control => "control",
        }
    }
}

/// Requests from one zone of one kind, served by one server: how many, the bytes they
/// carried in, and the bytes of the replies sent back.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ZoneTraffic {
    pub zone: String,
    pub kind: TrafficKind,
    pub requests: u64,
    pub bytes_in: u64,
    pub bytes_out: u64,
}

impl ZoneTraffic {
    /// Bytes both ways.
    #[must_use]
    pub fn bytes(&self) -> u64 {
        self.bytes_in + self.bytes_out
    }
}

impl CounterSnapshot {
    #[must_use]
    pub fn client_total(&self) -> u64 {
        self.client_requests.iter().map(|c| c.count).sum()
    }
    #[must_use]
    pub fn server_total(&self) -> u64 {
        self.server_requests.iter().map(|c| c.count).sum()
    }

    /// Bytes of `kind` exchanged with peers in zones other than this server's.
    #[must_use]
    pub fn cross_zone_bytes(&self, kind: TrafficKind) -> u64 {
        self.zone_traffic
            .iter()
            .filter(|t| t.kind == kind && t.zone != self.zone)
            .map(ZoneTraffic::bytes)
            .sum()
    }

    #[must_use]
    pub fn client_op(&self, op: &str) -> u64 {
        self.client_requests
            .iter()
            .filter(|c| c.op == op)
            .map(|c| c.count)
            .sum()
    }
}
