//! The Raft log and vote on the node's store: entries in `RaftLog` keyed by index (8 bytes
//! BE), the vote, the committed id and the last purged id in `RaftState`. Every write is
//! fsynced before openraft is told it is done (`save_vote` returns after the sync; `append`
//! calls its `LogFlushed` callback after it).

use std::fmt::Debug;
use std::ops::{Bound, RangeBounds};
use std::sync::Arc;

use myriad_storage::{Batch, Kv, Pairs, Space};
use openraft::storage::{LogFlushed, LogState, RaftLogStorage};
use openraft::{Entry, LogId, OptionalSend, RaftLogReader, Vote};

use crate::codec::{What, decode, encode, store_err};
use crate::{NodeId, StorageError, TypeConfig};

const VOTE: &[u8] = b"vote";
const COMMITTED: &[u8] = b"committed";
const PURGED: &[u8] = b"purged";

/// Cheap to clone; a clone is also the log reader openraft asks for.
#[derive(Clone)]
pub struct LogStore {
    kv: Arc<dyn Kv>,
}

impl LogStore {
    #[must_use]
    pub fn new(kv: Arc<dyn Kv>) -> LogStore {
        LogStore { kv }
    }

    fn get<T: serde::de::DeserializeOwned>(
        &self,
        what: What,
        key: &[u8],
    ) -> Result<Option<T>, StorageError> {
        match self
            .kv
            .get(Space::RaftState, key)
            .map_err(|e| store_err(what, true, &e))?
        {
            Some(v) => Ok(Some(decode(what, &v)?)),
            None => Ok(None),
        }
    }

    fn write(&self, what: What, batch: Batch) -> Result<(), StorageError> {
        self.kv
            .commit(batch)
            .and_then(|()| self.kv.sync())
            .map_err(|e| store_err(what, false, &e))
    }

    /// Log rows (key, value) with index at least `from`, in order.
    fn rows_from(&self, from: u64) -> Result<Pairs, StorageError> {
        let after = from.checked_sub(1).map(u64::to_be_bytes);
        self.kv
            .scan(
                Space::RaftLog,
                b"",
                after.as_ref().map(|a| &a[..]),
                usize::MAX,
            )
            .map_err(|e| store_err(What::Logs, true, &e))
    }

    /// Keys of log entries with index in `[from, to)` (`to` `None`: to the end).
    fn keys_between(&self, from: u64, to: Option<u64>) -> Result<Vec<Vec<u8>>, StorageError> {
        Ok(self
            .rows_from(from)?
            .into_iter()
            .map(|(k, _)| k)
            .take_while(|k| to.is_none_or(|t| index_of(k).is_some_and(|i| i < t)))
            .collect())
    }
}

fn index_of(key: &[u8]) -> Option<u64> {
    Some(u64::from_be_bytes(key.get(..8)?.try_into().ok()?))
}

impl RaftLogReader<TypeConfig> for LogStore {
    async fn try_get_log_entries<RB: RangeBounds<u64> + Clone + Debug + OptionalSend>(
        &mut self,
        range: RB,
    ) -> Result<Vec<Entry<TypeConfig>>, StorageError> {
        let start = match range.start_bound() {
            Bound::Included(s) => *s,
            Bound::Excluded(s) => s.saturating_add(1),
            Bound::Unbounded => 0,
        };
        let mut out = Vec::new();
        for (k, v) in self.rows_from(start)? {
            let Some(i) = index_of(&k) else { continue };
            if !range.contains(&i) {
                break;
            }
            out.push(decode(What::Logs, &v)?);
        }
        Ok(out)
    }
}

impl RaftLogStorage<TypeConfig> for LogStore {
    type LogReader = Self;

    async fn get_log_state(&mut self) -> Result<LogState<TypeConfig>, StorageError> {
        let purged: Option<LogId<NodeId>> = self.get(What::Logs, PURGED)?.flatten();
        // The last entry: the log is short (a map change is a handful of entries per day,
        // and openraft purges behind snapshots), so a scan past the purged point is cheap.
        let rows = self.rows_from(purged.map_or(0, |p| p.index.saturating_add(1)))?;
        let last = match rows.last() {
            Some((_, v)) => Some(decode::<Entry<TypeConfig>>(What::Logs, v)?.log_id),
            None => purged,
        };
        Ok(LogState {
            last_purged_log_id: purged,
            last_log_id: last,
        })
    }

    async fn get_log_reader(&mut self) -> Self::LogReader {
        self.clone()
    }

    async fn save_vote(&mut self, vote: &Vote<NodeId>) -> Result<(), StorageError> {
        let mut b = Batch::new();
        b.put(Space::RaftState, VOTE.to_vec(), encode(What::Vote, vote)?);
        self.write(What::Vote, b)
    }

    async fn read_vote(&mut self) -> Result<Option<Vote<NodeId>>, StorageError> {
        self.get(What::Vote, VOTE)
    }

    async fn save_committed(
        &mut self,
        committed: Option<LogId<NodeId>>,
    ) -> Result<(), StorageError> {
        let mut b = Batch::new();
        b.put(
            Space::RaftState,
            COMMITTED.to_vec(),
            encode(What::Logs, &committed)?,
        );
        self.write(What::Logs, b)
    }

    async fn read_committed(&mut self) -> Result<Option<LogId<NodeId>>, StorageError> {
        Ok(self.get(What::Logs, COMMITTED)?.flatten())
    }

    async fn append<I>(
        &mut self,
        entries: I,
        callback: LogFlushed<TypeConfig>,
    ) -> Result<(), StorageError>
    where
        I: IntoIterator<Item = Entry<TypeConfig>> + OptionalSend,
        I::IntoIter: OptionalSend,
    {
        let mut b = Batch::new();
        for e in entries {
            b.put(
                Space::RaftLog,
                e.log_id.index.to_be_bytes().to_vec(),
                encode(What::Logs, &e)?,
            );
        }
        let result = self.write(What::Logs, b);
        // Durable (fsynced) before openraft hears it is.
        callback.log_io_completed(
            result
                .clone()
                .map_err(|e| std::io::Error::other(e.to_string())),
        );
        result
    }

    async fn truncate(&mut self, log_id: LogId<NodeId>) -> Result<(), StorageError> {
        let mut b = Batch::new();
        for k in self.keys_between(log_id.index, None)? {
            b.delete(Space::RaftLog, k);
        }
        self.write(What::Logs, b)
    }

    async fn purge(&mut self, log_id: LogId<NodeId>) -> Result<(), StorageError> {
        let mut b = Batch::new();
        b.put(
            Space::RaftState,
            PURGED.to_vec(),
            encode(What::Logs, &Some(log_id))?,
        );
        for k in self.keys_between(0, Some(log_id.index.saturating_add(1)))? {
            b.delete(Space::RaftLog, k);
        }
        self.write(What::Logs, b)
    }
}
