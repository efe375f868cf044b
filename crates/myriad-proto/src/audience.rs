//! Requests by who may send them (`Request`'s audiences): a client's (in its envelope), a
//! server's own, administration, a peer partition's, a copy's. What the servers ask of any
//! request before serving it (its name, its traffic kind, whether it is held to the map
//! epoch or to the disk reserve) is answered here.

use serde::{Deserialize, Serialize};

use crate::describe::{Change, Disk};
use crate::envelope::Envelope;
use crate::peer_request::{InodeOp, PeerRequest, ReplicaRequest};
use crate::request::ClientRequest;
use crate::server_request::{AdminRequest, ServerRequest};

/// Every request, by audience. What a connection may send is decided by the type its frames
/// decode to: a connection with a client key decodes `FromClient` (a prefix of this enum:
/// same variant indices, so the bytes agree), which has no way to say a peer, replica or
/// administration request; such a frame fails to decode and is refused.
///
/// `C` is what a client request is: on the wire, the request in its envelope (`Envelope`);
/// once a partition has opened the envelope, the request alone (`Request<ClientRequest>`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Request<C = Envelope> {
    Client(C),
    Server(ServerRequest),
    Admin(AdminRequest),
    Peer(PeerRequest),
    Replica(ReplicaRequest),
}

/// What a client-key connection may send: the first two audiences of `Request`, with the
/// same variant indices (checked by a test).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum FromClient {
    Client(Envelope),
    Server(ServerRequest),
}

impl From<FromClient> for Request {
    fn from(r: FromClient) -> Request {
        match r {
            FromClient::Client(c) => Request::Client(c),
            FromClient::Server(s) => Request::Server(s),
        }
    }
}

impl From<ClientRequest> for Request {
    fn from(r: ClientRequest) -> Request {
        Request::Client(Envelope::Alone(r))
    }
}

impl From<Envelope> for Request {
    fn from(r: Envelope) -> Request {
        Request::Client(r)
    }
}

impl Request {
    /// The request with its envelope opened, if it had none (a client request sent
    /// alone, or another audience's); else the envelope.
    pub fn opened(self) -> Result<Request<ClientRequest>, Box<Envelope>> {
        Ok(match self {
            Request::Client(Envelope::Alone(r)) => Request::Client(r),
            Request::Client(envelope) => return Err(Box::new(envelope)),
            Request::Server(r) => Request::Server(r),
            Request::Admin(r) => Request::Admin(r),
            Request::Peer(r) => Request::Peer(r),
            Request::Replica(r) => Request::Replica(r),
        })
    }
}

/// What `Request`'s methods ask of its client request, alone or in its envelope.
pub trait ClientPart {
    /// Short stable name (`Request::op_name`).
    fn name(&self) -> &'static str;
    /// What it changes, if it is a change to admit by disk space (`Request::grows_storage`).
    fn change(&self) -> Option<Change<'_>>;
}

impl ClientPart for ClientRequest {
    fn name(&self) -> &'static str {
        self.op_name()
    }

    fn change(&self) -> Option<Change<'_>> {
        ClientRequest::change(self)
    }
}

/// A request sent alone is what it is wherever it is read; one in an envelope is
/// admitted by the partition that opens the envelope (the server that first reads the
/// frame, `Host`, admits nothing of it).
impl ClientPart for Envelope {
    fn name(&self) -> &'static str {
        self.op_name()
    }

    fn change(&self) -> Option<Change<'_>> {
        match self {
            Envelope::Alone(r) => r.change(),
            _ => None,
        }
    }
}

impl From<ServerRequest> for Request {
    fn from(r: ServerRequest) -> Request {
        Request::Server(r)
    }
}

impl From<AdminRequest> for Request {
    fn from(r: AdminRequest) -> Request {
        Request::Admin(r)
    }
}

impl From<PeerRequest> for Request {
    fn from(r: PeerRequest) -> Request {
        Request::Peer(r)
    }
}

