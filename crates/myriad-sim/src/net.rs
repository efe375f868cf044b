//! The simulated network: every request between servers, and from clients, goes through
//! here, with a delay drawn per message, and may be dropped (the request, or its answer),
//! duplicated, or blocked by a partition. A server that is down refuses connections.
//! Addresses are the map's: `sim-<server id>`.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use futures::future::BoxFuture;
use myriad_placement::{NodeId, PartitionId};
use myriad_proto::{Caller, Endpoints, Request, RequestFrame, Response, WireError};
use myriad_server::embed::EmbeddedServer;
use rand::Rng;

use crate::rng::SimRng;
use crate::trace::Trace;

/// Probabilities and delays of the network's faults.
#[derive(Clone, Debug)]
pub struct NetFaults {
    /// A request is lost on its way.
    pub drop_request: f64,
    /// An answer is lost on its way back (the request was served).
    pub drop_answer: f64,
    /// A request is delivered twice (the second answer goes nowhere).
    pub duplicate: f64,
    /// Most messages take up to this long.
    pub delay_max: Duration,
    /// A few take up to this long (reordering).
    pub delay_tail: Duration,
}

impl NetFaults {
    #[must_use]
    pub fn none() -> NetFaults {
        NetFaults {
            drop_request: 0.0,
            drop_answer: 0.0,
            duplicate: 0.0,
            delay_max: Duration::from_millis(1),
            delay_tail: Duration::from_millis(1),
        }
    }
}

/// Server id 0 stands for the clients.
pub const CLIENTS: NodeId = NodeId(0);

struct NetState {
    /// Servers that are up, by id (index); `None`: down.
    servers: Vec<Option<Arc<EmbeddedServer>>>,
    /// Incarnation of each server: bumped when it crashes, so what its old tasks send is
    /// refused (a crashed process sends nothing).
    incarnations: Vec<u64>,
    /// Pairs of parties that cannot reach each other (both orders stored).
    blocked: BTreeSet<(NodeId, NodeId)>,
    faults: NetFaults,
    /// Invariant 4: the one server whose batches backups accepted, per (partition, epoch).
    writers: BTreeMap<(PartitionId, u64), NodeId>,
    /// The first breach of invariant 4, if any.
    violation: Option<String>,
    /// Requests of this kind (`op_name`) are applied but their answers lost: a test's way to
    /// leave an operation's outcome unknown to its sender at one chosen step.
    answers_lost: Option<&'static str>,
    /// Requests delivered to a server, by name (`delivered_names`): the report's proof
    /// that a run exercised what its configuration turned on.
    delivered: BTreeMap<&'static str, u64>,
}

pub struct Net {
    state: Mutex<NetState>,
    rng: SimRng,
    trace: Trace,
}

/// What a delivered request counts as: its name, and for a client's envelopes what it
/// came in (`leased`, `leased_exclusive`, `read_as`, `once`).
fn delivered_names(body: &Request) -> Vec<&'static str> {
    use myriad_proto::Envelope as E;
    let envelope = match body {
        Request::Client(E::Leased {
            exclusive: true, ..
        }) => Some("leased_exclusive"),
        Request::Client(E::Leased { .. }) => Some("leased"),
        Request::Client(E::ReadAs { .. }) => Some("read_as"),
        Request::Client(E::Once(_)) => Some("once"),
        _ => None,
    };
    // The rmdirs and mkdirs a write-behind journal sent (the other changes of a batch
    // are counted by what they cause at the servers).
    let batched = |f: fn(&myriad_proto::ClientRequest) -> bool| match body {
        Request::Client(E::Batch { ops, .. }) => ops.iter().filter(|o| f(&o.request)).count(),
        _ => 0,
    };
    let rmdirs = batched(|r| matches!(r, myriad_proto::ClientRequest::Rmdir { .. }));
    let mkdirs = batched(|r| matches!(r, myriad_proto::ClientRequest::MkdirNumbered { .. }));
    std::iter::once(body.op_name())
        .chain(envelope)
        .chain(std::iter::repeat_n("batched_rmdir", rmdirs))
        .chain(std::iter::repeat_n("batched_mkdir", mkdirs))
        .collect()
}

