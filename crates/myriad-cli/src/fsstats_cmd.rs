//! `myriad fsstats PATH`: the Panasas seed's fsstats (seeds/002) over any directory (local
//! disk or a mount): a parallel walk, then powers-of-two histograms of file size, capacity
//! used, directory size, file age, symlinks and hard links, as tables, JSON or a plot in the
//! style of the seed's Fig. 5. The histograms themselves are `myriad_proto::fsstats`.

use std::collections::HashSet;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::{Condvar, Mutex};
use std::time::{SystemTime, UNIX_EPOCH};

use anyhow::Context;
use myriad_client::proto::fsstats::{FileFacts, FsStats, Histogram};

#[derive(clap::Args)]
pub struct FsstatsArgs {
    /// The directory to walk: a local one or a Myriad mount, or `myriad:/PATH` for a
    /// Myriad path read with the native client (no mount; capacity is then the bytes
    /// the copies take, as `myriad du --raw` counts them). Symbolic links are not followed; a file with several names
    /// counts once (by its device and inode).
    #[arg(required_unless_present = "kept")]
    pub path: Option<PathBuf>,
    /// The whole Myriad file system (the cluster of --cluster) at once, from the
    /// statistics every partition keeps as its files change, with no walk: sizes, links,
    /// symlinks, names and directory sizes. File ages and capacity are not kept (they
    /// need the walk of a PATH).
    #[arg(long, conflicts_with = "path")]
    pub kept: bool,
    /// Print JSON (every histogram with its buckets) instead of tables.
    #[arg(long)]
    pub json: bool,
    /// Also draw file counts (% per size bucket) and cumulative capacity (%) against file
    /// size into this PNG (the seed's Fig. 5).
    #[arg(long, value_name = "FILE.png")]
    pub plot: Option<PathBuf>,
    /// Walker threads (directories listed at once with `myriad:` paths).
    #[arg(long, default_value_t = 8)]
    pub threads: usize,
    /// Also print the fast-tier size that holds all metadata and every file below
    /// --small-bytes, with --copies copies of each.
    #[arg(long)]
    pub recommend: bool,
    #[arg(long, default_value_t = 64 << 10)]
    pub small_bytes: u64,
    #[arg(long, default_value_t = 3)]
    pub copies: u64,
}

/// What each name costs the fast tier besides its data: `du --raw` counts an entry as
/// 77 bytes plus its directory's path and its name; this leaves room for deep paths and
/// the storage engine's own overheads (an upper estimate, as the recommendation is).
const PER_ENTRY_BYTES: u64 = 256;

/// The prefix of a Myriad path read with the native client.
const MYRIAD_PREFIX: &str = "myriad:";

/// Whether `path` names a Myriad path (`myriad:/PATH`) rather than a local one.
pub fn is_myriad_path(path: &Path) -> bool {
    path.to_str().is_some_and(|p| p.starts_with(MYRIAD_PREFIX))
}

pub fn run(a: &FsstatsArgs) -> anyhow::Result<()> {
    let path = a.path.clone().unwrap_or_default();
    let stats =
        walk(&path, a.threads.max(1)).with_context(|| format!("fsstats of {}", path.display()))?;
    report(a, &path, &stats, None)
}

/// `fsstats --kept`: every partition's kept statistics, merged. A split directory's
/// pieces (one per partition holding shards of it) are summed into one directory.
pub async fn run_kept(a: &FsstatsArgs, client: &myriad_client::Client) -> anyhow::Result<()> {
    use futures::StreamExt;
    use myriad_client::proto::ask;
    use myriad_client::proto::reply::KeptStats;
    let pids: Vec<_> = client.map().partitions.iter().map(|p| p.id).collect();
    let total = pids.len();
    let answers: Vec<_> = futures::stream::iter(pids)
        .map(|pid| async move {
            let r = client.ask_partition(pid, ask::kept_stats()).await;
            (pid, r)
        })
        .buffer_unordered(a.threads.max(1))
        .collect()
        .await;
    let mut stats = FsStats::default();
    let mut split: std::collections::BTreeMap<String, u64> = std::collections::BTreeMap::new();
    let mut not_counted = 0usize;
    for (pid, r) in answers {
        match r.with_context(|| format!("partition {pid}"))? {
            KeptStats {
                stats: Some(s),
                split_dirs,
            } => {
                stats.merge(&s);
                for (dir, n) in split_dirs {
                    *split.entry(dir).or_default() += n;
                }
            }
            KeptStats { stats: None, .. } => not_counted += 1,
        }
    }
    for n in split.values() {
        stats.dir_entries.add(*n);
    }
    if not_counted > 0 {
        eprintln!(
            "myriad: {not_counted} of {total} partitions keep no fsstats (servers keep them with --kept-stats, counted when a partition opens); the figures leave them out"
        );
    }
    report(
        a,
        Path::new("myriad (kept by the servers)"),
        &stats,
        Some(not_counted),
    )
}

