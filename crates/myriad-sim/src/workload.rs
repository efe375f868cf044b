//! The clients: real `myriad_client::Client`s over the simulated network, each the only
//! writer of the files in its own directory (`/c<N>/f<k>`: puts, deletes) and one of the
//! creators in the shared directory `/big` (which splits under them); any client reads any
//! file and lists `/big`. Every outcome goes to the history, every read and listing is
//! checked against it at once.

use std::sync::Arc;
use std::time::Duration;

use myriad_client::{Client, FsError};
use rand::Rng;
use tokio::time::Instant;

use crate::history::History;
use crate::rng::SimRng;
use crate::trace::Trace;

/// Files per client directory.
pub const FILES: u32 = 6;
/// The shared directory that splits.
pub const BIG: &str = "/big";

/// The bytes of `path` at `version`: the path is in them, so a read that returns another
/// file's bytes is caught too.
#[must_use]
pub fn contents(path: &str, version: u64) -> Vec<u8> {
    format!("{path}@v{version:08}").into_bytes()
}

/// The token a read of a file returns: its contents (which name the path and version they
/// were written as, so a read that returns another file's bytes, or a rename's, is checked).
fn token_of(data: &[u8]) -> String {
    String::from_utf8_lossy(data).into_owned()
}

/// What a read of a directory returns.
const DIR: &str = "dir";

pub struct ClientRun {
    pub id: u32,
    pub clients: u32,
    pub client: Arc<Client>,
    pub rng: SimRng,
    pub history: Arc<History>,
    pub trace: Trace,
    pub ops: u32,
}

/// What one client run ended with: the first violation it saw, if any.
pub type Verdict = Result<(), String>;

impl ClientRun {
    fn path(&self, client: u32, k: u32) -> String {
        format!("/c{client}/f{k}")
    }

    fn dir(&self, client: u32, k: u32) -> String {
        format!("/c{client}/d{k}")
    }

    pub async fn run(self) -> Verdict {
        let mut created = 0u32;
        for _ in 0..self.ops {
            let (think, op, k, other) = self.rng.with(|r| {
                (
                    Duration::from_millis(r.gen_range(0..20)),
                    r.gen_range(0..100u32),
                    r.gen_range(0..FILES),
                    r.gen_range(0..self.clients),
                )
            });
            tokio::time::sleep(think).await;
            let j = (k + 1 + other) % FILES;
            match op {
                0..27 => self.put(&self.path(self.id, k)).await,
                27..33 => self.delete(&self.path(self.id, k)).await,
                33..38 => {
                    self.rename(&self.path(self.id, k), &self.path(self.id, j))
                        .await
                }
                38..42 => self.mkdir(&self.dir(self.id, k)).await,
                42..45 => self.rmdir(&self.dir(self.id, k)).await,
                45..62 => self.read(&self.path(other, k)).await?,
                62..70 => self.stat_dir(&self.dir(other, k)).await?,
                70..85 => {
                    created += 1;
                    self.create_shared(&format!("{BIG}/c{}-{created}", self.id))
                        .await;
                }
                85..90 if created > 0 => {
                    let n = self.rng.with(|r| r.gen_range(1..=created));
                    self.remove_shared(&format!("{BIG}/c{}-{n}", self.id)).await;
                }
                _ => self.list().await?,
            }
        }
        Ok(())
    }

    async fn put(&self, path: &str) {
        let v = self.history.next_version(path);
        let data = contents(path, v);
        self.history.begin(path, Some(token_of(&data)));
        // Create (or open) and write: a file that exists keeps its inode.
        let result = async {
            let h = self.client.create(path, 0o644, false, &data).await?;
            self.client.write(&h, 0, &data).await
        }
        .await;
        match result {
            Ok(_) => self.history.ack(path, v),
            Err(e) => self
                .trace
                .event(format_args!("c{} put {path} v{v}: in doubt ({e})", self.id)),
        }
        self.trace
            .event(format_args!("c{} put {path} v{v} done", self.id));
    }

    async fn delete(&self, path: &str) {
        let v = self.history.begin(path, None);
        match self.client.unlink(path).await {
            Ok(()) | Err(FsError::NotFound) => self.history.ack(path, v),
            Err(e) => self.trace.event(format_args!(
                "c{} delete {path} v{v}: in doubt ({e})",
                self.id
            )),
        }
        self.trace
            .event(format_args!("c{} delete {path} v{v} done", self.id));
    }

