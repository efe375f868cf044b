//! `myriad trash days|list|restore|purge` (docs/trash.md): with the cluster's `trash_days`
//! above 0 the servers move every unlinked file or symbolic link to
//! `/.trash/<date>/<uid>/<bucket>/<original path>`; these commands show what is kept, put it back
//! and free it.

use anyhow::{Context, bail};
use clap::Subcommand;
use myriad_client::proto::trash::{TRASH_ROOT, date_of, is_date, origin_of, user_dir};
use myriad_client::{Client, FileKind, FsError, RenameFlags};

/// The protocol every server must speak before the trash is turned on: older ones would
/// drop the setting from the maps they pass on and free what they unlink.
const TRASH_FLOOR: u16 = myriad_placement::map_wire::TRASH_SINCE;

#[derive(Subcommand)]
pub enum TrashCmd {
    /// Show how many days removed files are kept, or set it (0: off, files are freed at
    /// once). Setting it needs the cluster secret.
    Days { days: Option<u32> },
    /// What the trash keeps (the caller's own files; root's: everyone's): the date it was
    /// removed, its owner, its size and the path it had.
    List {
        /// Only files removed on this date (YYYY-MM-DD).
        #[arg(long)]
        date: Option<String>,
        /// Only files of this owner (uid).
        #[arg(long)]
        user: Option<u32>,
    },
    /// Put back the file removed from PATH (the most recent removal), or every file removed
    /// under PATH if it was a directory, making missing parent directories. Refused if a
    /// file is at the destination (give --to).
    Restore {
        path: String,
        /// Where to put it instead of PATH.
        #[arg(long)]
        to: Option<String>,
    },
    /// Free now what the trash keeps: every day's files, or those removed before DATE
    /// (YYYY-MM-DD). Needs the permission to remove them (root: everyone's).
    Purge {
        #[arg(long)]
        before: Option<String>,
    },
}

impl TrashCmd {
    /// True for the commands that change the cluster map (they need the cluster secret).
    #[must_use]
    pub fn changes_the_map(&self) -> bool {
        matches!(self, TrashCmd::Days { days: Some(_) })
    }
}

pub async fn run(cmd: TrashCmd, client: &Client) -> anyhow::Result<()> {
    match cmd {
        TrashCmd::Days { days: None } => {
            let days = client.newest_map().await.ext.trash_days;
            match days {
                0 => println!("trash: off (removed files are freed at once)"),
                n => println!("trash: removed files kept {n} days in {TRASH_ROOT}"),
            }
            Ok(())
        }
        TrashCmd::Days { days: Some(days) } => set_days(client, days).await,
        TrashCmd::List { date, user } => {
            for k in kept(client, date.as_deref(), user).await? {
                println!("{}  {:>6}  {:>12}  {}", k.date, k.uid, k.size, k.original);
            }
            Ok(())
        }
        TrashCmd::Restore { path, to } => {
            let path = crate::fs_cmds::normalize(&path)?;
            let to = match to {
                Some(t) => crate::fs_cmds::normalize(&t)?,
                None => path.clone(),
            };
            let n = restore(client, &path, &to).await?;
            println!("restored {n} file(s) to {to}");
            Ok(())
        }
        TrashCmd::Purge { before } => {
            if let Some(b) = &before
                && !is_date(b)
            {
                bail!("--before {b}: a date is YYYY-MM-DD");
            }
            let mut freed = 0;
            for day in days(client).await? {
                if before.as_ref().is_none_or(|b| day.as_str() < b.as_str()) {
                    crate::fs_cmds::rm_r(client, &format!("{TRASH_ROOT}/{day}")).await?;
                    freed += 1;
                }
            }
            println!("purged {freed} day(s)");
            Ok(())
        }
    }
}

/// Turns the trash on for `days` once the cluster's protocol floor allows it (a cluster
/// just started raises it within moments; `bench untar --trash-days`).
pub async fn turn_on(client: &Client, days: u32) -> anyhow::Result<()> {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while client.newest_map().await.ext.protocol_floor < TRASH_FLOOR {
        if std::time::Instant::now() > deadline {
            bail!("the cluster's protocol floor stays below {TRASH_FLOOR}");
        }
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
    set_days(client, days).await
}

async fn set_days(client: &Client, days: u32) -> anyhow::Result<()> {
    let map = crate::map_change::commit_part(
        client,
        |m| {
            let floor = m.ext.protocol_floor;
            if floor < TRASH_FLOOR {
                bail!(
                    "the trash needs every server on protocol {TRASH_FLOOR} or later; this \
                     cluster's floor is {floor} (`myriad node list` shows who holds it back)"
                );
            }
            if m.ext.trash_days == days {
                return Ok(None);
            }
            let mut next = m.clone();
            next.epoch += 1;
            next.ext.trash_days = days;
            Ok(Some(next))
        },
        |m| m.ext.trash_days,
    )
    .await?;
    println!(
        "trash: {} days (map epoch {})",
        map.ext.trash_days, map.epoch
    );
    Ok(())
}

/// A file the trash keeps.
struct Kept {
    date: String,
    uid: u32,
    size: u64,
    original: String,
    /// Where it is kept.
    path: String,
    /// When it was removed (the kept entry's ctime, set by the move).
    removed_ns: i64,
}

/// How many days back a user who may not list `/.trash` (mode 0711) looks for their
/// own kept files beyond the setting (nothing expires them yet).
const USER_LOOKBACK_EXTRA_DAYS: i64 = 31;

/// The days the trash holds, oldest first (none if there is no trash yet). A caller who
/// may not list `/.trash` (anyone but root) gets the dates of the last days instead:
/// `kept` then looks for their own directory in each.
async fn days(client: &Client) -> anyhow::Result<Vec<String>> {
    let mut out: Vec<String> = match client.readdir(TRASH_ROOT).await {
        Ok(es) => es
            .into_iter()
            .map(|e| e.name)
            .filter(|n| is_date(n))
            .collect(),
        Err(FsError::NotFound) => Vec::new(),
        Err(FsError::PermissionDenied) => {
            let back =
                i64::from(client.newest_map().await.ext.trash_days) + USER_LOOKBACK_EXTRA_DAYS;
            let now = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| i64::try_from(d.as_nanos()).unwrap_or(i64::MAX));
            (0..=back)
                .map(|d| date_of(now - d * 86_400 * 1_000_000_000))
                .collect()
        }
        Err(e) => bail!("{TRASH_ROOT}: {e}"),
    };
    out.sort();
    out.dedup();
    Ok(out)
}