/// The name or directory a client request, or a server's request moving or making a
/// directory, is about, for the trace.
fn path_of(body: &Request) -> Option<&str> {
    use myriad_proto::{PeerRequest as P, ReadOf};
    let envelope = match body {
        Request::Client(envelope) => envelope,
        Request::Peer(
            P::DirFreeze { path, .. }
            | P::DirExport { path, .. }
            | P::DirFinish { path, .. }
            | P::DirObjectCreate { path, .. }
            | P::DirObjectBorn { path, .. }
            | P::DirSought { path, .. }
            | P::DirObjectRemove { path, .. },
        ) => return Some(path),
        Request::Peer(P::DirImport(part)) => return Some(&part.path),
        _ => return None,
    };
    let c = envelope.request()?;
    match (c.change(), c.read_of()) {
        (Some(change), _) => change.names[0],
        (None, Some(ReadOf::Name(p) | ReadOf::Listing(p))) => Some(p),
        (None, None) => None,
    }
}

/// What happens to one message.
struct Fate {
    there: Duration,
    back: Duration,
    drop_request: bool,
    drop_answer: bool,
    duplicate: bool,
}

impl Net {
    #[must_use]
    pub fn new(servers: usize, faults: NetFaults, rng: SimRng, trace: Trace) -> Arc<Net> {
        Arc::new(Net {
            state: Mutex::new(NetState {
                servers: vec![None; servers + 1],
                incarnations: vec![0; servers + 1],
                blocked: BTreeSet::new(),
                faults,
                writers: BTreeMap::new(),
                violation: None,
                answers_lost: None,
                delivered: BTreeMap::new(),
            }),
            rng,
            trace,
        })
    }

