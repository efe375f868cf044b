//! `myriad bench fuse-transport`: what one FUSE kernel request costs over the classic
//! /dev/fuse channel (the mount's: reader threads with cloned descriptors) and over FUSE over
//! io_uring, each serving the same do-nothing file system (crate `myriad-fuse-ring`), at
//! several numbers of concurrent callers: calls per second, their ratio to /dev/fuse, and
//! CPU per request (this process: callers and daemon; and the whole machine). Needs root (it
//! mounts, and sets `fuse.enable_uring` for the run, restoring it after).

use std::path::PathBuf;

use clap::Args;
use myriad_fuse_ring::{Op, Sample, Transport, measure, ring};
use serde::Serialize;

#[derive(Args, Clone)]
pub struct FuseTransportArgs {
    /// Seconds each phase runs.
    #[arg(long, default_value_t = 3.0)]
    seconds: f64,
    /// Numbers of concurrent callers, one phase each.
    #[arg(long, value_delimiter = ',', default_value = "1,4,16")]
    callers: Vec<usize>,
    /// Reader threads on /dev/fuse (the mount's `--fuse-threads` default).
    #[arg(long, default_value_t = 4)]
    device_threads: usize,
    /// Ring entries per queue (one queue per possible CPU).
    #[arg(long, default_value_t = 16)]
    depth: usize,
    #[arg(long, default_value = "bench-results")]
    out_dir: PathBuf,
}

#[derive(Serialize)]
struct Row {
    transport: String,
    op: &'static str,
    callers: usize,
    calls_per_sec: f64,
    ratio_to_device: f64,
    requests_per_call: f64,
    ring_share: f64,
    process_cpu_us_per_request: f64,
    machine_cpu_us_per_request: f64,
}

pub fn run(args: FuseTransportArgs) -> anyhow::Result<()> {
    // SAFETY: geteuid has no memory effects.
    if unsafe { libc::geteuid() } != 0 {
        anyhow::bail!("bench fuse-transport mounts a probe file system and needs root");
    }
    let tmp = tempfile::Builder::new()
        .prefix("myriad-fuse-transport-")
        .tempdir()?;
    let ops = [Op::Stat, Op::Read4k];
    eprintln!(
        "bench fuse-transport: {} s per phase, callers {:?}, /dev/fuse with {} readers against io_uring with {} entries per queue ({} queues)",
        args.seconds,
        args.callers,
        args.device_threads,
        args.depth,
        ring::possible_cpus()?
    );
    let device = Transport::Device {
        threads: args.device_threads,
    };
    let mut samples = measure(tmp.path(), device, &ops, &args.callers, args.seconds)?;
    match ring::set_enabled(true) {
        Ok(was) => {
            for pin in [true, false] {
                let t = Transport::Ring {
                    depth: args.depth,
                    pin,
                };
                let got = measure(tmp.path(), t, &ops, &args.callers, args.seconds);
                match got {
                    Ok(s) => samples.extend(s),
                    Err(e) => eprintln!("{}: not measured: {e}", t.name()),
                }
            }
            if !was {
                ring::set_enabled(false)?;
            }
        }
        Err(e) => eprintln!(
            "io_uring not measured: cannot set /sys/module/fuse/parameters/enable_uring ({e}); the kernel needs CONFIG_FUSE_IO_URING (Linux 6.14+)"
        ),
    }
    let rows = rows_of(&samples);
    print(&rows);
    std::fs::create_dir_all(&args.out_dir)?;
    let path = args.out_dir.join("bench-fuse-transport.json");
    std::fs::write(&path, serde_json::to_string_pretty(&rows)?)?;
    eprintln!("wrote {}", path.display());
    Ok(())
}

/// Each sample with its ratio to /dev/fuse's sample of the same op and callers.
fn rows_of(samples: &[Sample]) -> Vec<Row> {
    let device = |s: &Sample| {
        samples
            .iter()
            .find(|d| d.ring_share == 0.0 && d.op == s.op && d.callers == s.callers)
            .map(|d| d.calls_per_sec)
    };
    samples
        .iter()
        .map(|s| Row {
            transport: s.transport.clone(),
            op: s.op,
            callers: s.callers,
            calls_per_sec: s.calls_per_sec,
            ratio_to_device: device(s).map_or(0.0, |d| s.calls_per_sec / d.max(1.0)),
            requests_per_call: s.requests_per_call,
            ring_share: s.ring_share,
            process_cpu_us_per_request: s.process_cpu_us,
            machine_cpu_us_per_request: s.machine_cpu_us,
        })
        .collect()
}

fn print(rows: &[Row]) {
    println!(
        "{:<32} {:<11} {:>7} {:>10} {:>9} {:>9} {:>13} {:>13}",
        "transport",
        "op",
        "callers",
        "calls/s",
        "x device",
        "req/call",
        "CPU us/req",
        "machine us/req"
    );
    for r in rows {
        println!(
            "{:<32} {:<11} {:>7} {:>10.0} {:>9.2} {:>9.3} {:>13.2} {:>13.2}",
            r.transport,
            r.op,
            r.callers,
            r.calls_per_sec,
            r.ratio_to_device,
            r.requests_per_call,
            r.process_cpu_us_per_request,
            r.machine_cpu_us_per_request
        );
    }
}
