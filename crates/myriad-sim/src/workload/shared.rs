//! A client's directories and its part of the shared directory `/big` (made, removed,
//! stat'ed, listed), each step checked against the history.

use myriad_client::FsError;
use tokio::time::Instant;

use super::{BIG, ClientRun, DIR, FILES, Verdict};
use crate::history::Removal;

impl ClientRun {
    /// Makes directory `path` (only this client makes or removes it). `AlreadyExists` is
    /// an answer, but a violation where the directory is certainly absent: no change of it
    /// was ever in doubt, so the mkdir itself made it and a retry of it did not answer its
    /// first outcome (docs/write-path.md, "Exactly once"; chaos_long under kill -9).
    pub(super) async fn mkdir(&self, path: &str) -> Verdict {
        let absent = self.history.certain(path) == Some(None);
        let v = self.history.begin(path, Some(DIR.to_string()));
        match self.client.mkdir(path, 0o755).await {
            Err(FsError::AlreadyExists) if absent => {
                return Err(format!(
                    "c{} mkdir {path}: AlreadyExists for a directory certainly absent (a \
                     retry of the mkdir did not answer its first outcome)",
                    self.id
                ));
            }
            Ok(_) | Err(FsError::AlreadyExists) => self.ack(path, v),
            Err(e) => self
                .trace
                .event(format_args!("c{} mkdir {path}: in doubt ({e})", self.id)),
        }
        self.trace
            .event(format_args!("c{} mkdir {path} done", self.id));
        Ok(())
    }

    /// Makes this client's directory `k`; writing behind, its parent claimed first half
    /// the time (so the mkdir may be answered behind: docs/fuse.md "mkdir behind"), and
    /// odd ones filled with a file at once (answered behind under the new directory's
    /// birth lease, while other clients read it by its whole path) given its times and
    /// mode, the directory given its times, and followed by the next directory's mkdir
    /// (`tar -x`'s order).
    pub(super) async fn mkdir_filled(&self, k: u32) -> Verdict {
        let d = self.dir(self.id, k);
        if self.behind && k % 4 < 2 {
            let parent = myriad_placement::parent_of(&d).to_string();
            let _ = self
                .client
                .readdir_for(&parent, myriad_client::ListFor::Filling)
                .await;
        }
        self.mkdir(&d).await?;
        if self.behind && k % 2 == 1 {
            let f = format!("{d}/f");
            self.put(&f, false).await;
            // The file's times and mode at once, as `tar -x` sets them once it wrote it:
            // answered behind, they go inside its create (`requests::Create::then`).
            let set = myriad_proto::SetAttr {
                mtime_ns: Some(1_000_000_000 * i64::from(k + 1)),
                mode: Some(0o640),
                ..myriad_proto::SetAttr::default()
            };
            let _ = self.client.setattr(&f, set).await;
            // Then its directory's times, as `tar -x` sets them once it filled a
            // directory: answered behind, the setattr waits for the create in it, and the
            // parent's later changes pass it (docs/fuse.md "A directory's entry from two journals").
            let set = myriad_proto::SetAttr {
                mtime_ns: Some(1_000_000_000 * i64::from(k + 1)),
                ..myriad_proto::SetAttr::default()
            };
            let _ = self.client.setattr(&d, set).await;
            // And the next directory at once, as `tar -x` goes on.
            if k + 1 < FILES {
                self.mkdir(&self.dir(self.id, k + 1)).await?;
            }
        }
        Ok(())
    }

    /// Removes directory `path`; `NotFound` is a violation where it certainly exists, as
    /// `AlreadyExists` is for `mkdir`.
    pub(super) async fn rmdir(&self, path: &str) -> Verdict {
        let present = self.history.certain(path) == Some(Some(DIR.to_string()));
        let v = self.history.begin(path, None);
        match self.client.rmdir(path).await {
            Err(FsError::NotFound) if present => {
                return Err(format!(
                    "c{} rmdir {path}: NotFound for a directory certainly there (a retry \
                     of the rmdir did not answer its first outcome)",
                    self.id
                ));
            }
            Ok(()) | Err(FsError::NotFound) => self.ack(path, v),
            Err(e) => self
                .trace
                .event(format_args!("c{} rmdir {path}: in doubt ({e})", self.id)),
        }
        self.trace
            .event(format_args!("c{} rmdir {path} done", self.id));
        Ok(())
    }

