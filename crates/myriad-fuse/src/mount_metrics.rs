//! The mount's metrics (`myriad mount --metrics ADDR`, docs/metrics.md): kernel requests
//! by kind, where `getattr` was answered (a lease, the inode table's fresh attributes, or
//! a server), and the native client's lookups answered without a request. Counted with
//! one relaxed atomic add each, on the FUSE threads.

use std::sync::atomic::{AtomicU64, Ordering};

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::Registry;

/// What the native client counts itself, shown with the mount's metrics.
#[derive(Clone, Copy, Debug, Default)]
pub struct ClientCounts {
    /// Lookups answered with no request: (from a lease, from an index).
    pub answered_locally: (u64, u64),
    /// `Client::setattrs_in_creates`.
    pub setattrs_in_creates: u64,
    /// `Client::behind_passes`.
    pub behind_passes: u64,
}

/// The kernel requests the mount answers (fuser's `Filesystem` callbacks).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KernelOp {
    Lookup,
    Forget,
    Getattr,
    Setattr,
    Readlink,
    Mknod,
    Mkdir,
    Unlink,
    Rmdir,
    Symlink,
    Rename,
    Link,
    Open,
    Read,
    Write,
    Flush,
    Release,
    Getlk,
    Setlk,
    Fsync,
    Opendir,
    Readdir,
    Readdirplus,
    Releasedir,
    Fsyncdir,
    Statfs,
    Setxattr,
    Getxattr,
    Listxattr,
    Removexattr,
    Access,
    Fallocate,
    CopyFileRange,
    Lseek,
    Ioctl,
    Poll,
    Create,
}

/// `KernelOp`'s names, in its order (the `op` label).
const KERNEL_OPS: [&str; 37] = [
    "lookup",
    "forget",
    "getattr",
    "setattr",
    "readlink",
    "mknod",
    "mkdir",
    "unlink",
    "rmdir",
    "symlink",
    "rename",
    "link",
    "open",
    "read",
    "write",
    "flush",
    "release",
    "getlk",
    "setlk",
    "fsync",
    "opendir",
    "readdir",
    "readdirplus",
    "releasedir",
    "fsyncdir",
    "statfs",
    "setxattr",
    "getxattr",
    "listxattr",
    "removexattr",
    "access",
    "fallocate",
    "copy_file_range",
    "lseek",
    "ioctl",
    "poll",
    "create",
];

/// Where a `getattr` was answered.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AttrFrom {
    /// Attributes kept under a directory lease.
    Lease,
    /// Attributes this mount saw within their time to live.
    Cache,
    /// Asked a server.
    Server,
}

const ATTR_FROM: [&str; 3] = ["lease", "cache", "server"];

pub struct MountMetrics {
    kernel: [AtomicU64; KERNEL_OPS.len()],
    attrs: [AtomicU64; ATTR_FROM.len()],
    /// Kernel requests that came over FUSE over io_uring (`--fuse-ring`), counted by fuser.
    pub ring_requests: std::sync::Arc<AtomicU64>,
    at_hand: [AtomicU64; AT_HAND.len()],
}

/// Kernel requests answered on the FUSE thread, with no task (`Mount::lookup_at_hand`,
/// `Mount::opendir_at_hand`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AtHand {
    Lookup,
    Opendir,
}

const AT_HAND: [&str; 2] = ["lookup", "opendir"];

