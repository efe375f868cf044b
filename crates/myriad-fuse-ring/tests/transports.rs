//! Both transports serve real requests from the kernel: a mount of the probe file system,
//! callers whose every call is one request (each reply checked by the caller: a stat's
//! size, a read's length), counted by the daemon on the path it came by. Needs root and
//! /dev/fuse, as the mount's own tests do.

use myriad_fuse_ring::{Op, Transport, measure, ring};

fn check(samples: &[myriad_fuse_ring::Sample], ring_share: f64) {
    assert_eq!(samples.len(), 4, "two ops at two numbers of callers");
    for s in samples {
        assert!(s.calls_per_sec > 100.0, "{s:?}");
        // A call is one request; the odd LOOKUP, OPEN and RELEASE of the callers' opens
        // add a little.
        assert!(
            (0.99..1.1).contains(&s.requests_per_call),
            "each call is one kernel request: {s:?}"
        );
        assert!((s.ring_share - ring_share).abs() < 0.01, "{s:?}");
        assert!(s.process_cpu_us > 0.0, "{s:?}");
    }
}

#[test]
fn the_device_channel_answers_every_request() {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let samples = measure(
        dir.path(),
        Transport::Device { threads: 2 },
        &[Op::Stat, Op::Read4k],
        &[1, 3],
        0.3,
    )
    .unwrap_or_else(|e| panic!("{e}"));
    check(&samples, 0.0);
}

#[test]
fn the_ring_answers_every_request_once_registered() {
    if let Some(why) = ring::unavailable() {
        eprintln!("{why}: nothing to test");
        return;
    }
    let was = match ring::set_enabled(true) {
        Ok(was) => was,
        Err(e) => {
            // A kernel without CONFIG_FUSE_IO_URING has no such parameter.
            eprintln!("FUSE over io_uring is not available here ({e}): nothing to test");
            return;
        }
    };
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let got = measure(
        dir.path(),
        Transport::Ring {
            depth: 4,
            pin: true,
        },
        &[Op::Stat, Op::Read4k],
        &[1, 3],
        0.3,
    );
    if !was {
        ring::set_enabled(false).unwrap_or_else(|e| panic!("{e}"));
    }
    check(&got.unwrap_or_else(|e| panic!("{e}")), 1.0);
}