    fn lock(&self) -> MutexGuard<'_, NetState> {
        match self.state.lock() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        }
    }

    /// Server `id` is up (`Some`) or has crashed (`None`: its incarnation ends).
    pub fn set_server(&self, id: NodeId, server: Option<Arc<EmbeddedServer>>) {
        let mut s = self.lock();
        if server.is_none()
            && let Some(i) = s.incarnations.get_mut(id.index())
        {
            *i += 1;
        }
        if let Some(slot) = s.servers.get_mut(id.index()) {
            *slot = server;
        }
    }

    fn incarnation(&self, id: NodeId) -> u64 {
        self.lock()
            .incarnations
            .get(id.index())
            .copied()
            .unwrap_or(0)
    }

    /// Server `id` unless it crashed (it may have stopped by itself: `running`).
    #[must_use]
    pub fn server(&self, id: NodeId) -> Option<Arc<EmbeddedServer>> {
        self.lock().servers.get(id.index()).cloned().flatten()
    }

    /// Server `id` if it runs: not crashed, and not stopped by itself after its disk failed
    /// (as a process that exited, it answers nothing).
    #[must_use]
    pub fn running(&self, id: NodeId) -> Option<Arc<EmbeddedServer>> {
        self.server(id).filter(|s| !s.stopped())
    }

    pub fn set_faults(&self, faults: NetFaults) {
        self.lock().faults = faults;
    }

    /// Cuts `id` off from every other party (servers and clients) until `heal`.
    pub fn isolate(&self, id: NodeId) {
        let mut s = self.lock();
        let n = u32::try_from(s.servers.len()).unwrap_or(u32::MAX);
        for other in (0..n).map(NodeId) {
            if other != id {
                s.blocked.insert((id, other));
                s.blocked.insert((other, id));
            }
        }
    }

    /// Cuts `a` and `b` off from each other until `heal`.
    #[cfg(test)]
    pub fn block(&self, a: NodeId, b: NodeId) {
        let mut s = self.lock();
        s.blocked.insert((a, b));
        s.blocked.insert((b, a));
    }

    /// Invariant 4 (docs/simulation.md): a backup accepted batch `seq` of partition `pid`
    /// from server `from` at map `epoch`; no other server may have had batches accepted
    /// for that partition at that epoch (two primaries).
    fn accepted(&self, pid: PartitionId, epoch: u64, from: NodeId, seq: u64) {
        let mut s = self.lock();
        let first = *s.writers.entry((pid, epoch)).or_insert(from);
        if first != from && s.violation.is_none() {
            let what = format!(
                "two primaries: backups accepted batches of partition {pid} at epoch {epoch} from server {first} and from server {from} (batch {seq})"
            );
            drop(s);
            self.trace.event(format_args!("VIOLATION: {what}"));
            self.lock().violation = Some(what);
        }
    }

    /// Records a breach the driver saw (the first one is kept).
    pub fn violate(&self, what: String) {
        self.trace.event(format_args!("VIOLATION: {what}"));
        let mut s = self.lock();
        if s.violation.is_none() {
            s.violation = Some(what);
        }
    }

    /// The first breach of invariant 4 seen so far.
    #[must_use]
    pub fn violation(&self) -> Option<String> {
        self.lock().violation.clone()
    }

    /// From now on the answers to requests named `op` (`op_name`) are lost, after the
    /// request was applied; `None` stops it.
    #[cfg(test)]
    pub fn lose_answers(&self, op: Option<&'static str>) {
        self.lock().answers_lost = op;
    }

    /// Requests delivered so far, by name (`delivered_names`).
    #[must_use]
    pub fn delivered(&self) -> BTreeMap<&'static str, u64> {
        self.lock().delivered.clone()
    }

    pub fn heal(&self) {
        self.lock().blocked.clear();
    }

    #[must_use]
    pub fn reachable(&self, a: NodeId, b: NodeId) -> bool {
        !self.lock().blocked.contains(&(a, b))
    }

    fn fate(&self) -> Fate {
        let faults = self.lock().faults.clone();
        self.rng.with(|r| {
            let delay = |r: &mut rand::rngs::StdRng| {
                let cap = if r.gen_bool(0.02) {
                    faults.delay_tail
                } else {
                    faults.delay_max
                };
                // Whole milliseconds: the timer's resolution. (A sleep of a fraction of a
                // millisecond is rounded against the real instant the runtime started, which
                // differs from run to run: replays would diverge.)
                Duration::from_millis(r.gen_range(0..=u64::try_from(cap.as_millis()).unwrap_or(1)))
            };
            Fate {
                there: delay(r),
                back: delay(r),
                drop_request: r.gen_bool(faults.drop_request),
                drop_answer: r.gen_bool(faults.drop_answer),
                duplicate: r.gen_bool(faults.duplicate),
            }
        })
    }

    /// One request from party `from` to the server at `addr`, answered within `timeout`.
    async fn call(
        self: Arc<Self>,
        from: NodeId,
        incarnation: u64,
        addr: &str,
        frame: RequestFrame,
        timeout: Duration,
    ) -> Result<Response, WireError> {
        let to: NodeId = node_of(addr)
            .ok_or_else(|| WireError::Unavailable(format!("{addr}: no such address")))?;
        let fate = self.fate();
        let op = frame.body.op_name();
        // Batch numbers make a copy's history readable in the trace; (partition, batch) of
        // every batch the request carries (one, or a bundle's), for invariant 4.
        let batches = carried_batches(&frame);
        let seq: String = batches
            .iter()
            .flatten()
            .map(|(p, n)| match batches.len() {
                1 => format!(" #{n}"),
                _ => format!(" p{p}#{n}"),
            })
            .collect();
        let epoch = frame.epoch;
        let path = path_of(&frame.body).unwrap_or("");
        self.trace.event(format_args!(
            "send {from}->{to} {op} p{}{seq} e{epoch} {path}",
            frame.ends.target
        ));
        let lost = async {
            tokio::time::sleep(timeout).await;
            Err(WireError::TimedOut(format!(
                "{addr}: no answer within {timeout:?}"
            )))
        };
        if self.incarnation(from) != incarnation {
            return Err(WireError::Unavailable("the sender crashed".into()));
        }
        tokio::time::sleep(fate.there).await;
        if self.incarnation(from) != incarnation {
            return Err(WireError::Unavailable("the sender crashed".into()));
        }
        if !self.reachable(from, to) || fate.drop_request {
            self.trace.event(format_args!("lost {from}->{to} {op}"));
            return lost.await;
        }
        let Some(server) = self.running(to) else {
            return Err(WireError::Unavailable(format!(
                "{addr}: connection refused"
            )));
        };
        let from_server = (from != CLIENTS).then_some(from);
        if fate.duplicate {
            let again = server.handle(from_server, frame.clone());
            self.trace.event(format_args!("dup {from}->{to} {op}"));
            tokio::spawn(again);
        }
        self.trace.event(format_args!("deliver {from}->{to} {op}"));
        {
            let mut s = self.lock();
            for name in delivered_names(&frame.body) {
                *s.delivered.entry(name).or_default() += 1;
            }
        }
        let answer = tokio::time::timeout(timeout, server.handle(from_server, frame))
            .await
            .map(|a| a.result);
        let Ok(answer) = answer else {
            self.trace
                .event(format_args!("answer {to}->{from} {op}: timeout"));
            return Err(WireError::TimedOut(format!(
                "{addr}: no answer within {timeout:?}"
            )));
        };
        self.trace.event(format_args!(
            "answer {to}->{from} {op}: {}",
            match &answer {
                Ok(Response::ReplicaState { seq, chain, term }) => {
                    format!("at {seq:?} term {term} chain {chain:x}")
                }
                Ok(Response::Recorded(None)) => "none recorded".to_string(),
                Ok(Response::Recorded(Some(_))) => "ok, recorded".to_string(),
                Ok(_) => "ok".to_string(),
                Err(e) => format!("{e:?}"),
            }
            .chars()
            .take(80)
            .collect::<String>()
        ));
        let answers: Vec<bool> = match &answer {
            Ok(Response::Bundle(each)) => each
                .iter()
                .map(|a| matches!(a, Ok(Response::Unit)))
                .collect(),
            Ok(Response::Unit) => vec![true],
            _ => Vec::new(),
        };
        for (batch, ok) in batches.iter().zip(answers) {
            if let (Some((p, n)), true) = (batch, ok) {
                self.accepted(*p, epoch, from, *n);
            }
        }
        tokio::time::sleep(fate.back).await;
        let chosen = self.lock().answers_lost == Some(op);
        if !self.reachable(to, from) || fate.drop_answer || chosen {
            self.trace
                .event(format_args!("lost answer {to}->{from} {op}"));
            return lost.await;
        }
        answer
    }
}

