//! The primary's log of its recent batches (docs/write-path.md, part 3): a copy that comes
//! back at batch `s` over the chain this log has at `s` gets the batches after `s` from
//! here, not a whole copy of the partition. Kept in memory, bounded by bytes and age; a
//! copy that was away longer than the log reaches back is copied whole, as before.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

use myriad_proto::ReplOp;
use tokio::time::Instant;

use crate::commit::Numbered;
use crate::replication::wire::ops_bytes;

/// Bytes of batches (keys and values) a partition's log keeps at most.
pub(crate) const LOG_BYTES_MAX: usize = 32 << 20;
/// Batches older than this leave the log: a copy away longer is copied whole.
pub(crate) const LOG_AGE_MAX: Duration = Duration::from_secs(600);

struct Entry {
    at: Numbered,
    ops: Arc<Vec<ReplOp>>,
    bytes: usize,
    when: Instant,
}

/// The batches after some batch, in order, each with its place in the history.
pub(crate) type Tail = Vec<(Numbered, Arc<Vec<ReplOp>>)>;

#[derive(Default)]
pub(crate) struct RecentBatches {
    entries: VecDeque<Entry>,
    bytes: usize,
}

/// What an entry costs: its keys and values, and 16 bytes of bookkeeping per operation.
fn entry_bytes(ops: &[ReplOp]) -> usize {
    ops_bytes(ops) + 16 * ops.len()
}

impl RecentBatches {
    /// Appends batch `at` (batches come in order, none skipped; a gap empties the log).
    pub(crate) fn push(&mut self, at: Numbered, ops: Arc<Vec<ReplOp>>) {
        if self.entries.back().is_some_and(|e| e.at.seq + 1 != at.seq) {
            self.entries.clear();
            self.bytes = 0;
        }
        let bytes = entry_bytes(&ops);
        let now = Instant::now();
        self.entries.push_back(Entry {
            at,
            ops,
            bytes,
            when: now,
        });
        self.bytes += bytes;
        while let Some(first) = self.entries.front() {
            let old = now.saturating_duration_since(first.when) > LOG_AGE_MAX;
            if !(self.bytes > LOG_BYTES_MAX || old) || self.entries.len() == 1 {
                break;
            }
            self.bytes -= first.bytes;
            self.entries.pop_front();
        }
    }

    /// Bytes of the logged batches after batch `seq`, if the log reaches back that far;
    /// `None` for a copy further behind (it is made whole instead).
    pub(crate) fn bytes_after(&self, seq: u64) -> Option<u64> {
        let first = self.entries.front()?.at.seq;
        if seq + 1 < first {
            return None;
        }
        Some(
            self.entries
                .iter()
                .filter(|e| e.at.seq > seq)
                .map(|e| e.bytes as u64)
                .sum(),
        )
    }

    /// The batches after batch `seq` (whose chain must be `chain`) up to `upto`, if the
    /// log reaches back that far and holds them all; `None` otherwise (a whole copy).
    pub(crate) fn after(&self, seq: u64, chain: u64, upto: u64) -> Option<Tail> {
        if seq >= upto {
            return None;
        }
        let first = self.entries.front()?.at.seq;
        if seq + 1 < first {
            return None;
        }
        let start = usize::try_from(seq + 1 - first).ok()?;
        let tail: Tail = self
            .entries
            .iter()
            .skip(start)
            .take_while(|e| e.at.seq <= upto)
            .map(|e| (e.at, e.ops.clone()))
            .collect();
        let (head, _) = tail.first()?;
        let (last, _) = tail.last()?;
        (head.seq == seq + 1 && head.prev_chain == chain && last.seq == upto).then_some(tail)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(seq: u64) -> Numbered {
        Numbered {
            seq,
            prev_chain: seq * 10 - 10,
            chain: seq * 10,
        }
    }

    fn ops(n: usize) -> Arc<Vec<ReplOp>> {
        Arc::new(vec![ReplOp {
            space: 1,
            key: vec![0; n],
            value: None,
        }])
    }

    #[test]
    fn the_log_gives_the_tail_after_a_batch_on_its_chain() {
        let mut log = RecentBatches::default();
        for s in 1..=10 {
            log.push(at(s), ops(10));
        }
        let tail = log.after(4, 40, 10).unwrap_or_default();
        let seqs: Vec<u64> = tail.iter().map(|(a, _)| a.seq).collect();
        assert_eq!(seqs, vec![5, 6, 7, 8, 9, 10]);
        // Another history at 4 (another chain): no tail.
        assert!(log.after(4, 41, 10).is_none());
        // Up to date, or ahead: nothing to give.
        assert!(log.after(10, 100, 10).is_none());
        // From the very start (batch 0, chain 0).
        assert_eq!(log.after(0, 0, 10).map(|t| t.len()), Some(10));
    }

    #[test]
    fn the_log_is_bounded_by_bytes_and_forgets_what_it_dropped() {
        let mut log = RecentBatches::default();
        let big = LOG_BYTES_MAX / 4;
        for s in 1..=10 {
            log.push(at(s), ops(big));
        }
        assert!(log.bytes <= LOG_BYTES_MAX);
        assert!(log.after(2, 20, 10).is_none(), "batch 3 is gone");
        assert!(log.after(8, 80, 10).is_some());
        // What a copy at batch 8 still lacks, in bytes; one at 2 is past the log.
        let entry = entry_bytes(&ops(big));
        assert_eq!(log.bytes_after(8), Some(2 * entry as u64));
        assert_eq!(log.bytes_after(10), Some(0));
        assert_eq!(log.bytes_after(2), None);
        // A gap (batches pushed out of order) empties it.
        log.push(at(20), ops(1));
        assert!(log.after(8, 80, 10).is_none());
    }
}