/// `fsstats myriad:/PATH`: the walk through the native client.
pub async fn run_native(a: &FsstatsArgs, client: &myriad_client::Client) -> anyhow::Result<()> {
    let path = a
        .path
        .as_deref()
        .and_then(Path::to_str)
        .and_then(|p| p.strip_prefix(MYRIAD_PREFIX))
        .unwrap_or("/");
    let root = crate::fs_cmds::normalize(path)?;
    let stats = walk_native(client, &root, a.threads.max(1))
        .await
        .with_context(|| format!("fsstats of {MYRIAD_PREFIX}{root}"))?;
    report(
        a,
        Path::new(&format!("{MYRIAD_PREFIX}{root}")),
        &stats,
        None,
    )
}

/// Prints `stats` of `what`; `not_counted`: with `--kept`, partitions left out.
fn report(
    a: &FsstatsArgs,
    what: &Path,
    stats: &FsStats,
    not_counted: Option<usize>,
) -> anyhow::Result<()> {
    if a.json {
        let mut v = serde_json::to_value(stats)?;
        if let Some(n) = not_counted {
            v["partitions_not_counted"] = serde_json::json!(n);
        }
        if a.recommend {
            v["recommended_fast_tier_bytes"] =
                serde_json::json!(
                    stats.fast_tier_bytes(a.small_bytes, a.copies, PER_ENTRY_BYTES) as u64
                );
        }
        println!("{}", serde_json::to_string_pretty(&v)?);
    } else {
        print!("{}", tables(what, stats));
        if a.recommend {
            let bytes = stats.fast_tier_bytes(a.small_bytes, a.copies, PER_ENTRY_BYTES);
            println!(
                "fast tier for all metadata and files below {} ({} copies): {} ({} bytes)",
                human(u128::from(a.small_bytes)),
                a.copies,
                human(bytes),
                bytes
            );
        }
    }
    if let Some(png) = &a.plot {
        std::fs::write(png, plot(stats)?).with_context(|| format!("writing {}", png.display()))?;
    }
    Ok(())
}

/// The shared state of the walkers: directories still to list, and how many are being
/// listed (the walk ends when both are none).
struct Queue {
    state: Mutex<(Vec<PathBuf>, usize)>,
    more: Condvar,
}

impl Queue {
    fn next(&self) -> Option<PathBuf> {
        let mut g = self
            .state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        loop {
            if let Some(d) = g.0.pop() {
                g.1 += 1;
                return Some(d);
            }
            if g.1 == 0 {
                return None;
            }
            g = self
                .more
                .wait(g)
                .unwrap_or_else(std::sync::PoisonError::into_inner);
        }
    }

    fn done(&self, found: Vec<PathBuf>) {
        let mut g = self
            .state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        g.0.extend(found);
        g.1 -= 1;
        self.more.notify_all();
    }
}

/// Walks `root` with `threads` threads.
pub fn walk(root: &Path, threads: usize) -> anyhow::Result<FsStats> {
    let meta = std::fs::symlink_metadata(root)?;
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let seen = Mutex::new(HashSet::new());
    let mut total = FsStats::default();
    if !meta.is_dir() {
        add(&mut total, &seen, name_len(root), &meta, now, || Ok(0));
        return Ok(total);
    }
    let queue = Queue {
        state: Mutex::new((vec![root.to_path_buf()], 0)),
        more: Condvar::new(),
    };
    let parts: Vec<FsStats> = std::thread::scope(|s| {
        let workers: Vec<_> = (0..threads)
            .map(|_| {
                s.spawn(|| {
                    let mut mine = FsStats::default();
                    while let Some(dir) = queue.next() {
                        let found = list(&dir, &mut mine, &seen, now);
                        queue.done(found);
                    }
                    mine
                })
            })
            .collect();
        workers
            .into_iter()
            .map(|w| w.join().unwrap_or_default())
            .collect()
    });
    for p in &parts {
        total.merge(p);
    }
    Ok(total)
}

/// Lists `dir` into `stats` (the directory itself with its number of entries, and every
/// entry but its subdirectories, which are listed in turn) and returns its subdirectories.
fn list(
    dir: &Path,
    stats: &mut FsStats,
    seen: &Mutex<HashSet<(u64, u64)>>,
    now: u64,
) -> Vec<PathBuf> {
    let mut subdirs = Vec::new();
    let rd = match std::fs::read_dir(dir) {
        Ok(rd) => rd,
        Err(_) => {
            stats.errors += 1;
            return subdirs;
        }
    };
    let mut entries = 0u64;
    for e in rd {
        let Ok(e) = e else {
            stats.errors += 1;
            continue;
        };
        entries += 1;
        let path = e.path();
        let Ok(meta) = std::fs::symlink_metadata(&path) else {
            stats.errors += 1;
            continue;
        };
        if meta.is_dir() {
            subdirs.push(path);
            continue;
        }
        add(stats, seen, name_len(&path), &meta, now, || {
            std::fs::read_link(&path).map(|t| t.as_os_str().len() as u64)
        });
    }
    stats.add_dir(name_len(dir), entries);
    subdirs
}