/// One party's end of the network: a server incarnation's, or the clients'. Servers and
/// clients reach servers through the same trait (`myriad_net::Transport`).
pub struct Endpoint {
    net: Arc<Net>,
    me: NodeId,
    incarnation: u64,
}

impl Endpoint {
    #[must_use]
    pub fn new(net: Arc<Net>, me: NodeId) -> Endpoint {
        let incarnation = net.incarnation(me);
        Endpoint {
            net,
            me,
            incarnation,
        }
    }
}

impl myriad_client::Transport for Endpoint {
    fn call_with_timeout<'a>(
        &'a self,
        addr: &'a str,
        epoch: u64,
        ends: Endpoints,
        caller: &'a Caller,
        req: &'a Request,
        timeout: Duration,
    ) -> BoxFuture<'a, Result<Response, WireError>> {
        let frame = RequestFrame {
            id: 0,
            epoch,
            ends,
            caller: caller.clone(),
            body: req.clone(),
        };
        Box::pin(
            self.net
                .clone()
                .call(self.me, self.incarnation, addr, frame, timeout),
        )
    }

    /// A server's incarnation stands for the connection: a crash ends every one.
    fn link(&self, addr: &str) -> myriad_client::Link {
        let Some(to) = node_of(addr) else {
            return myriad_client::Link::default();
        };
        myriad_client::Link {
            connection: self.net.incarnation(to) + 1,
            version: myriad_proto::PROTOCOL_VERSION,
        }
    }
}

/// The server a simulated address names.
fn node_of(addr: &str) -> Option<NodeId> {
    addr.strip_prefix("sim-")
        .and_then(|n| n.parse().ok())
        .map(NodeId)
}

/// (partition, batch) of every replicated batch `frame` carries: its own, or each of a
/// bundle's items (None for an item that is not a batch), in the order of the answers.
fn carried_batches(frame: &RequestFrame) -> Vec<Option<(PartitionId, u64)>> {
    use myriad_proto::{ReplicaRequest, Request};
    match &frame.body {
        Request::Replica(ReplicaRequest::Replicate { seq, .. }) => {
            vec![Some((frame.ends.target, *seq))]
        }
        Request::Replica(ReplicaRequest::Bundle(items)) => items
            .iter()
            .map(|i| match &i.request {
                ReplicaRequest::Replicate { seq, .. } => Some((i.partition, *seq)),
                _ => None,
            })
            .collect(),
        _ => Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn batches_of_one_partition_and_epoch_from_two_servers_are_a_violation() {
        let net = Net::new(3, NetFaults::none(), SimRng::new(1), Trace::new());
        net.accepted(PartitionId(4), 7, NodeId(1), 10);
        net.accepted(PartitionId(4), 7, NodeId(1), 11);
        net.accepted(PartitionId(4), 8, NodeId(2), 12);
        net.accepted(PartitionId(5), 7, NodeId(3), 1);
        assert_eq!(net.violation(), None, "one writer per (partition, epoch)");
        net.accepted(PartitionId(4), 7, NodeId(2), 12);
        let v = net.violation().unwrap_or_default();
        assert!(v.contains("partition 4 at epoch 7"), "{v}");
    }
}
