//! Reads that meet a change of the file they read. A server answers a read from two reads
//! of its store, the entry and then its bytes; a change applied between them (here the
//! truncate of an overwrite, which frees the blocks in the batch that sets the size) must
//! not pair the size read first with the blocks left after: a whole file of zeros. Seen
//! once while a tree moved between zones (the drop of the tree's old copy); an overwrite
//! opens the same window far more often.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use myriad_client::Client;

use crate::harness::TestCluster;

const LEN: usize = 6000;
const PATH: &str = "/race/f";

/// Version `n` of the file: one letter, never zero.
fn version(n: usize) -> Vec<u8> {
    vec![b"abcdefghijklmnopqrstuvwxyz"[n % 26]; LEN]
}

/// Overwrites the file (truncated, then written in place) until `stop`; returns how many
/// versions it wrote.
async fn churn(c: Client, stop: Arc<AtomicBool>) -> usize {
    let mut n = 0;
    while !stop.load(Ordering::Relaxed) {
        c.write_file(PATH, 0o644, &version(n))
            .await
            .unwrap_or_else(|e| panic!("version {n}: {e}"));
        n += 1;
    }
    n
}

/// Reads the file until `stop`: each answer is the file empty (between the truncate and
/// the write of an overwrite) or one whole version. Returns how many reads found a version.
async fn read_loop(c: Client, stop: Arc<AtomicBool>) -> usize {
    let mut found = 0;
    while !stop.load(Ordering::Relaxed) {
        let (_, data) = c.fetch(PATH).await.unwrap_or_else(|e| panic!("read: {e}"));
        if data.is_empty() {
            continue;
        }
        assert_eq!(data.len(), LEN, "a read returned a cut file");
        let first = data[0];
        assert!(
            first != 0 && data.iter().all(|&b| b == first),
            "a read racing an overwrite returned bytes no version held ({} zeros)",
            data.iter().filter(|&&b| b == 0).count()
        );
        found += 1;
    }
    found
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reads_racing_overwrites_see_a_whole_version_or_an_empty_file() {
    let tc = TestCluster::start(1);
    let c = tc.client();
    c.mkdir("/race", 0o777)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    c.write_file(PATH, 0o644, &version(0))
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let stop = Arc::new(AtomicBool::new(false));
    let writer = tokio::spawn(churn(tc.client(), stop.clone()));
    let readers: Vec<_> = (0..3)
        .map(|_| tokio::spawn(read_loop(tc.client(), stop.clone())))
        .collect();
    let began = Instant::now();
    while began.elapsed() < Duration::from_secs(6) && !writer.is_finished() {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    stop.store(true, Ordering::Relaxed);
    let versions = writer.await.unwrap_or_else(|e| panic!("writer: {e}"));
    let mut found = 0;
    for r in readers {
        found += r.await.unwrap_or_else(|e| panic!("reader: {e}"));
    }
    // The race was run: many versions made, and many reads met one.
    assert!(versions >= 100, "only {versions} versions made");
    assert!(found >= 100, "only {found} reads found the file");
}