    async fn read(&self, path: &str) -> Verdict {
        let invoked = Instant::now();
        let seen = match self.client.fetch(path).await {
            Ok((_, data)) => Some(token_of(&data)),
            Err(FsError::NotFound) => None,
            // Unavailable past the client's deadline: no observation.
            Err(e) => {
                self.trace
                    .event(format_args!("c{} read {path}: {e}", self.id));
                return Ok(());
            }
        };
        self.trace
            .event(format_args!("c{} read {path}: {seen:?}", self.id));
        self.history.check_read(path, invoked, seen.as_deref())
    }

    /// Moves `from` (an acknowledged file) over `to`: `to` then holds `from`'s contents,
    /// `from` is gone; both at once, or neither.
    async fn rename(&self, from: &str, to: &str) {
        // A rename onto itself changes nothing (POSIX); the model below is for two names.
        if from == to {
            return;
        }
        let Some(token) = self.history.settled_token(from) else {
            return;
        };
        let vt = self.history.begin(to, Some(token));
        let vf = self.history.begin(from, None);
        match self
            .client
            .rename(from, to, myriad_client::RenameFlags::default())
            .await
        {
            Ok(()) => {
                self.history.ack(to, vt);
                self.history.ack(from, vf);
            }
            Err(e) => self.trace.event(format_args!(
                "c{} rename {from} -> {to}: in doubt ({e})",
                self.id
            )),
        }
        self.trace
            .event(format_args!("c{} rename {from} -> {to} done", self.id));
    }

    async fn mkdir(&self, path: &str) {
        let v = self.history.begin(path, Some(DIR.to_string()));
        match self.client.mkdir(path, 0o755).await {
            Ok(_) | Err(FsError::AlreadyExists) => self.history.ack(path, v),
            Err(e) => self
                .trace
                .event(format_args!("c{} mkdir {path}: in doubt ({e})", self.id)),
        }
        self.trace
            .event(format_args!("c{} mkdir {path} done", self.id));
    }

    async fn rmdir(&self, path: &str) {
        let v = self.history.begin(path, None);
        match self.client.rmdir(path).await {
            Ok(()) | Err(FsError::NotFound) => self.history.ack(path, v),
            Err(e) => self
                .trace
                .event(format_args!("c{} rmdir {path}: in doubt ({e})", self.id)),
        }
        self.trace
            .event(format_args!("c{} rmdir {path} done", self.id));
    }

    async fn stat_dir(&self, path: &str) -> Verdict {
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
        self.history.check_read(path, invoked, seen.as_deref())
    }

    async fn create_shared(&self, path: &str) {
        let name = path.rsplit('/').next().unwrap_or(path).to_string();
        self.history.begin_listed(&name);
        match self.client.create(path, 0o644, true, b"x").await {
            // Exists: a retry of our own create that had gone through.
            Ok(_) | Err(FsError::AlreadyExists) => self.history.ack_listed(&name),
            Err(e) => self
                .trace
                .event(format_args!("c{} create {path}: in doubt ({e})", self.id)),
        }
        self.trace
            .event(format_args!("c{} create {path} done", self.id));
    }

    async fn remove_shared(&self, path: &str) {
        let name = path.rsplit('/').next().unwrap_or(path).to_string();
        self.history.begin_unlisted(&name);
        match self.client.unlink(path).await {
            Ok(()) | Err(FsError::NotFound) => self.history.ack_unlisted(&name),
            Err(e) => self
                .trace
                .event(format_args!("c{} remove {path}: in doubt ({e})", self.id)),
        }
        self.trace
            .event(format_args!("c{} remove {path} done", self.id));
    }

    async fn list(&self) -> Verdict {
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

/// After the run: every file reads at least its last acknowledged version.
pub async fn final_reads(client: &Client, history: &History) -> Verdict {
    for (path, _) in history.final_floors() {
        let invoked = Instant::now();
        let is_dir = path.rsplit('/').next().is_some_and(|n| n.starts_with('d'));
        let seen = if is_dir {
            match client.stat(&path).await {
                Ok(_) => Some(DIR.to_string()),
                Err(FsError::NotFound) => None,
                Err(e) => return Err(format!("final stat of {path} failed: {e}")),
            }
        } else {
            match client.fetch(&path).await {
                Ok((_, data)) => Some(token_of(&data)),
                Err(FsError::NotFound) => None,
                Err(e) => return Err(format!("final read of {path} failed: {e}")),
            }
        };
        history.check_read(&path, invoked, seen.as_deref())?;
    }
    Ok(())
}