fn name_len(p: &Path) -> usize {
    p.file_name().map_or(0, |n| n.len())
}

/// Adds one non-directory.
fn add(
    stats: &mut FsStats,
    seen: &Mutex<HashSet<(u64, u64)>>,
    name_len: usize,
    meta: &std::fs::Metadata,
    now: u64,
    target_len: impl FnOnce() -> std::io::Result<u64>,
) {
    let ft = meta.file_type();
    if ft.is_symlink() {
        match target_len() {
            Ok(n) => stats.add_symlink(name_len, n),
            Err(_) => stats.errors += 1,
        }
    } else if ft.is_file() {
        if meta.nlink() > 1 {
            let first = seen
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .insert((meta.dev(), meta.ino()));
            if !first {
                // Another name of a file already counted: only the name.
                stats.name_len.add(name_len as u64);
                return;
            }
        }
        let age = |t: i64| now.saturating_sub(u64::try_from(t).unwrap_or(0));
        stats.add_file(
            name_len,
            FileFacts {
                size: meta.len(),
                capacity: meta.blocks().saturating_mul(512),
                nlink: meta.nlink(),
                mtime_age_secs: age(meta.mtime()),
                ctime_age_secs: age(meta.ctime()),
            },
        );
    } else {
        stats.add_other(name_len);
    }
}

/// Walks Myriad path `root` with the native client, `parallel` listings at a time. The
/// capacity of a file is what its data takes, as `du --raw` counts it: every copy of
/// every block with its checksum.
pub async fn walk_native(
    client: &myriad_client::Client,
    root: &str,
    parallel: usize,
) -> anyhow::Result<FsStats> {
    use crate::tree_walk::Visit;
    use myriad_client::FileKind;
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let copies = crate::tree_walk::copies(client);
    let mut stats = FsStats::default();
    let mut seen = HashSet::new();
    let age = |ns: i64| now.saturating_sub(u64::try_from(ns / 1_000_000_000).unwrap_or(0));
    crate::tree_walk::walk(client, root, parallel, |v| match v {
        Visit::Dir(dir, entries) => stats.add_dir(
            myriad_placement::split_parent(dir).1.len(),
            entries.len() as u64,
        ),
        Visit::Unreadable(..) => stats.errors += 1,
        Visit::Other(_, name, i) => match i.kind {
            FileKind::Symlink => {
                let n = i.symlink_target.as_ref().map_or(0, String::len) as u64;
                stats.add_symlink(name.len(), n);
            }
            FileKind::File | FileKind::HardLink => {
                if i.nlink > 1 && !seen.insert(i.ino) {
                    stats.name_len.add(name.len() as u64);
                    return;
                }
                stats.add_file(
                    name.len(),
                    FileFacts {
                        size: i.size,
                        capacity: crate::du_cmd::raw_data_bytes(i.size, copies),
                        nlink: u64::from(i.nlink),
                        mtime_age_secs: age(i.mtime_ns),
                        ctime_age_secs: age(i.ctime_ns),
                    },
                );
            }
            _ => stats.add_other(name.len()),
        },
    })
    .await?;
    Ok(stats)
}

/// Bytes in base-2 units (sums beyond 16 EiB shown as that).
fn human(b: u128) -> String {
    crate::fs_cmds::human(u64::try_from(b).unwrap_or(u64::MAX))
}

/// Edges of a bucket in the metric's unit.
fn bucket_label(b: (u64, Option<u64>), unit: Unit) -> String {
    let f = |v: u64| match unit {
        Unit::Bytes => human(u128::from(v)),
        Unit::Count => v.to_string(),
        Unit::Days => format!("{}d", v / 86_400),
    };
    match b.1 {
        Some(high) => format!("{} - <{}", f(b.0), f(high)),
        None => format!("{} -", f(b.0)),
    }
}

#[derive(Clone, Copy)]
enum Unit {
    Bytes,
    Count,
    Days,
}