/// Every file kept (of `date`, of `user`), oldest day first. Root lists every user's; a
/// user their own (the users' directories of a day cannot be listed by them); directories
/// the caller may not read are passed over.
async fn kept(client: &Client, date: Option<&str>, user: Option<u32>) -> anyhow::Result<Vec<Kept>> {
    let me = client.caller().uid;
    let mut out = Vec::new();
    for day in days(client).await? {
        if date.is_some_and(|d| d != day) {
            continue;
        }
        let uids: Vec<u32> = if me == 0 {
            match client.readdir(&format!("{TRASH_ROOT}/{day}")).await {
                Ok(es) => es.into_iter().filter_map(|e| e.name.parse().ok()).collect(),
                Err(e) => bail!("{TRASH_ROOT}/{day}: {e}"),
            }
        } else {
            vec![me]
        };
        for uid in uids {
            if user.is_some_and(|w| w != uid) {
                continue;
            }
            walk(client, &user_dir(&day, uid), &mut out).await?;
        }
    }
    Ok(out)
}

/// The path a kept file had: a second removal of one path on one day is kept beside the
/// first as `<path>.<inode>`, its own inode's number.
fn again_of(original: &str, ino: myriad_client::InodeId) -> &str {
    original
        .strip_suffix(&format!(".{}", ino.0))
        .filter(|base| !base.ends_with('/'))
        .unwrap_or(original)
}

/// The kept files under `dir`, depth first.
async fn walk(client: &Client, dir: &str, out: &mut Vec<Kept>) -> anyhow::Result<()> {
    let mut dirs = vec![dir.to_string()];
    while let Some(d) = dirs.pop() {
        let entries = match client.readdir(&d).await {
            Ok(es) => es,
            // Another user's (theirs to list), or a day without this user's directory.
            Err(FsError::PermissionDenied | FsError::NotFound) => continue,
            Err(e) => bail!("{d}: {e}"),
        };
        for e in entries {
            let path = format!("{d}/{}", e.name);
            if e.inode.kind == FileKind::Directory {
                dirs.push(path);
            } else if let Some((date, uid, original)) = origin_of(&path) {
                out.push(Kept {
                    date: date.to_string(),
                    uid,
                    size: e.inode.size,
                    original: again_of(original, e.inode.ino).to_string(),
                    path: path.clone(),
                    removed_ns: e.inode.ctime_ns,
                });
            }
        }
    }
    Ok(())
}

/// Puts back what was removed from `path` (a file, or every file under a directory) at
/// `to`; the most recent removal of each file wins. Returns how many were put back.
async fn restore(client: &Client, path: &str, to: &str) -> anyhow::Result<usize> {
    let under = format!("{}/", path.trim_end_matches('/'));
    // Oldest first, so a later removal of the same path is the one kept last (two
    // removals of one path on one day: `again_of`).
    let mut all = kept(client, None, None).await?;
    all.sort_by_key(|k| (k.date.clone(), k.removed_ns));
    let mut chosen: std::collections::BTreeMap<String, Kept> = std::collections::BTreeMap::new();
    for k in all {
        let rest = if k.original == path {
            Some("")
        } else {
            k.original.strip_prefix(&under)
        };
        let Some(rest) = rest else { continue };
        let dest = if rest.is_empty() {
            to.to_string()
        } else {
            format!("{}/{rest}", to.trim_end_matches('/'))
        };
        chosen.insert(dest, k);
    }
    if chosen.is_empty() {
        bail!(
            "restore {path}: the trash keeps nothing removed from there (see `myriad trash list`)"
        );
    }
    let flags = RenameFlags {
        no_replace: true,
        exchange: false,
    };
    for (dest, k) in &chosen {
        let parent = myriad_placement::parent_of(dest);
        if parent != "/" {
            client
                .mkdir_p(parent, 0o755)
                .await
                .with_context(|| format!("restore {}: making {parent}", k.original))?;
        }
        client
            .rename(&k.path, dest, flags)
            .await
            .map_err(|e| match e {
                FsError::AlreadyExists => anyhow::anyhow!(
                    "restore {}: {dest} exists (give --to, or move it away first)",
                    k.original
                ),
                e => anyhow::anyhow!("restore {} from {}: {e}", k.original, k.path),
            })?;
    }
    Ok(chosen.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A second removal of a path on one day is kept as `<path>.<inode>`: it is the same
    /// path's (restored as one of its removals), a name that only ends in digits is not.
    #[test]
    fn a_kept_name_with_its_own_inode_number_is_its_path_s() {
        let ino = myriad_client::InodeId(1_099_511_627_813);
        assert_eq!(again_of("/p/f.1099511627813", ino), "/p/f");
        assert_eq!(again_of("/p/f.7", ino), "/p/f.7");
        assert_eq!(again_of("/p/f", ino), "/p/f");
        assert_eq!(again_of("/p/.1099511627813", ino), "/p/.1099511627813");
    }
}
