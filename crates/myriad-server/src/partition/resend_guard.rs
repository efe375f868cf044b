//! What a resent change must not overwrite (docs/fuse.md "Keeping answered changes until
//! they are durable"). A mount keeps the changes a primary answered once applied; when that
//! primary dies before its copies had them, the mount sends them again to the new primary
//! (`Envelope::Resend`). Another client may meanwhile have changed the same file or
//! name on the new primary (it saw the lost change for a moment, or never did): applying
//! the older change over it would lose that client's acknowledged change. So each primary
//! notes, from its opening, the names and files clients' changes touched, and a resend that
//! touches one another client changed is refused (its own client reports it lost). So is
//! one that touches what its own client changed later (a higher sequence number): that
//! later change was answered on what it found, and the older one must not come back over it
//! (simulation seed 50259: a create resent after its own file's removal, after a tree move
//! had carried the file, but not the create's record, to another partition).
//!
//! The note is kept only for `WINDOW` after the opening and for at most `KEYS_MAX` names: a
//! mount resends within a second or two of a failover. Past either, every resend whose
//! change did not survive is refused: a loss reported, never an overwrite.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::Duration;

use myriad_proto::ClientRequest;
use tokio::time::Instant;

/// How long after its opening a primary takes resent changes.
pub(crate) const WINDOW: Duration = Duration::from_secs(60);
/// At most this many names noted.
pub(crate) const KEYS_MAX: usize = 100_000;

/// A key noted by more than one client.
const SEVERAL: u64 = u64::MAX;

/// Who changed a key: one client (and its latest change's sequence number), or `SEVERAL`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Who {
    client: u64,
    seq: u64,
}

pub(crate) struct ResendGuard {
    opened: Instant,
    inner: Mutex<Noted>,
}

#[derive(Default)]
struct Noted {
    /// Name or file ("\0" and the inode number) -> who changed it.
    keys: BTreeMap<String, Who>,
    /// More than `KEYS_MAX` were to be noted: what is missing is unknown.
    overflowed: bool,
}

impl ResendGuard {
    pub(crate) fn new(opened: Instant) -> ResendGuard {
        ResendGuard {
            opened,
            inner: Mutex::new(Noted::default()),
        }
    }

    fn open(&self) -> bool {
        self.opened.elapsed() < WINDOW
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Noted> {
        match self.inner.lock() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        }
    }

    /// Change `seq` of client `client` changed what `request` names (called before it is
    /// applied, so a resend arriving while it runs sees it).
    pub(crate) fn note(&self, request: &ClientRequest, client: u64, seq: u64) {
        if !self.open() {
            return;
        }
        let mut g = self.lock();
        for key in keys(request) {
            if g.keys.len() >= KEYS_MAX && !g.keys.contains_key(&key) {
                g.overflowed = true;
                continue;
            }
            let who = g.keys.entry(key).or_insert(Who { client, seq });
            if who.client == client {
                who.seq = who.seq.max(seq);
            } else {
                who.client = SEVERAL;
            }
        }
    }

    /// Why `request`, change `seq` of `client` lost with an earlier primary, must not be
    /// applied again here; `None`: it may.
    pub(crate) fn refuses(&self, request: &ClientRequest, client: u64, seq: u64) -> Option<String> {
        if !self.open() {
            return Some(format!(
                "sent again more than {} s after this primary opened",
                WINDOW.as_secs()
            ));
        }
        let mine = keys(request);
        if mine.is_empty() {
            return Some(format!("{} is not taken again", request.op_name()));
        }
        let g = self.lock();
        if g.overflowed {
            return Some("too many changes since this primary opened".into());
        }
        for key in &mine {
            for (k, who) in g.keys.iter().filter(|(k, _)| related(k, key)) {
                if who.client != client {
                    return Some(format!(
                        "{} was changed by another client since this primary opened",
                        shown(k)
                    ));
                }
                if who.seq > seq {
                    return Some(format!(
                        "{} was changed again by the same client since",
                        shown(k)
                    ));
                }
            }
        }
        None
    }
}

/// What a change touches: the names it changes, and the files whose data or attributes it
/// changes ("\0" and the inode number). Empty for a change that is never resent.
pub(crate) fn keys(request: &ClientRequest) -> Vec<String> {
    let Some(change) = request.change() else {
        return Vec::new();
    };
    let names = change.names().map(str::to_string);
    names
        .chain(change.file.map(|ino| format!("\0{}", ino.0)))
        .collect()
}

/// Whether a change of one key may change what the other names: the same name or file,
/// or a name and one below it (a directory renamed or removed).
fn related(a: &str, b: &str) -> bool {
    let below = |x: &str, dir: &str| {
        dir == "/" && x.starts_with('/') || x.strip_prefix(dir).is_some_and(|r| r.starts_with('/'))
    };
    a == b || below(a, b) || below(b, a)
}

fn shown(key: &str) -> String {
    match key.strip_prefix('\0') {
        Some(ino) => format!("file {ino}"),
        None => key.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use myriad_proto::InodeId;

    fn unlink(path: &str) -> ClientRequest {
        ClientRequest::Unlink { path: path.into() }
    }

    fn truncate(path: &str, ino: u64) -> ClientRequest {
        ClientRequest::Truncate(myriad_proto::requests::Truncate {
            path: path.into(),
            ino: InodeId(ino),
            size: 0,
            opened: true,
        })
    }

    #[tokio::test(start_paused = true)]
    async fn a_resend_is_refused_over_another_clients_change_of_what_it_touches() {
        let g = ResendGuard::new(Instant::now());
        g.note(&unlink("/a/x"), 2, 1);
        g.note(&truncate("/b/f", 7), 2, 2);
        g.note(&unlink("/c/mine"), 1, 5);
        // Untouched by others, or touched by the same client's earlier change (or by this
        // one, sent again): taken.
        assert_eq!(g.refuses(&unlink("/a/y"), 1, 3), None);
        assert_eq!(g.refuses(&unlink("/c/mine"), 1, 5), None);
        assert_eq!(g.refuses(&unlink("/c/mine"), 1, 6), None);
        // Touched by the same client's later change: refused.
        let r = g.refuses(&unlink("/c/mine"), 1, 4).unwrap_or_default();
        assert!(r.contains("same client"), "{r}");
        // The same name, the same file under another name, a name below a changed one.
        assert!(g.refuses(&unlink("/a/x"), 1, 9).is_some());
        let r = g.refuses(&truncate("/b/g", 7), 1, 9).unwrap_or_default();
        assert!(r.contains("file 7"), "{r}");
        g.note(
            &ClientRequest::Rename {
                from: "/d".into(),
                to: "/e".into(),
                flags: myriad_proto::RenameFlags::default(),
            },
            3,
            1,
        );
        assert!(g.refuses(&unlink("/d/inner"), 1, 9).is_some());
        // A name changed by two clients is refused to both.
        g.note(&unlink("/c/mine"), 4, 1);
        assert!(g.refuses(&unlink("/c/mine"), 1, 9).is_some());
        // Past the window every resend is refused.
        tokio::time::advance(WINDOW).await;
        assert!(g.refuses(&unlink("/a/y"), 1, 9).is_some());
    }

    #[test]
    fn names_are_related_to_those_below_them_only() {
        assert!(related("/a", "/a/b"));
        assert!(related("/a/b", "/a"));
        assert!(related("/", "/a"));
        assert!(!related("/a", "/ab"));
        assert!(!related("\u{0}7", "\u{0}70"));
    }
}
