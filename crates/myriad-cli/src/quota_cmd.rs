//! `myriad quota set|get|list|clear`: directory quotas (docs/quotas.md). A quota is part of
//! the cluster map, committed through the cluster-map Raft group like every map change;
//! each partition keeps its part of every quota's usage in the batches that change it,
//! and `get` sums the parts.

use anyhow::{Context, bail};
use clap::Subcommand;
use myriad_client::{Client, ClusterMap, FileKind, Quota};

/// The protocol every server must speak before a quota is set: older ones would drop it
/// from the maps they pass on and count nothing.
const QUOTAS_FLOOR: u16 = myriad_placement::map_wire::QUOTAS_SINCE;

#[derive(Subcommand)]
pub enum QuotaCmd {
    /// Limit the tree below directory PATH (PATH's own name not counted) to --bytes of
    /// regular files (their logical sizes, as `du --apparent-size`) and --files names
    /// (files, directories, symbolic links); 0 or absent: no limit of that kind. Setting
    /// it again changes the limits and keeps the usage. Needs the cluster secret.
    Set {
        path: String,
        /// Bytes, with an optional K, M, G, T or P (powers of 1024): 10G.
        #[arg(long, value_parser = parse_amount)]
        bytes: Option<u64>,
        /// Names, with an optional K, M or G (powers of 1000): 1M.
        #[arg(long, value_parser = parse_count)]
        files: Option<u64>,
    },
    /// The quotas whose trees hold PATH and the one set on PATH, with their usage.
    Get { path: String },
    /// Every quota, with its usage.
    List,
    /// Remove the quota on PATH (its usage is forgotten). Needs the cluster secret.
    Clear { path: String },
}

impl QuotaCmd {
    /// True for the commands that change the cluster map (they need the cluster secret).
    #[must_use]
    pub fn changes_the_map(&self) -> bool {
        matches!(self, QuotaCmd::Set { .. } | QuotaCmd::Clear { .. })
    }
}

pub async fn run(cmd: QuotaCmd, client: &Client) -> anyhow::Result<()> {
    match cmd {
        QuotaCmd::Set { path, bytes, files } => {
            let path = crate::fs_cmds::normalize(&path)?;
            if bytes.is_none() && files.is_none() {
                bail!("give --bytes, --files or both (0: no limit of that kind)");
            }
            let st = client
                .stat(&path)
                .await
                .with_context(|| format!("quota on {path}"))?;
            if st.kind != FileKind::Directory {
                bail!("quota on {path}: not a directory");
            }
            let map = change(client, &path, |m| {
                let floor = m.ext.protocol_floor;
                if floor < QUOTAS_FLOOR {
                    bail!(
                        "quotas need every server on protocol {QUOTAS_FLOOR} or later; this \
                         cluster's floor is {floor} (`myriad node list` shows who holds it back)"
                    );
                }
                let (b, f) = m
                    .quota_at(&path)
                    .map_or((0, 0), |q| (q.max_bytes, q.max_files));
                let next = m.with_quota(&path, bytes.unwrap_or(b), files.unwrap_or(f))?;
                Ok(Some(next))
            })
            .await?;
            let q = map
                .quota_at(&path)
                .context("the quota did not land in the map")?;
            println!("{}", describe(q, &usage_of(client, q.id).await?));
            Ok(())
        }
        QuotaCmd::Get { path } => {
            let path = crate::fs_cmds::normalize(&path)?;
            let map = client.newest_map().await;
            let shown = map.quotas_covering(&path);
            if shown.is_empty() {
                println!("{path}: no quota");
            }
            for q in shown {
                println!("{}", describe(q, &usage_of(client, q.id).await?));
            }
            Ok(())
        }
        QuotaCmd::List => {
            let map = client.newest_map().await;
            if map.ext.quotas.is_empty() {
                println!("no quotas");
            }
            for q in &map.ext.quotas {
                println!("{}", describe(q, &usage_of(client, q.id).await?));
            }
            Ok(())
        }
        QuotaCmd::Clear { path } => {
            let path = crate::fs_cmds::normalize(&path)?;
            change(client, &path, |m| {
                if m.quota_at(&path).is_none() {
                    return Ok(None);
                }
                Ok(Some(m.without_quota(&path)?))
            })
            .await?;
            println!("{path}: no quota");
            Ok(())
        }
    }
}

