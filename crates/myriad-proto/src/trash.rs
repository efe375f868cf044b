//! Where the trash keeps removed files (docs/trash.md), the rules the servers (which move
//! a removed file there) and the tools (`myriad trash list|restore|purge`) share:
//! `/.trash/<date>/<uid>/<bucket>/<original path>`: the date of the removal (UTC,
//! `YYYY-MM-DD`), the file owner's uid, and a small number the server chooses so that the
//! kept name lives on the partition the file's name lived on (the move is then one local
//! rename, not a rename between two partitions).

use crate::InodeId;

pub use myriad_placement::{TRASH_ROOT, in_trash};
/// The trash's own name in `/`.
pub const TRASH_NAME: &str = ".trash";
/// `/.trash` and each date's directory: anyone may pass, no one but root may list.
pub const TRASH_DIR_MODE: u32 = 0o711;
/// A user's directory of a date and every directory below it: the user's alone.
pub const TRASH_USER_MODE: u32 = 0o700;

/// The UTC calendar date (year, month, day) of a day counted from 1970-01-01 (Howard
/// Hinnant's days-to-civil).
#[must_use]
pub fn civil_date(days: i64) -> (i64, i64, i64) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    (yoe + era * 400 + i64::from(m <= 2), m, d)
}

/// The date's directory name (`YYYY-MM-DD`) of a removal at `now_ns` (Unix time).
#[must_use]
pub fn date_of(now_ns: i64) -> String {
    let (y, m, d) = civil_date(now_ns.div_euclid(1_000_000_000).div_euclid(86_400));
    format!("{y:04}-{m:02}-{d:02}")
}

/// Whether `name` is a date's directory name (`YYYY-MM-DD`).
#[must_use]
pub fn is_date(name: &str) -> bool {
    let b = name.as_bytes();
    b.len() == 10
        && b.iter().enumerate().all(|(i, c)| {
            if i == 4 || i == 7 {
                *c == b'-'
            } else {
                c.is_ascii_digit()
            }
        })
}

/// A day in nanoseconds.
const DAY_NS: i64 = 86_400 * 1_000_000_000;

/// Whether what was removed on `date` has been kept its `days` (a trash of `days` days,
/// at `now_ns`): kept through `days` whole days after the day of its removal, freed on
/// the day after those. Never with the trash off (`days` 0: kept until purged), nor for
/// a name that is not a date.
#[must_use]
pub fn expired(date: &str, days: u32, now_ns: i64) -> bool {
    let keep_from = date_of(now_ns.saturating_sub(i64::from(days).saturating_mul(DAY_NS)));
    days > 0 && is_date(date) && date < keep_from.as_str()
}

/// The date a path inside the trash was removed on (its first name below `/.trash`).
#[must_use]
pub fn date_in(path: &str) -> Option<&str> {
    let rest = path.strip_prefix(TRASH_ROOT)?.strip_prefix('/')?;
    let date = rest.split('/').next()?;
    is_date(date).then_some(date)
}

/// The directory of a user's files removed on `date`.
#[must_use]
pub fn user_dir(date: &str, uid: u32) -> String {
    format!("{TRASH_ROOT}/{date}/{uid}")
}

/// Where the file at `path` (absolute, not the root) removed on `date` by owner `uid` is
/// kept in bucket `bucket`; `again`: a second name for when that one is taken (a file
/// removed twice under one path on one day), `<path>.<inode>`.
#[must_use]
pub fn kept_path(date: &str, uid: u32, bucket: u32, path: &str, again: Option<InodeId>) -> String {
    match again {
        None => format!("{}/{bucket}{path}", user_dir(date, uid)),
        Some(ino) => format!("{}/{bucket}{path}.{}", user_dir(date, uid), ino.0),
    }
}

/// What a path inside the trash says: (date, uid, the original path), if it is a kept
/// file's (or a directory below a bucket).
#[must_use]
pub fn origin_of(kept: &str) -> Option<(&str, u32, &str)> {
    let rest = kept.strip_prefix(TRASH_ROOT)?.strip_prefix('/')?;
    let (date, rest) = rest.split_once('/')?;
    let (uid, rest) = rest.split_once('/')?;
    let (bucket, _) = rest.split_once('/')?;
    let original = &rest[bucket.len()..];
    let ok = is_date(date) && bucket.parse::<u32>().is_ok() && original.len() > 1;
    ok.then_some((date, uid.parse().ok()?, original))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dates_are_utc_days() {
        assert_eq!(date_of(0), "1970-01-01");
        // 2026-12-06 12:00:00 UTC.
        assert_eq!(date_of(1_796_558_400 * 1_000_000_000), "2026-12-06");
        assert_eq!(date_of(-1), "1969-12-31");
        assert!(is_date("2026-12-06"));
        assert!(!is_date("2026-12-6") && !is_date("2026x12-06") && !is_date("big"));
    }

    #[test]
    fn a_kept_path_names_its_date_owner_and_origin() {
        let kept = kept_path("2026-12-06", 1000, 3, "/lab/a/b.txt", None);
        assert_eq!(kept, "/.trash/2026-12-06/1000/3/lab/a/b.txt");
        assert_eq!(origin_of(&kept), Some(("2026-12-06", 1000, "/lab/a/b.txt")));
        let again = kept_path("2026-12-06", 0, 0, "/x", Some(InodeId(77)));
        assert_eq!(again, "/.trash/2026-12-06/0/0/x.77");
        assert_eq!(origin_of("/.trash/2026-12-06/1000/3"), None);
        assert_eq!(origin_of("/.trash/2026-12-06/1000/x/y"), None, "no bucket");
        assert_eq!(origin_of("/.trash/today/1000/1/x"), None);
        assert_eq!(origin_of("/lab/x"), None);
    }

    #[test]
    fn a_day_is_kept_its_days_whole_then_expires() {
        // 2026-12-06 12:00:00 UTC.
        let now = 1_796_558_400 * 1_000_000_000;
        assert!(!expired("2026-12-06", 1, now), "removed today");
        assert!(!expired("2026-12-05", 1, now), "one whole day not over");
        assert!(expired("2026-12-04", 1, now));
        assert!(!expired("2026-11-29", 7, now));
        assert!(expired("2026-11-28", 7, now));
        assert!(expired("2019-01-01", 7, now));
        assert!(
            !expired("2019-01-01", 0, now),
            "the trash off keeps what it kept"
        );
        assert!(!expired("old", 7, now));
        assert_eq!(date_in("/.trash/2026-12-06/1000/0/x"), Some("2026-12-06"));
        assert_eq!(date_in("/.trash/2026-12-06"), Some("2026-12-06"));
        assert_eq!(date_in("/.trash"), None);
        assert_eq!(date_in("/.trash/lost+found/x"), None);
        assert_eq!(date_in("/lab/2026-12-06"), None);
    }

    #[test]
    fn only_the_trash_and_what_is_in_it_are_in_the_trash() {
        assert!(in_trash("/.trash"));
        assert_eq!(format!("/{TRASH_NAME}"), TRASH_ROOT);
        assert!(in_trash("/.trash/2026-12-06/0/x"));
        assert!(!in_trash("/.trashcan/x"));
        assert!(!in_trash("/lab/.trash"));
    }
}
