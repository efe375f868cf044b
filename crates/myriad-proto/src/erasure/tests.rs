use proptest::prelude::*;

use super::*;

#[test]
fn the_code_follows_the_cluster_size() {
    let p = |servers, copies| EcParams::for_cluster(servers, copies).map(|p| (p.k, p.m));
    assert_eq!(p(4, 3), Some((2, 2)));
    assert_eq!(p(6, 3), Some((4, 2)));
    assert_eq!(p(10, 3), Some((8, 2)));
    assert_eq!(p(32, 3), Some((8, 2)), "at most 8 data fragments");
    assert_eq!(p(3, 3), None, "k would be 1: copies are as good");
    assert_eq!(p(6, 1), None, "no redundancy asked");
    assert_eq!(p(3, 2), Some((2, 1)));
}

#[test]
fn a_4_plus_2_chunk_costs_one_and_a_half() {
    let p = EcParams { k: 4, m: 2 };
    let chunk = 4 << 20;
    assert_eq!(p.fragment_bytes(chunk), 1 << 20);
    assert!((p.raw_ratio(chunk) - 1.5).abs() < 1e-9);
    // A 256 MiB file: chunk 0 in 3 copies, 63 chunks coded 4+2 (the 1.55).
    let raw = 3.0 * 4.0 + 63.0 * 4.0 * p.raw_ratio(chunk);
    assert!(raw / 256.0 <= 1.55, "{}", raw / 256.0);
}

#[test]
fn a_healthy_read_asks_only_the_data_fragments_it_covers() {
    let p = EcParams { k: 4, m: 2 };
    let chunk = 4 << 20;
    let f = 1 << 20;
    assert_eq!(p.data_fragments_for(chunk, 0, 10), 0..1);
    assert_eq!(p.data_fragments_for(chunk, f - 1, 2), 0..2);
    assert_eq!(p.data_fragments_for(chunk, 0, chunk), 0..4);
    assert_eq!(p.data_fragments_for(chunk, 3 * f, f), 3..4);
    assert_eq!(p.data_fragments_for(chunk, 5, 0), 0..0);
}

#[test]
fn too_many_losses_and_wrong_sizes_are_errors_not_wrong_bytes() {
    let rs = ReedSolomon::new(EcParams { k: 4, m: 2 }).unwrap_or_else(|e| panic!("{e}"));
    let chunk: Vec<u8> = (0..10_000u32).map(|i| (i * 7) as u8).collect();
    let frags = rs.encode(&chunk).unwrap_or_else(|e| panic!("{e}"));
    let mut some: Vec<Option<Vec<u8>>> = frags.into_iter().map(Some).collect();
    some[0] = None;
    some[1] = None;
    some[5] = None;
    assert_eq!(
        rs.decode(chunk.len(), &some),
        Err(ErasureError::TooFewFragments { have: 3, k: 4 })
    );
    some[2] = Some(vec![0; 3]);
    assert!(matches!(
        rs.decode(chunk.len(), &some),
        Err(ErasureError::BadFragment { index: 2, .. })
    ));
    assert!(ReedSolomon::new(EcParams { k: 0, m: 2 }).is_err());
}

proptest! {
    /// Any k of the k+m fragments give the chunk back, byte for byte; the data fragments
    /// are the chunk itself (systematic).
    #[test]
    fn any_k_fragments_rebuild_the_chunk(
        k in 2u8..=8,
        m in 1u8..=3,
        chunk in proptest::collection::vec(any::<u8>(), 0..20_000),
        lost_seed in any::<u64>(),
    ) {
        let rs = ReedSolomon::new(EcParams { k, m }).unwrap_or_else(|e| panic!("{e}"));
        let frags = rs.encode(&chunk).unwrap_or_else(|e| panic!("{e}"));
        let n = usize::from(k) + usize::from(m);
        prop_assert_eq!(frags.len(), n);
        let joined: Vec<u8> = frags[..usize::from(k)].concat();
        prop_assert_eq!(&joined[..chunk.len()], &chunk[..]);
        // Lose m fragments chosen by the seed.
        let mut order: Vec<usize> = (0..n).collect();
        let mut s = lost_seed;
        for i in (1..n).rev() {
            s = s.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            order.swap(i, (s >> 33) as usize % (i + 1));
        }
        let mut some: Vec<Option<Vec<u8>>> = frags.into_iter().map(Some).collect();
        for &i in &order[..usize::from(m)] {
            some[i] = None;
        }
        prop_assert_eq!(rs.decode(chunk.len(), &some).unwrap_or_else(|e| panic!("{e}")), chunk);
    }
}
