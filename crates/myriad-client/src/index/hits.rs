//! Hit counts of indexes across clients (`myriad index status`): each mount writes the
//! answers it gave from each index, now and then, into a file of its own under
//! `tree_index::HITS_DIR`; status adds them up. Counts only: nothing reads them to
//! answer.

use std::collections::BTreeMap;

use myriad_placement::join;
use myriad_proto::FsError;
use myriad_proto::tree_index::{HITS_DIR, INDEX_DIR};

use crate::client::Client;

/// The most a hit file may take (a line per index file).
const HITS_FILE_MAX: u64 = 1 << 20;

impl Client {
    /// Writes `hits` (answers given from each index file, since the reporter started)
    /// as reporter `id`'s hit file. Root only.
    pub async fn report_index_hits(
        &self,
        id: u64,
        hits: &BTreeMap<String, u64>,
    ) -> Result<(), FsError> {
        let text: String = hits.iter().map(|(f, n)| format!("{f} {n}\n")).collect();
        self.mkdir_p(INDEX_DIR, 0o755).await?;
        self.mkdir_p(HITS_DIR, 0o755).await?;
        let path = join(HITS_DIR, &format!("{id:016x}"));
        // A create of an existing file opens it as it is: rewritten in place.
        let h = self.create(&path, 0o644, false, b"").await?;
        self.write(&h, 0, text.as_bytes()).await?;
        self.truncate(&h, text.len() as u64).await.map(drop)
    }

    /// Answers given from each index file by every client that reported them.
    pub async fn index_hit_counts(&self) -> Result<BTreeMap<String, u64>, FsError> {
        let listing = match self.readdir_servers(HITS_DIR).await {
            Ok(l) => l,
            Err(FsError::NotFound) => return Ok(BTreeMap::new()),
            Err(e) => return Err(e),
        };
        let mut out = BTreeMap::new();
        for e in listing {
            let path = join(HITS_DIR, &e.name);
            let bytes = match self.fetch_head_servers(&path, HITS_FILE_MAX).await {
                Ok((_, b)) => b,
                Err(FsError::NotFound) => continue,
                Err(err) => return Err(err),
            };
            for (file, n) in parse_hits(&String::from_utf8_lossy(&bytes)) {
                *out.entry(file).or_insert(0) += n;
            }
        }
        Ok(out)
    }
}

/// The lines `<file> <hits>` of a hit file; malformed lines are skipped.
fn parse_hits(text: &str) -> Vec<(String, u64)> {
    text.lines()
        .filter_map(|l| {
            let (file, n) = l.split_once(' ')?;
            Some((file.to_string(), n.trim().parse().ok()?))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    #[test]
    fn hit_lines_are_read_back_and_junk_is_skipped() {
        let text = "5.17 40\nnonsense\n9.2 x\n9.3 7\n";
        assert_eq!(
            super::parse_hits(text),
            vec![("5.17".to_string(), 40), ("9.3".to_string(), 7)]
        );
    }
}