fn table(out: &mut String, title: &str, h: &Histogram, unit: Unit, with_sums: bool) {
    use std::fmt::Write;
    let value = |v: Option<u64>| match (v, unit) {
        (None, _) => "-".to_string(),
        (Some(v), Unit::Bytes) => human(u128::from(v)),
        (Some(v), Unit::Count) => v.to_string(),
        (Some(v), Unit::Days) => format!("{:.1}d", v as f64 / 86_400.0),
    };
    let avg = match unit {
        Unit::Bytes => human(h.average() as u128),
        Unit::Count => format!("{:.1}", h.average()),
        Unit::Days => format!("{:.1}d", h.average() / 86_400.0),
    };
    let _ = writeln!(
        out,
        "\n{title}: count {}, average {avg}, min {}, max {}",
        h.count,
        value(h.min),
        value(h.max)
    );
    if h.count == 0 {
        return;
    }
    if with_sums {
        let _ = writeln!(
            out,
            "  {:>24} {:>12} {:>7} {:>7} {:>12} {:>7} {:>7}",
            "bucket", "count", "%", "cum %", "bytes", "%", "cum %"
        );
    } else {
        let _ = writeln!(
            out,
            "  {:>24} {:>12} {:>7} {:>7}",
            "bucket", "count", "%", "cum %"
        );
    }
    for r in h.rows() {
        let label = bucket_label((r.low, r.high), unit);
        if with_sums {
            let _ = writeln!(
                out,
                "  {label:>24} {:>12} {:>7.2} {:>7.2} {:>12} {:>7.2} {:>7.2}",
                r.count,
                r.count_pct,
                r.count_cum_pct,
                human(r.sum),
                r.sum_pct,
                r.sum_cum_pct
            );
        } else {
            let _ = writeln!(
                out,
                "  {label:>24} {:>12} {:>7.2} {:>7.2}",
                r.count, r.count_pct, r.count_cum_pct
            );
        }
    }
}

/// The tables, fsstats style.
fn tables(root: &Path, s: &FsStats) -> String {
    use std::fmt::Write;
    let mut out = String::new();
    let _ = writeln!(
        out,
        "fsstats of {}: {} files ({}), {} directories, {} symlinks, {} files with hard links, {} other, {} unreadable",
        root.display(),
        s.size.count,
        human(s.size.sum),
        s.dir_entries.count,
        s.symlinks.count,
        s.hard_links.count,
        s.other,
        s.errors
    );
    let _ = writeln!(
        out,
        "total user data {}, total capacity used {} (overhead {:.1}%)",
        human(s.size.sum),
        human(s.capacity.sum),
        if s.size.sum > 0 {
            100.0 * (s.capacity.sum as f64 - s.size.sum as f64) / s.size.sum as f64
        } else {
            0.0
        }
    );
    table(&mut out, "file size", &s.size, Unit::Bytes, true);
    table(&mut out, "capacity used", &s.capacity, Unit::Bytes, true);
    table(
        &mut out,
        "directory size (entries)",
        &s.dir_entries,
        Unit::Count,
        false,
    );
    table(
        &mut out,
        "file age since modification",
        &s.mtime_age,
        Unit::Days,
        false,
    );
    table(
        &mut out,
        "file age since status change",
        &s.ctime_age,
        Unit::Days,
        false,
    );
    table(
        &mut out,
        "name length (bytes)",
        &s.name_len,
        Unit::Count,
        false,
    );
    table(
        &mut out,
        "symlink target length (bytes)",
        &s.symlinks,
        Unit::Count,
        false,
    );
    table(
        &mut out,
        "hard links (links per file)",
        &s.hard_links,
        Unit::Count,
        false,
    );
    out
}

/// The seed's Fig. 5: per size bucket (at its midpoint), the % of files and the cumulative
/// % of capacity.
fn plot(s: &FsStats) -> anyhow::Result<Vec<u8>> {
    let mid = |h: &Histogram, b: usize| {
        let (low, high) = h.edges(b);
        let high = high.unwrap_or(low.saturating_mul(2));
        (low as f64 + high as f64) / 2.0
    };
    let counts = s
        .size
        .rows()
        .iter()
        .enumerate()
        .map(|(b, r)| (mid(&s.size, b), r.count_pct))
        .collect();
    let capacity = s
        .capacity
        .rows()
        .iter()
        .enumerate()
        .map(|(b, r)| (mid(&s.capacity, b), r.sum_cum_pct))
        .collect();
    crate::plot::line_chart_png(
        "file size distribution (fsstats)",
        "file size (bytes, bucket midpoint)",
        "% of all",
        &[
            crate::plot::Series {
                name: "file count %".into(),
                points: counts,
            },
            crate::plot::Series {
                name: "capacity cum %".into(),
                points: capacity,
            },
        ],
    )
    .map_err(|e| anyhow::anyhow!("plot: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn human_sizes_use_base_two_units() {
        assert_eq!(human(1000), "1000 B");
        assert_eq!(human(2048), "2.0 KiB");
        assert_eq!(human(3 << 20), "3.0 MiB");
    }
}
