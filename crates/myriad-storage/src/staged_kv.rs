//! A `Kv` with a staging layer: batches staged here are visible to every reader of this
//! `Kv` at once, and reach the engine underneath together, as one atomic batch, when the
//! writer commits the stage. A partition's single writer stages the changes of many
//! requests and commits them as one batch (one engine commit, one replicated batch, one
//! fsync on each copy) instead of one each (docs/write-path.md, "Rounds").
//!
//! Readers see staged keys over the engine's. A put and a later delete of one key in the
//! stage leave one operation (the last), so the committed batch never names a key twice.
//! The stage is committed and cleared under one lock: no reader sees the keys gone from
//! both.

use std::collections::BTreeMap;
use std::ops::Bound;
use std::sync::{Arc, RwLock, RwLockReadGuard, RwLockWriteGuard};

use crate::StorageError;
use crate::kv::{Batch, Kv, Pairs, Space, prefix_end};

type Stage = BTreeMap<(Space, Vec<u8>), Option<Vec<u8>>>;

/// Entry reads by (stage, key), remembered while a writer applies one job.
type Memo = std::collections::HashMap<(usize, Vec<u8>), Option<Vec<u8>>>;

thread_local! {
    /// Set only inside `StagedKv::with_memo`, on the writer's own thread, for the
    /// synchronous span of one job: nothing else runs on the thread meanwhile (also under
    /// a simulation, where writers are tasks: a job has no await point).
    static MEMO: std::cell::RefCell<Option<Memo>> = const { std::cell::RefCell::new(None) };
}

fn forget_memo() {
    MEMO.with_borrow_mut(|m| {
        if let Some(m) = m {
            m.clear();
        }
    });
}

#[derive(Default)]
struct Staged {
    ops: Stage,
    /// Bytes of keys and values staged (a batch must fit one replication frame).
    bytes: usize,
}

pub struct StagedKv {
    inner: Arc<dyn Kv>,
    staged: RwLock<Staged>,
}

impl StagedKv {
    #[must_use]
    pub fn new(inner: Arc<dyn Kv>) -> StagedKv {
        StagedKv {
            inner,
            staged: RwLock::new(Staged::default()),
        }
    }

    fn read(&self) -> Result<RwLockReadGuard<'_, Staged>, StorageError> {
        self.staged
            .read()
            .map_err(|_| StorageError::Engine("stage lock poisoned".into()))
    }

    fn write(&self) -> Result<RwLockWriteGuard<'_, Staged>, StorageError> {
        self.staged
            .write()
            .map_err(|_| StorageError::Engine("stage lock poisoned".into()))
    }

    /// Runs `f`, one job of this stage's writer (synchronous), with its reads of entries
    /// remembered: a second read of an entry within the job (the writer's kept fsstats
    /// read what a change replaces, which the change itself read just before) costs no
    /// engine lookup. Staging or committing forgets what was remembered.
    pub fn with_memo<T>(&self, f: impl FnOnce() -> T) -> T {
        MEMO.with_borrow_mut(|m| *m = Some(Memo::new()));
        let out = f();
        MEMO.with_borrow_mut(|m| *m = None);
        out
    }

    fn memo_key(&self, key: &[u8]) -> (usize, Vec<u8>) {
        (std::ptr::from_ref(self) as usize, key.to_vec())
    }

    /// Adds `batch` to the stage: visible to readers now, committed with the stage.
    pub fn stage(&self, batch: Batch) -> Result<(), StorageError> {
        forget_memo();
        let mut s = self.write()?;
        for (space, key, value) in batch.ops {
            s.bytes += key.len() + value.as_ref().map_or(0, Vec::len);
            s.ops.insert((space, key), value);
        }
        Ok(())
    }

    /// Bytes staged since the last commit (counting every staged put and key).
    #[must_use]
    pub fn staged_bytes(&self) -> usize {
        self.read().map(|s| s.bytes).unwrap_or(0)
    }

    #[must_use]
    pub fn is_staged(&self) -> bool {
        self.read().map(|s| !s.ops.is_empty()).unwrap_or(false)
    }

    /// Commits the stage to the engine as one batch (in key order), after `finish` has
    /// seen it and added to it (keys the stage does not hold), and empties the stage.
    /// Returns what `finish` returned. On an error the stage is dropped: nothing of it
    /// reaches the engine.
    pub fn commit_stage<T>(&self, finish: impl FnOnce(&mut Batch) -> T) -> Result<T, StorageError> {
        forget_memo();
        let mut s = self.write()?;
        // Readers wait for the lock: the keys can move out of the stage.
        let staged = std::mem::take(&mut *s);
        let mut batch = Batch::new();
        batch.ops.reserve(staged.ops.len() + 3);
        for ((space, key), value) in staged.ops {
            batch.ops.push((space, key, value));
        }
        let out = finish(&mut batch);
        self.inner.commit(batch)?;
        Ok(out)
    }

    /// The engine underneath: what is committed, without the stage.
    #[must_use]
    pub fn committed(&self) -> Arc<dyn Kv> {
        self.inner.clone()
    }

    /// Drops the stage (its writer gave up on it).
    pub fn discard(&self) {
        forget_memo();
        if let Ok(mut s) = self.write() {
            *s = Staged::default();
        }
    }
}

