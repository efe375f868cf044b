//! A server's stores: one in the data directory, or a fast tier (`--fast-dir`) beside it
//! (docs/redundancy.md "Tiers"; the two-store protocol is `myriad_storage::TieredKv`). And
//! the task that watches the fast tier's disk: past the high-water mark new first chunks
//! overflow to the capacity tier; below the low-water mark they move back.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use myriad_proto::{StatFs, TierStat};
use myriad_storage::{
    BLOCK_BYTES, FjallKv, Kv, MAX_JOURNAL_BYTES, StorageError, TierRole, TieredKv,
};

use crate::config::{ServerConfig, TierConfig};
use crate::space::disk_space;

/// How often the fast tier's fill is looked at.
const WATCH: Duration = Duration::from_millis(200);
/// Blocks moved back per look (64 KiB each).
const MOVE_PAGE: usize = 256;

pub(crate) struct Stores {
    pub kv: Arc<dyn Kv>,
    pub tiered: Option<Arc<TieredKv>>,
}

/// Opens the server's store(s). A data directory keeps the role it was first opened in: a
/// store used without `--fast-dir` cannot become a capacity tier, nor the reverse.
pub(crate) fn open(config: &ServerConfig) -> Result<Stores, StorageError> {
    let capacity_dir = config.data_dir.join("store");
    let Some(t) = tier_config(config) else {
        let kv = FjallKv::open(&capacity_dir)?;
        TierRole::Single.claim(&kv)?;
        return Ok(Stores {
            kv: Arc::new(kv),
            tiered: None,
        });
    };
    std::fs::create_dir_all(&t.fast_dir).map_err(|e| {
        StorageError::Engine(format!("cannot create {}: {e}", t.fast_dir.display()))
    })?;
    // The journal holds every write until its memtable is flushed, large ones included (a
    // batch's capacity part passes through it as a redo record): on a small fast disk it
    // may take an eighth of it, not fjall's default 512 MiB.
    let total = disk_space(&t.fast_dir).map_or(u64::MAX, |(total, _)| total);
    let fast = FjallKv::open_with_journal(
        &t.fast_dir.join("store"),
        (total / 8).min(MAX_JOURNAL_BYTES),
    )?;
    let capacity = FjallKv::open(&capacity_dir)?;
    let blocks_per_chunk = config.map.chunk_size_bytes / BLOCK_BYTES;
    let tiered = Arc::new(TieredKv::open(
        Arc::new(fast),
        Arc::new(capacity),
        blocks_per_chunk,
    )?);
    Ok(Stores {
        kv: tiered.clone(),
        tiered: Some(tiered),
    })
}

/// The tiers, unless the fast directory is the data directory itself (then: one store).
pub(crate) fn tier_config(config: &ServerConfig) -> Option<&TierConfig> {
    config
        .tiers
        .as_ref()
        .filter(|t| same_dir(&t.fast_dir, &config.data_dir).is_none_or(|same| !same))
}

fn same_dir(a: &Path, b: &Path) -> Option<bool> {
    Some(std::fs::canonicalize(a).ok()? == std::fs::canonicalize(b).ok()?)
}

/// Sets the overflow mark from the fast tier's fill, and moves overflowed first chunks
/// back while the fill is below the low-water mark. Ends when the store does.
pub(crate) fn spawn_watch(
    tiered: Arc<TieredKv>,
    config: TierConfig,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(WATCH);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            let Some(used) = fill(&config.fast_dir) else {
                continue;
            };
            let over = used >= config.high_water;
            if over != tiered.overflowing() {
                tiered.set_overflowing(over);
                tracing::info!(
                    fast_dir = %config.fast_dir.display(),
                    used_percent = (used * 100.0).round(),
                    "fast tier {}",
                    if over {
                        "past its high-water mark: new first chunks go to the capacity tier"
                    } else {
                        "below its high-water mark: new first chunks go to the fast tier again"
                    }
                );
            }
            if used < config.low_water {
                let t = tiered.clone();
                match tokio::task::spawn_blocking(move || t.move_back(MOVE_PAGE)).await {
                    Ok(Ok(n)) if n > 0 => {
                        tracing::debug!(blocks = n, "moved back to the fast tier")
                    }
                    Ok(Err(e)) => tracing::warn!("moving blocks back to the fast tier: {e}"),
                    _ => {}
                }
            }
        }
    })
}

/// Fraction of the disk holding `dir` in use.
fn fill(dir: &Path) -> Option<f64> {
    let (total, free) = disk_space(dir)?;
    (total > 0).then(|| 1.0 - free as f64 / total as f64)
}

/// `statfs` of a server: its disks (once each) and, with tiers, each tier's own figures.
pub(crate) fn statfs(
    data_dir: &Path,
    kv: &dyn Kv,
    tiers: Option<(&TieredKv, &TierConfig)>,
) -> StatFs {
    let (capacity_total, capacity_free) = disk_space(data_dir).unwrap_or((0, 0));
    let (mut total, mut free) = (capacity_total, capacity_free);
    let Some((tiered, config)) = tiers else {
        return StatFs {
            total_bytes: total,
            free_bytes: free,
            used_bytes: kv.disk_bytes(),
            files: 0,
            tiers: Vec::new(),
        };
    };
    let (fast_total, fast_free) = disk_space(&config.fast_dir).unwrap_or((0, 0));
    if !same_device(data_dir, &config.fast_dir) {
        total += fast_total;
        free += fast_free;
    }
    let (fast_used, capacity_used) = tiered.tier_bytes();
    let counts = tiered.counts();
    StatFs {
        total_bytes: total,
        free_bytes: free,
        used_bytes: fast_used + capacity_used,
        files: 0,
        tiers: vec![
            TierStat {
                name: "fast".into(),
                total_bytes: fast_total,
                free_bytes: fast_free,
                used_bytes: fast_used,
                overflowing: tiered.overflowing(),
                overflowed_blocks: counts.overflowed_blocks,
                moved_back_blocks: counts.moved_back_blocks,
            },
            TierStat {
                name: "capacity".into(),
                total_bytes: capacity_total,
                free_bytes: capacity_free,
                used_bytes: capacity_used,
                overflowing: false,
                overflowed_blocks: 0,
                moved_back_blocks: 0,
            },
        ],
    }
}

fn same_device(a: &Path, b: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    match (std::fs::metadata(a), std::fs::metadata(b)) {
        (Ok(a), Ok(b)) => a.dev() == b.dev(),
        _ => false,
    }
}

/// The directories whose free space admits writes (space.rs): the data directory, and the
/// fast tier's when there is one.
pub(crate) fn admitting_dirs(config: &ServerConfig) -> Vec<PathBuf> {
    let mut dirs = vec![config.data_dir.clone()];
    if let Some(t) = tier_config(config) {
        dirs.push(t.fast_dir.clone());
    }
    dirs
}
