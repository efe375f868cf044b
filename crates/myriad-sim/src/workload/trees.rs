//! A client's whole trees: moved back and forth over an empty directory (`--dir-moves`),
//! and frozen, written into and thawed (`--freeze`, `--indexes`), each step checked
//! against the history.

use myriad_client::FsError;
use rand::Rng;

use super::{ClientRun, DIR, Frozen, Verdict, contents, piece, token_of};

impl ClientRun {
    /// The two directories a client moves its tree between (`--dir-moves`): the one
    /// holding file `f0` is moved over the other, empty one.
    pub(super) fn moving(client: u32) -> [String; 2] {
        [format!("/c{client}/da"), format!("/c{client}/db")]
    }

    /// One step of `--dir-moves`: move the tree (the directory whose `f0` is known to
    /// exist) over the other directory, emptied and made first; with no tree known (a
    /// move in doubt), write a new one.
    pub(super) async fn move_step(&self) -> Verdict {
        let [a, b] = Self::moving(self.id);
        let known = |d: &str| self.history.settled_token(&format!("{d}/f0")).is_some();
        let (from, to) = if known(&a) {
            (a, b)
        } else if known(&b) {
            (b, a)
        } else {
            self.mkdir(&a).await?;
            if self.history.settled(&a) == Some(Some(DIR.to_string())) {
                self.put(&format!("{a}/f0"), false).await;
            }
            return Ok(());
        };
        let (file, target) = (format!("{from}/f0"), format!("{to}/f0"));
        // The target must be empty: its file of an earlier tree goes (a move in doubt may
        // have left one there), and it must exist.
        self.delete(&target).await;
        self.mkdir(&to).await?;
        let (Some(Some(token)), Some(second), Some(None), Some(Some(_)), Some(Some(_))) = (
            self.history.settled(&file),
            self.history.settled(&piece(&file)),
            self.history.settled(&target),
            self.history.settled(&to),
            self.history.settled(&from),
        ) else {
            return Ok(());
        };
        // The target stays a directory throughout: no version of it begins.
        let vt = self.history.begin(&target, Some(token));
        let vtp = self.history.begin(&piece(&target), second);
        let vf = self.history.begin(&file, None);
        let vfp = self.history.begin(&piece(&file), None);
        let vd = self.history.begin(&from, None);
        match self
            .client
            .rename(&from, &to, myriad_client::RenameFlags::default())
            .await
        {
            Ok(()) => {
                self.ack(&target, vt);
                self.ack(&piece(&target), vtp);
                self.ack(&file, vf);
                self.ack(&piece(&file), vfp);
                self.ack(&from, vd);
            }
            Err(e) => self.trace.event(format_args!(
                "c{} move {from} over {to}: in doubt ({e})",
                self.id
            )),
        }
        self.trace
            .event(format_args!("c{} move {from} over {to} done", self.id));
        Ok(())
    }

    /// The root of a client's tree for `--freeze` (its name starts with `d`: a directory
    /// to the final reads).
    pub(super) fn frozen_root(client: u32) -> String {
        format!("/c{client}/dfz")
    }

    /// A file of a client's frozen tree: in its root, or in the subdirectory below it.
    pub(super) fn frozen_file(client: u32, deep: bool) -> String {
        let root = Self::frozen_root(client);
        if deep {
            format!("{root}/ds/g")
        } else {
            format!("{root}/f")
        }
    }

    pub(super) fn frozen(&self) -> Frozen {
        self.freeze.as_ref().map_or(Frozen::No, |f| {
            *f.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
        })
    }

    pub(super) fn set_frozen(&self, now: Frozen) {
        if let Some(f) = &self.freeze {
            *f.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = now;
        }
    }

    /// One step of `--freeze`: freeze the client's tree (made first) if it is known
    /// thawed, else thaw it.
    pub(super) async fn freeze_step(&self) -> Verdict {
        let root = Self::frozen_root(self.id);
        let was = self.frozen();
        self.set_frozen(Frozen::Unknown);
        let done = if was == Frozen::No {
            self.mkdir(&root).await?;
            self.mkdir(&format!("{root}/ds")).await?;
            let frozen = async {
                if self.indexes {
                    let opts = myriad_client::BuildOptions {
                        // Versions that repeat with the seed, new for every build.
                        version: Some(self.rng.with(|r| r.gen_range(1..u64::MAX / 2))),
                        auto: self.auto_indexes,
                        ..myriad_client::BuildOptions::default()
                    };
                    return self.client.build_index(&root, opts).await.map(drop);
                }
                let mark = myriad_client::proto::ReadOnlyMark {
                    root: self.client.stat(&root).await?.ino,
                    version: 1,
                };
                self.client.freeze_tree(&root, mark).await.map(drop)
            };
            frozen.await.map(|()| Frozen::Yes)
        } else if self.indexes {
            self.client.drop_index(&root).await.map(|_| Frozen::No)
        } else {
            self.client.thaw_tree(&root).await.map(|_| Frozen::No)
        };
        match done {
            Ok(now) => self.set_frozen(now),
            Err(e) => self.trace.event(format_args!(
                "c{} freeze step on {root} (was {was:?}): in doubt ({e})",
                self.id
            )),
        }
        self.trace.event(format_args!(
            "c{} freeze step on {root} done: {:?}",
            self.id,
            self.frozen()
        ));
        Ok(())
    }

    /// A write into the client's own frozen tree: refused while it is known frozen,
    /// taken once it is known thawed; a refused write is never seen. (Only this client
    /// freezes and thaws its tree, one step at a time: the state holds for the call.)
    pub(super) async fn put_frozen(&self, deep: bool) -> Verdict {
        let path = Self::frozen_file(self.id, deep);
        let state = self.frozen();
        let v = self.history.next_version(&path);
        let data = contents(&path, v);
        self.history.begin(&path, Some(token_of(&data)));
        let result = async {
            let h = self.client.create(&path, 0o644, false, &data).await?;
            self.client.write(&h, 0, &data).await.map(drop)
        }
        .await;
        self.trace.event(format_args!(
            "c{} put {path} v{v} ({state:?}): {result:?}",
            self.id
        ));
        match result {
            // An automatic index freezes nothing: its tree takes every write.
            Ok(()) if self.auto_indexes => self.ack(&path, v),
            Err(FsError::ReadOnly) if self.auto_indexes => {
                return Err(format!(
                    "c{} put {path} v{v} refused as read-only under an automatic index",
                    self.id
                ));
            }
            Ok(()) if state == Frozen::Yes => {
                return Err(format!(
                    "c{} put {path} v{v} acknowledged in a tree known frozen",
                    self.id
                ));
            }
            Ok(()) => self.ack(&path, v),
            Err(FsError::ReadOnly) if state == Frozen::No => {
                return Err(format!(
                    "c{} put {path} v{v} refused as read-only in a tree known thawed",
                    self.id
                ));
            }
            Err(FsError::ReadOnly) => self.history.refuse(&path, v),
            Err(_) => {}
        }
        Ok(())
    }

    /// Reads `client`'s moving tree: both directories and the file in each.
    pub(super) async fn read_moved(&self, client: u32) -> Verdict {
        for d in Self::moving(client) {
            self.stat_dir(&d).await?;
            self.read(&format!("{d}/f0")).await?;
        }
        Ok(())
    }
}