impl Default for MountMetrics {
    fn default() -> MountMetrics {
        MountMetrics {
            kernel: std::array::from_fn(|_| AtomicU64::new(0)),
            attrs: std::array::from_fn(|_| AtomicU64::new(0)),
            ring_requests: Default::default(),
            at_hand: std::array::from_fn(|_| AtomicU64::new(0)),
        }
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OpLabel {
    op: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct SourceLabel {
    source: &'static str,
}

impl MountMetrics {
    pub fn kernel(&self, op: KernelOp) {
        self.kernel[op as usize].fetch_add(1, Ordering::Relaxed);
    }

    pub fn attr_from(&self, from: AttrFrom) {
        self.attrs[from as usize].fetch_add(1, Ordering::Relaxed);
    }

    pub fn at_hand(&self, op: AtHand) {
        self.at_hand[op as usize].fetch_add(1, Ordering::Relaxed);
    }

    /// One OpenMetrics scrape, with the native client's own counts.
    pub fn render(&self, client: ClientCounts) -> String {
        let answered_locally = client.answered_locally;
        let mut r = Registry::with_prefix("myriad_mount");
        let kernel = Family::<OpLabel, Counter>::default();
        for (op, n) in KERNEL_OPS.iter().zip(&self.kernel) {
            kernel
                .get_or_create(&OpLabel { op })
                .inc_by(n.load(Ordering::Relaxed));
        }
        r.register(
            "kernel_requests",
            "Requests from the kernel, by kind",
            kernel,
        );
        let attrs = Family::<SourceLabel, Counter>::default();
        for (source, n) in ATTR_FROM.iter().zip(&self.attrs) {
            attrs
                .get_or_create(&SourceLabel { source })
                .inc_by(n.load(Ordering::Relaxed));
        }
        r.register(
            "getattr_answers",
            "getattr requests by where they were answered (lease, cache: no request)",
            attrs,
        );
        let local = Family::<SourceLabel, Counter>::default();
        local
            .get_or_create(&SourceLabel { source: "lease" })
            .inc_by(answered_locally.0);
        local
            .get_or_create(&SourceLabel { source: "index" })
            .inc_by(answered_locally.1);
        r.register(
            "lookups_answered_locally",
            "Lookups the client answered with no request, from a lease or a metadata index",
            local,
        );
        let counts = [
            (
                "ring_requests",
                "Kernel requests that came over FUSE over io_uring (--fuse-ring) rather than /dev/fuse",
                self.ring_requests.load(Ordering::Relaxed),
            ),
            (
                "setattrs_in_creates",
                "Setattrs answered behind sent inside the create before them (one change for the servers)",
                client.setattrs_in_creates,
            ),
            (
                "behind_passes",
                "Batches written behind that went before a directory's setattr still waiting for its own changes",
                client.behind_passes,
            ),
        ];
        for (name, help, n) in counts {
            let c = Counter::<u64>::default();
            c.inc_by(n);
            r.register(name, help, c);
        }
        let at_hand = Family::<OpLabel, Counter>::default();
        for (op, n) in AT_HAND.iter().zip(&self.at_hand) {
            at_hand
                .get_or_create(&OpLabel { op })
                .inc_by(n.load(Ordering::Relaxed));
        }
        r.register(
            "answered_at_hand",
            "Kernel requests answered on the FUSE thread with no task, from a lease or an index",
            at_hand,
        );
        let mut out = String::new();
        // Writing to a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut out, &r);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kernel_op_has_its_own_name_and_counts_land_on_it() {
        let m = MountMetrics::default();
        m.kernel(KernelOp::Lookup);
        m.kernel(KernelOp::Create);
        m.kernel(KernelOp::Create);
        m.kernel(KernelOp::CopyFileRange);
        m.attr_from(AttrFrom::Cache);
        let text = m.render(ClientCounts {
            answered_locally: (5, 0),
            setattrs_in_creates: 3,
            behind_passes: 0,
        });
        assert!(
            text.contains(r#"myriad_mount_kernel_requests_total{op="lookup"} 1"#),
            "{text}"
        );
        assert!(text.contains(r#"myriad_mount_kernel_requests_total{op="create"} 2"#));
        assert!(text.contains(r#"myriad_mount_kernel_requests_total{op="copy_file_range"} 1"#));
        assert!(text.contains(r#"myriad_mount_getattr_answers_total{source="cache"} 1"#));
        assert!(text.contains(r#"myriad_mount_lookups_answered_locally_total{source="lease"} 5"#));
        assert!(
            text.contains("myriad_mount_ring_requests_total 0"),
            "{text}"
        );
        assert!(text.contains("myriad_mount_setattrs_in_creates_total 3"));
        assert!(text.ends_with("# EOF\n"));
        let mut names = KERNEL_OPS.to_vec();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), KERNEL_OPS.len());
        assert_eq!(KernelOp::Create as usize, KERNEL_OPS.len() - 1);
    }
}