/// Commits a change of the quota on `path` (map_change.rs): landed once the newest map's
/// quota there is the one it made.
async fn change(
    client: &Client,
    path: &str,
    edit: impl Fn(&ClusterMap) -> anyhow::Result<Option<ClusterMap>>,
) -> anyhow::Result<ClusterMap> {
    crate::map_change::commit_part(client, edit, |m| m.quota_at(path).cloned()).await
}

/// A quota's usage summed over the partitions: (names, bytes), or why it is not known.
type Usage = Result<(u64, u64), String>;

/// Quota `id`'s usage, from every partition's part of it. A partition that has not
/// counted the quota yet (it is counting it, from a map that just set it) is waited for
/// a little, then reported.
async fn usage_of(client: &Client, id: u64) -> anyhow::Result<Usage> {
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let counting = match client.quota_usage(id).await.context("quota usage")? {
            Ok(total) => return Ok(Ok(total)),
            Err(counting) => counting,
        };
        if tokio::time::Instant::now() >= deadline {
            let ids: Vec<String> = counting.iter().map(ToString::to_string).collect();
            return Ok(Err(format!(
                "usage not known yet (partitions {} are counting it)",
                ids.join(",")
            )));
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
}

/// "/lab: 1,234 of 10,000 files (12%), 1.5 GiB of 10 GiB (15%)".
fn describe(q: &Quota, usage: &Usage) -> String {
    let (files, bytes) = match usage {
        Ok(u) => *u,
        Err(why) => {
            return format!(
                "{}: limits {} files, {} bytes; {why}",
                q.path, q.max_files, q.max_bytes
            );
        }
    };
    let part = |used: u64, limit: u64, unit: &dyn Fn(u64) -> String| match used
        .saturating_mul(100)
        .checked_div(limit)
    {
        None => format!("{} (no limit)", unit(used)),
        Some(pct) => format!("{} of {} ({pct}%)", unit(used), unit(limit)),
    };
    format!(
        "{}: files {}, bytes {}",
        q.path,
        part(files, q.max_files, &|n| n.to_string()),
        part(bytes, q.max_bytes, &crate::fs_cmds::human)
    )
}

/// A number with an optional suffix, each a power of `base`.
fn parse_scaled(s: &str, base: u64, suffixes: &str) -> Result<u64, String> {
    let s = s.trim();
    let (digits, scale) = match s.char_indices().last() {
        Some((i, c)) if c.is_ascii_alphabetic() => {
            let Some(k) = suffixes.find(c.to_ascii_uppercase()) else {
                return Err(format!("{s:?}: the suffix must be one of {suffixes}"));
            };
            (&s[..i], base.pow(k as u32 + 1))
        }
        _ => (s, 1),
    };
    let n: u64 = digits
        .parse()
        .map_err(|_| format!("{s:?} is not a whole number (with an optional {suffixes})"))?;
    n.checked_mul(scale)
        .ok_or_else(|| format!("{s:?} is too large"))
}

fn parse_amount(s: &str) -> Result<u64, String> {
    parse_scaled(s, 1024, "KMGTP")
}

fn parse_count(s: &str) -> Result<u64, String> {
    parse_scaled(s, 1000, "KMG")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn amounts_and_counts_take_suffixes_and_refuse_the_rest() {
        assert_eq!(parse_amount("10G"), Ok(10 << 30));
        assert_eq!(parse_amount("512"), Ok(512));
        assert_eq!(parse_amount("1k"), Ok(1024));
        assert_eq!(parse_count("1M"), Ok(1_000_000));
        assert_eq!(parse_count("10000"), Ok(10_000));
        assert!(parse_count("1T").is_err());
        assert!(parse_amount("-1").is_err());
        assert!(parse_amount("1.5G").is_err());
        assert!(parse_amount("99999999999P").is_err());
    }

    #[test]
    fn a_quota_is_described_with_its_usage() {
        let q = Quota {
            id: 7,
            path: "/lab".into(),
            max_bytes: 10 << 30,
            max_files: 10_000,
        };
        assert_eq!(
            describe(&q, &Ok((1234, 3 << 29))),
            "/lab: files 1234 of 10000 (12%), bytes 1.5 GiB of 10.0 GiB (15%)"
        );
        let open = Quota { max_files: 0, ..q };
        assert!(describe(&open, &Ok((5, 0))).contains("files 5 (no limit)"));
    }
}
