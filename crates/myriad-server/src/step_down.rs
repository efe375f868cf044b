//! A server that stops on purpose hands its partitions over before it goes (issue 49):
//! on SIGTERM (`Stop::HandOver`) and when its disk failed an fsync. It has already stopped
//! serving (partitions deposed, no lease asked for again), so it marks itself down through
//! the map authority: every partition it led gets its next in-sync copy as primary at
//! once, and the partitions it copies go on without waiting for it. The failure
//! detector's `DOWN_AFTER` of silence is not waited (docs/replication.md "Failures").
//! Started again, it is marked up by the leader as any server heard again (it catches up
//! as a backup; a disk that failed made its copies behind, never promoted meanwhile).

use std::time::{Duration, Instant};

use myriad_placement::{ClusterMap, NodeId};

use crate::seams::Authority;

/// The longest a stop spends handing its partitions over: a group without a majority
/// cannot commit, and the others then detect the silence as usual.
pub(crate) const HAND_OVER_MAX: Duration = Duration::from_secs(4);

/// Why a server hands its partitions over (for its log line).
#[derive(Clone, Copy, Debug)]
pub(crate) enum Why {
    /// A planned stop (SIGTERM).
    Stop,
    /// Its disk failed an fsync: nothing it writes can be trusted to be durable.
    DiskFailed,
}

/// Marks server `me`, which serves nothing any more, down through `authority`, starting
/// from the authority's newest map (else `known`). Skipped when no other server is up
/// (nobody could take over); bounded by `HAND_OVER_MAX`. Returns whether it was marked down.
pub(crate) async fn hand_over(
    authority: &dyn Authority,
    me: NodeId,
    known: &ClusterMap,
    why: Why,
) -> bool {
    let started = Instant::now();
    let work = async {
        // Another change may come first: then again from the map after it.
        for _ in 0..3 {
            let map = authority.committed_map().unwrap_or_else(|| known.clone());
            let others_up = map.nodes.iter().any(|n| n.id != me && map.is_up(n.id));
            let Some(next) = map.mark_down(me).filter(|_| others_up) else {
                return false;
            };
            let epoch = next.epoch;
            match authority.propose_map(next).await {
                Ok(()) => {
                    tracing::info!(
                        server = %me,
                        epoch,
                        ?why,
                        took_ms = started.elapsed().as_millis() as u64,
                        "handed this server's partitions to their copies (marked down)"
                    );
                    return true;
                }
                Err(e) => tracing::debug!("hand-over at epoch {epoch}: {e}"),
            }
        }
        false
    };
    match tokio::time::timeout(HAND_OVER_MAX, work).await {
        Ok(done) => done,
        Err(_) => {
            tracing::warn!(
                server = %me,
                ?why,
                "could not hand this server's partitions over in time: the others will \
                 notice its silence"
            );
            false
        }
    }
}