impl StagedKv {
    fn get_unmemoized(&self, space: Space, key: &[u8]) -> Result<Option<Vec<u8>>, StorageError> {
        let s = self.read()?;
        if !s.ops.is_empty()
            && let Some(v) = s.ops.get(&(space, key.to_vec()))
        {
            return Ok(v.clone());
        }
        self.inner.get(space, key)
    }
}

impl Kv for StagedKv {
    fn get(&self, space: Space, key: &[u8]) -> Result<Option<Vec<u8>>, StorageError> {
        if space != Space::Entries || MEMO.with_borrow(Option::is_none) {
            return self.get_unmemoized(space, key);
        }
        let mk = self.memo_key(key);
        if let Some(v) = MEMO.with_borrow(|m| m.as_ref().and_then(|m| m.get(&mk).cloned())) {
            return Ok(v);
        }
        let v = self.get_unmemoized(space, key)?;
        MEMO.with_borrow_mut(|m| {
            if let Some(m) = m {
                m.insert(mk, v.clone());
            }
        });
        Ok(v)
    }

    fn scan(
        &self,
        space: Space,
        prefix: &[u8],
        after: Option<&[u8]>,
        limit: usize,
    ) -> Result<Pairs, StorageError> {
        let s = self.read()?;
        if s.ops.is_empty() {
            return self.inner.scan(space, prefix, after, limit);
        }
        let start = match after {
            Some(a) if a >= prefix => Bound::Excluded((space, a.to_vec())),
            _ => Bound::Included((space, prefix.to_vec())),
        };
        let end = match prefix_end(prefix) {
            Some(e) => Bound::Excluded((space, e)),
            None => Bound::Unbounded,
        };
        let staged: Vec<(&Vec<u8>, &Option<Vec<u8>>)> = s
            .ops
            .range((start, end))
            .take_while(|((sp, _), _)| *sp == space)
            .map(|((_, k), v)| (k, v))
            .collect();
        let deleted = staged.iter().filter(|(_, v)| v.is_none()).count();
        // Each staged delete may hide one of the engine's keys: fetch that many more.
        let want = limit.saturating_add(deleted);
        let engine = self.inner.scan(space, prefix, after, want)?;
        // The engine's answer was cut short: staged keys past its last one may have
        // engine keys before them that were not fetched, and are left for the next page.
        let bound = (engine.len() >= want).then(|| engine.last().map(|(k, _)| k.clone()));
        let mut out = Vec::with_capacity(limit.min(engine.len() + staged.len()));
        let mut e = engine.into_iter().peekable();
        let mut st = staged.into_iter().peekable();
        while out.len() < limit {
            let take_staged = match (e.peek(), st.peek()) {
                (None, None) => break,
                (Some(_), None) => false,
                (None, Some(_)) => true,
                (Some((ek, _)), Some((sk, _))) => *sk <= ek,
            };
            if take_staged {
                let Some((k, v)) = st.next() else { break };
                if let Some(Some(b)) = &bound
                    && k > b
                {
                    break;
                }
                if e.peek().is_some_and(|(ek, _)| ek == k) {
                    e.next();
                }
                if let Some(v) = v {
                    out.push((k.clone(), v.clone()));
                }
            } else if let Some(pair) = e.next() {
                out.push(pair);
            }
        }
        Ok(out)
    }

    /// A batch committed past the stage: only while nothing is staged (the stage's
    /// writer is the only writer while it stages), else an error.
    fn commit(&self, batch: Batch) -> Result<(), StorageError> {
        forget_memo();
        let s = self.read()?;
        if !s.ops.is_empty() {
            return Err(StorageError::Engine(
                "a batch committed past a stage that is not committed yet".into(),
            ));
        }
        self.inner.commit(batch)
    }

    fn sync(&self) -> Result<(), StorageError> {
        self.inner.sync()
    }