    pub(super) async fn stat_dir(&self, path: &str) -> Verdict {
        let invoked = Instant::now();
        let seen = match self.client.stat(path).await {
            Ok(i) if i.kind == myriad_client::FileKind::Directory => Some(DIR.to_string()),
            Ok(i) => {
                return Err(format!(
                    "{path} is a {:?}, never made but as a directory",
                    i.kind
                ));
            }
            Err(FsError::NotFound) => None,
            Err(e) => {
                self.trace
                    .event(format_args!("c{} stat {path}: {e}", self.id));
                return Ok(());
            }
        };
        self.trace
            .event(format_args!("c{} stat {path}: {seen:?}", self.id));
        self.check_own_read(path, invoked, seen.as_deref())
    }

    /// Creates `path`, a name never used before: true if the create succeeded. Retries of
    /// a create that went through answer its first outcome (docs/write-path.md, "Exactly
    /// once"), so `AlreadyExists` is a violation.
    pub(super) async fn create_shared(&self, path: &str) -> Result<bool, String> {
        let name = path.rsplit('/').next().unwrap_or(path).to_string();
        self.history.begin_listed(&name);
        let made = match self.client.create(path, 0o644, true, b"x").await {
            Ok(_) => {
                self.ack_listed(&name);
                true
            }
            Err(FsError::AlreadyExists) => {
                return Err(format!(
                    "c{} create {path}: AlreadyExists for a name never made before (a retry \
                     of the create did not answer its first outcome)",
                    self.id
                ));
            }
            Err(e) => {
                self.trace
                    .event(format_args!("c{} create {path}: in doubt ({e})", self.id));
                false
            }
        };
        self.trace
            .event(format_args!("c{} create {path} done", self.id));
        Ok(made)
    }

    /// Removes `path`; `live`: its create succeeded and no removal was tried since, so
    /// `NotFound` is a violation (a retry of this removal must answer its first outcome).
    pub(super) async fn remove_shared(&self, path: &str, live: bool) -> Verdict {
        let name = path.rsplit('/').next().unwrap_or(path).to_string();
        self.history.begin_unlisted(&name);
        let unlinked = self.client.unlink(path).await;
        // What the trash must keep (`--trash`): a mount's removal counts once durable,
        // which the history does not follow for shared names: only as tried.
        let removal = match &unlinked {
            Ok(()) if !self.visible => Removal::Removed,
            Err(FsError::NotFound) => Removal::NotFound,
            _ => Removal::InDoubt,
        };
        self.history.note_removal(path, 0, removal);
        match unlinked {
            Ok(()) => self.ack_unlisted(&name),
            Err(FsError::NotFound) if live => {
                return Err(format!(
                    "c{} remove {path}: NotFound for a name made and not removed since (a \
                     retry of the removal did not answer its first outcome)",
                    self.id
                ));
            }
            Err(FsError::NotFound) => self.ack_unlisted(&name),
            Err(e) => self
                .trace
                .event(format_args!("c{} remove {path}: in doubt ({e})", self.id)),
        }
        self.trace
            .event(format_args!("c{} remove {path} done", self.id));
        Ok(())
    }

    pub(super) async fn list(&self) -> Verdict {
        let invoked = Instant::now();
        match self.client.readdir(BIG).await {
            Ok(entries) => {
                let names: Vec<String> = entries.into_iter().map(|e| e.name).collect();
                self.trace.event(format_args!(
                    "c{} list {BIG} (begun {:.0} ms ago): {} names",
                    self.id,
                    invoked.elapsed().as_secs_f64() * 1000.0,
                    names.len()
                ));
                self.history.check_listing(invoked, &names)
            }
            Err(e) => {
                self.trace
                    .event(format_args!("c{} list {BIG}: {e}", self.id));
                Ok(())
            }
        }
    }
}
