//! `--trash`'s final check (docs/trash.md "What it promises"): the trash keeps a file for
//! every removal acknowledged (nothing a client removed is lost), and none for a path no
//! removal was tried on, nor more than were tried (nothing kept twice, nothing invented).

use std::collections::BTreeMap;

use myriad_client::proto::trash::{TRASH_ROOT, origin_of};
use myriad_client::{Client, FileKind, FsError};

use crate::history::History;

/// Walks `/.trash` and compares what it keeps with the history's removals; returns how
/// many files it keeps.
pub(super) async fn check(client: &Client, history: &History) -> Result<u64, String> {
    let mut kept: BTreeMap<String, u64> = BTreeMap::new();
    let mut dirs = vec![TRASH_ROOT.to_string()];
    while let Some(d) = dirs.pop() {
        let entries = match client.readdir(&d).await {
            Ok(es) => es,
            Err(FsError::NotFound) if d == TRASH_ROOT => Vec::new(),
            Err(e) => return Err(format!("listing {d}: {e}")),
        };
        for e in entries {
            let path = format!("{d}/{}", e.name);
            if e.inode.kind == FileKind::Directory {
                dirs.push(path);
                continue;
            }
            let Some((_, _, original)) = origin_of(&path) else {
                return Err(format!("{path}: not where the trash keeps files"));
            };
            *kept.entry(original_of(original).to_string()).or_default() += 1;
        }
    }
    let bounds = history.trash_bounds();
    for (path, n) in &kept {
        if !bounds.contains_key(path) {
            return Err(format!("keeps {n} file(s) of {path}, never removed"));
        }
    }
    for (path, (least, most)) in bounds {
        let n = kept.get(&path).copied().unwrap_or(0);
        if n < least || n > most {
            return Err(format!(
                "keeps {n} file(s) of {path}, removed at least {least} and at most {most} times"
            ));
        }
    }
    Ok(kept.values().sum())
}

/// The path a kept file had: a second removal of one path on one day is kept as
/// `<path>.<inode>` (the workload's names have no dots).
fn original_of(kept: &str) -> &str {
    match kept.rsplit_once('.') {
        Some((base, ino)) if !ino.is_empty() && ino.bytes().all(|b| b.is_ascii_digit()) => base,
        _ => kept,
    }
}