    fn disk_bytes(&self) -> u64 {
        self.inner.disk_bytes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::MemKv;

    fn put(b: &mut Batch, k: &str, v: &str) {
        b.put(Space::Entries, k.as_bytes().to_vec(), v.as_bytes().to_vec());
    }

    fn keys(p: &Pairs) -> Vec<String> {
        p.iter()
            .map(|(k, v)| {
                format!(
                    "{}={}",
                    String::from_utf8_lossy(k),
                    String::from_utf8_lossy(v)
                )
            })
            .collect()
    }

    fn setup() -> (Arc<MemKv>, StagedKv) {
        let raw = Arc::new(MemKv::new());
        let mut b = Batch::new();
        for k in ["a1", "a2", "a3", "a4", "b1"] {
            put(&mut b, k, "old");
        }
        raw.commit(b).unwrap_or_else(|e| panic!("{e}"));
        let kv = StagedKv::new(raw.clone());
        (raw, kv)
    }

    #[test]
    fn a_job_memo_answers_repeated_entry_reads_and_forgets_at_every_stage() {
        let (raw, kv) = setup();
        let get = |kv: &StagedKv, k: &str| {
            kv.get(Space::Entries, k.as_bytes())
                .unwrap_or_else(|e| panic!("{e}"))
                .map(|v| String::from_utf8_lossy(&v).into_owned())
        };
        kv.with_memo(|| {
            assert_eq!(get(&kv, "a1").as_deref(), Some("old"));
            // Changed under the stage (no writer does this: it shows the memo answers).
            let mut b = Batch::new();
            put(&mut b, "a1", "engine");
            raw.commit(b).unwrap_or_else(|e| panic!("{e}"));
            assert_eq!(get(&kv, "a1").as_deref(), Some("old"), "remembered");
            // Staging forgets.
            let mut b = Batch::new();
            put(&mut b, "a1", "staged");
            kv.stage(b).unwrap_or_else(|e| panic!("{e}"));
            assert_eq!(get(&kv, "a1").as_deref(), Some("staged"));
        });
        // Outside a job nothing is remembered.
        kv.discard();
        assert_eq!(get(&kv, "a1").as_deref(), Some("engine"));
    }

    #[test]
    fn staged_keys_are_read_over_the_engines_and_committed_as_one_batch() {
        let (raw, kv) = setup();
        let mut b = Batch::new();
        put(&mut b, "a2", "new");
        b.delete(Space::Entries, b"a3".to_vec());
        put(&mut b, "a25", "added");
        kv.stage(b).unwrap_or_else(|e| panic!("{e}"));
        // A later stage of a key replaces the earlier one.
        let mut b = Batch::new();
        put(&mut b, "a5", "gone");
        b.delete(Space::Entries, b"a5".to_vec());
        kv.stage(b).unwrap_or_else(|e| panic!("{e}"));

        assert_eq!(
            kv.get(Space::Entries, b"a2")
                .unwrap_or_else(|e| panic!("{e}")),
            Some(b"new".to_vec())
        );
        assert_eq!(
            kv.get(Space::Entries, b"a3")
                .unwrap_or_else(|e| panic!("{e}")),
            None
        );
        assert_eq!(
            raw.get(Space::Entries, b"a2")
                .unwrap_or_else(|e| panic!("{e}")),
            Some(b"old".to_vec()),
            "nothing reaches the engine before the stage is committed"
        );
        let all = kv
            .scan(Space::Entries, b"a", None, 100)
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(keys(&all), ["a1=old", "a2=new", "a25=added", "a4=old"]);
        // Pages: a limit, and a start after a staged key.
        let page = kv
            .scan(Space::Entries, b"a", None, 2)
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(keys(&page), ["a1=old", "a2=new"]);
        let page = kv
            .scan(Space::Entries, b"a", Some(b"a2"), 2)
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(keys(&page), ["a25=added", "a4=old"]);
        assert!(
            kv.commit(Batch::new()).is_err(),
            "nobody commits past a stage"
        );

        let names = kv
            .commit_stage(|b| {
                let names: Vec<Vec<u8>> = b.ops.iter().map(|(_, k, _)| k.clone()).collect();
                b.put(Space::Meta, b"seq".to_vec(), b"1".to_vec());
                names
            })
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            names,
            [
                b"a2".to_vec(),
                b"a25".to_vec(),
                b"a3".to_vec(),
                b"a5".to_vec()
            ],
            "each key once, in order"
        );
        assert!(!kv.is_staged());
        let all = raw
            .scan(Space::Entries, b"a", None, 100)
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(keys(&all), ["a1=old", "a2=new", "a25=added", "a4=old"]);
        assert_eq!(
            raw.get(Space::Meta, b"seq")
                .unwrap_or_else(|e| panic!("{e}")),
            Some(b"1".to_vec())
        );
    }

    #[test]
    fn a_page_cut_short_by_the_engine_leaves_later_staged_keys_for_the_next() {
        let (_raw, kv) = setup();
        let mut b = Batch::new();
        put(&mut b, "a9", "late");
        b.delete(Space::Entries, b"a1".to_vec());
        kv.stage(b).unwrap_or_else(|e| panic!("{e}"));
        let mut seen = Vec::new();
        let mut after: Option<Vec<u8>> = None;
        loop {
            let page = kv
                .scan(Space::Entries, b"a", after.as_deref(), 1)
                .unwrap_or_else(|e| panic!("{e}"));
            let Some((k, _)) = page.last() else { break };
            after = Some(k.clone());
            seen.extend(keys(&page));
        }
        assert_eq!(seen, ["a2=old", "a3=old", "a4=old", "a9=late"]);
    }
}