impl From<ReplicaRequest> for Request {
    fn from(r: ReplicaRequest) -> Request {
        Request::Replica(r)
    }
}

impl<C> Request<C> {
    /// What the request is for, for traffic counters (`TrafficKind`).
    #[must_use]
    pub fn traffic_kind(&self) -> crate::TrafficKind {
        use crate::TrafficKind;
        match self {
            Request::Client(_) => TrafficKind::File,
            Request::Server(_) | Request::Admin(_) => TrafficKind::Control,
            Request::Replica(_) => TrafficKind::Replication,
            Request::Peer(p) => match p {
                PeerRequest::Raft { .. } | PeerRequest::Lease | PeerRequest::PartitionSeqs => {
                    TrafficKind::Membership
                }
                PeerRequest::LendReads => TrafficKind::Replication,
                PeerRequest::GetAttrs { .. }
                | PeerRequest::RenewAttrs { .. }
                | PeerRequest::Unsubscribe { .. }
                | PeerRequest::AttrUpdate { .. }
                | PeerRequest::InvalidatePrefix { .. } => TrafficKind::Ancestors,
                PeerRequest::PutFragments { .. }
                | PeerRequest::DropFragments { .. }
                | PeerRequest::KeepsFragments
                | PeerRequest::FragmentNamed { .. } => TrafficKind::Replication,
                _ => TrafficKind::File,
            },
        }
    }
}

impl<C: ClientPart> Request<C> {
    /// Short stable name, used for counters and logs.
    #[must_use]
    pub fn op_name(&self) -> &'static str {
        match self {
            Request::Client(r) => r.name(),
            Request::Server(r) => r.op_name(),
            Request::Admin(r) => r.op_name(),
            Request::Peer(r) => r.op_name(),
            Request::Replica(r) => r.op_name(),
        }
    }

    /// Requests that are not file system traffic (not counted as such, and not held to the
    /// map epoch): the server's own, administration, and the cluster-map group's.
    #[must_use]
    pub fn is_admin(&self) -> bool {
        match self {
            Request::Server(r) => !matches!(
                r,
                ServerRequest::StatFs
                    | ServerRequest::LeasePoll { .. }
                    | ServerRequest::LeaseRenew { .. }
                    | ServerRequest::ReadFragment { .. }
            ),
            Request::Admin(_) => true,
            Request::Peer(r) => matches!(
                r,
                PeerRequest::Raft { .. }
                    | PeerRequest::Lease
                    | PeerRequest::PartitionSeqs
                    | PeerRequest::KeepsFragments
            ),
            Request::Client(_) | Request::Replica(_) => false,
        }
    }
}

impl<C: ClientPart> Request<C> {
    /// Client requests that may need more disk: refused with `NoSpace` while the server's
    /// free space is below its reserve (myriad-server space.rs). `AtInode` carries a client's
    /// operation on a hard-linked file to the server holding its inode, which may be another
    /// server with a fuller disk, so it counts too.
    #[must_use]
    pub fn grows_storage(&self) -> bool {
        match self {
            Request::Client(c) => c.change().is_some_and(|c| c.disk == Disk::Grows),
            Request::Peer(p) => matches!(
                p,
                PeerRequest::AtInode {
                    op: InodeOp::Write { .. }
                        | InodeOp::ExtendSize { .. }
                        | InodeOp::SetXattr { .. },
                    ..
                } | PeerRequest::PutFragments { .. }
            ),
            _ => false,
        }
    }

    /// Client requests that write anything at all, frees included: refused too once the
    /// disk is all but full, so that the storage engine itself never runs out of space.
    #[must_use]
    pub fn writes_storage(&self) -> bool {
        match self {
            Request::Client(c) => c.change().is_some_and(|c| c.disk != Disk::Untouched),
            Request::Peer(PeerRequest::AtInode {
                op: InodeOp::Truncate { .. } | InodeOp::SetAttr { .. },
                ..
            }) => true,
            Request::Peer(_) => self.grows_storage(),
            _ => false,
        }
    }
}
