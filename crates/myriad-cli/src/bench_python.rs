//! `myriad bench python`: small-file reads where users already are, each beside the
//! native client in the same run on the same cluster and files:
//! - `fetch_many` from Python (the `myriad` package, in a Python process of its own);
//! - S3 GETs through the gateway (`myriad s3`, a process of its own), sent by a plain
//!   HTTP/1.1 client with SigV4 signatures over keep-alive connections;
//! - for reference, the same GETs from boto3 in threads, when boto3 is importable.
//!
//! Each pass reads every file once and checks every byte; the passes take turns for
//! `--rounds` rounds and the median of each is reported.

use std::io::BufRead;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::Instant;

use anyhow::{Context, bail};
use bytes::Bytes;
use clap::Args;
use http_body_util::{BodyExt, Empty};
use serde::Serialize;

use crate::cluster::{LocalCluster, NodeOptions, bench_identity};
use crate::workload::file_content;

#[derive(Args, Clone)]
pub struct PythonArgs {
    #[arg(long, default_value_t = 4)]
    nodes: usize,
    /// Files read by each pass.
    #[arg(long, default_value_t = 20_000)]
    files: u64,
    /// Bytes per file.
    #[arg(long, default_value_t = 4096)]
    file_size: u64,
    /// Fetches (and S3 connections) in flight.
    #[arg(long, default_value_t = 64)]
    parallel: usize,
    /// Rounds of the passes; the median is reported.
    #[arg(long, default_value_t = 3)]
    rounds: usize,
    /// The Python with the `myriad` package installed (scripts/build-wheel.sh, then pip
    /// install target/wheels/myriad-*.whl).
    #[arg(long, default_value = "python3")]
    python: PathBuf,
    #[arg(long, default_value = "bench-results")]
    out_dir: PathBuf,
}

#[derive(Serialize)]
struct Report {
    nodes: usize,
    files: u64,
    file_size: u64,
    parallel: usize,
    rounds: usize,
    native_fetch_per_s: f64,
    python_fetch_per_s: f64,
    s3_get_per_s: f64,
    /// boto3 in 32 threads over the first `boto3_files` files (None: boto3 missing).
    boto3_get_per_s: Option<f64>,
    boto3_files: u64,
    python_over_native: f64,
    s3_over_native: f64,
    native_all: Vec<f64>,
    python_all: Vec<f64>,
    s3_all: Vec<f64>,
}

const BUCKET: &str = "bench";
const ACCESS_KEY: &str = "benchkey";
/// boto3 costs about a millisecond of Python per GET: a subset keeps its pass short.
const BOTO3_FILES: u64 = 4000;

fn key_of(i: u64) -> String {
    format!("d{:03}/f{i:06}", i / 1000)
}

fn median(v: &[f64]) -> f64 {
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    s.get(s.len() / 2).copied().unwrap_or(0.0)
}

pub async fn run(args: PythonArgs) -> anyhow::Result<()> {
    if args.files == 0 || args.parallel == 0 || args.rounds == 0 {
        bail!("--files, --parallel and --rounds must be positive");
    }
    check_python(&args.python)?;
    std::fs::create_dir_all(&args.out_dir)?;
    let tmp = tempfile::Builder::new()
        .prefix("myriad-bench-python-")
        .tempdir()?;
    eprintln!(
        "bench python: {} files of {} B on {} nodes, {} in flight, {} rounds",
        args.files, args.file_size, args.nodes, args.parallel, args.rounds
    );
    let dir = tmp.path().join("cluster");
    let cluster = LocalCluster::up(&dir, args.nodes, &NodeOptions::for_bench(Vec::new())).await?;
    let result = passes(&args, &cluster, tmp.path()).await;
    cluster.down()?;
    let report = result?;
    println!(
        "{:<28} {:>12} {:>10}  target",
        "reader", "files/s", "x native"
    );
    println!(
        "{:<28} {:>12.0} {:>10.2}",
        "native fetch_many (Rust)", report.native_fetch_per_s, 1.0
    );
    println!(
        "{:<28} {:>12.0} {:>10.2}  >= 0.5",
        "Python fetch_many", report.python_fetch_per_s, report.python_over_native
    );
    println!(
        "{:<28} {:>12.0} {:>10.2}  >= 0.3",
        "S3 GET (HTTP client)", report.s3_get_per_s, report.s3_over_native
    );
    if let Some(b) = report.boto3_get_per_s {
        println!(
            "{:<28} {:>12.0} {:>10.2}  (reference)",
            "S3 GET (boto3, 32 threads)",
            b,
            b / report.native_fetch_per_s.max(1e-9)
        );
    }
    let json = args.out_dir.join("bench-python.json");
    std::fs::write(&json, serde_json::to_string_pretty(&report)?)?;
    println!("wrote {}", json.display());
    Ok(())
}

fn check_python(python: &Path) -> anyhow::Result<()> {
    let ok = Command::new(python)
        .args(["-c", "import myriad"])
        .stderr(Stdio::null())
        .status()
        .with_context(|| format!("cannot run {}", python.display()))?
        .success();
    if !ok {
        bail!(
            "{} cannot import the myriad package: bash scripts/build-wheel.sh && {} -m pip install target/wheels/myriad-*.whl",
            python.display(),
            python.display()
        );
    }
    Ok(())
}

async fn passes(args: &PythonArgs, cluster: &LocalCluster, tmp: &Path) -> anyhow::Result<Report> {
    let client =
        Arc::new(cluster.client_as(std::time::Duration::from_secs(120), bench_identity())?);
    let paths: Vec<String> = (0..args.files)
        .map(|i| format!("/{BUCKET}/{}", key_of(i)))
        .collect();
    for d in 0..args.files.div_ceil(1000) {
        client.mkdir_p(&format!("/{BUCKET}/d{d:03}"), 0o755).await?;
    }
    let size = usize::try_from(args.file_size)?;
    let items: Vec<(String, Vec<u8>)> = paths
        .iter()
        .enumerate()
        .map(|(i, p)| (p.clone(), file_content(i as u64, size)))
        .collect();
    for r in client.write_many(&items, 0o644, args.parallel).await {
        r?;
    }
    let expected: Arc<Vec<Vec<u8>>> = Arc::new(items.into_iter().map(|(_, d)| d).collect());
    let list = tmp.join("paths.txt");
    std::fs::write(&list, paths.join("\n"))?;
    let gateway = Gateway::start(cluster, tmp)?;
    // Warm every reader's path once (connections, caches) before timing.
    native_pass(&client, &paths, &expected, args.parallel).await?;
    let mut native_all = Vec::new();
    let mut python_all = Vec::new();
    let mut s3_all = Vec::new();
    let map = crate::cluster::map_path(&cluster.dir);
    let digest = digest_of(&expected);
    for round in 0..args.rounds {
        native_all.push(native_pass(&client, &paths, &expected, args.parallel).await?);
        python_all.push(python_pass(args, &map, &list, &digest)?);
        s3_all.push(s3_pass(&gateway, args, &expected).await?);
        eprintln!(
            "round {}: native {:.0}/s, python {:.0}/s, s3 {:.0}/s",
            round + 1,
            native_all[round],
            python_all[round],
            s3_all[round]
        );
    }
    let boto3 = boto3_pass(args, &gateway)?;
    let (native, python, s3) = (median(&native_all), median(&python_all), median(&s3_all));
    Ok(Report {
        nodes: args.nodes,
        files: args.files,
        file_size: args.file_size,
        parallel: args.parallel,
        rounds: args.rounds,
        native_fetch_per_s: native,
        python_fetch_per_s: python,
        s3_get_per_s: s3,
        boto3_get_per_s: boto3,
        boto3_files: BOTO3_FILES.min(args.files),
        python_over_native: python / native.max(1e-9),
        s3_over_native: s3 / native.max(1e-9),
        native_all,
        python_all,
        s3_all,
    })
}

async fn native_pass(
    client: &myriad_client::Client,
    paths: &[String],
    expected: &[Vec<u8>],
    parallel: usize,
) -> anyhow::Result<f64> {
    let t = Instant::now();
    let got = client.fetch_many(paths, parallel).await;
    let secs = t.elapsed().as_secs_f64();
    for ((p, r), want) in paths.iter().zip(got).zip(expected) {
        let (_, data) = r.map_err(|e| anyhow::anyhow!("{p}: {e}"))?;
        if data != *want {
            bail!("{p}: wrong contents read");
        }
    }
    Ok(paths.len() as f64 / secs)
}

/// The Python pass, timed inside the Python process (its start-up and import excluded).
const PYTHON_PASS: &str = r#"
import hashlib, sys, time, myriad
cluster, listing, parallel, size = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
paths = open(listing).read().split("\n")
c = myriad.Client(cluster)
c.fetch_many(paths[:256])
t = time.perf_counter()
got = c.fetch_many(paths, parallel=parallel)
dt = time.perf_counter() - t
assert len(got) == len(paths) and all(len(g) == size for g in got), "short read"
print(len(paths) / dt, hashlib.sha256(b"".join(got)).hexdigest())
"#;

/// Runs `script` in `python` with `args`; what it printed, or an error naming `what` with
/// what it printed on stderr.
fn run_python(
    python: &Path,
    what: &str,
    script: &str,
    args: &[&std::ffi::OsStr],
) -> anyhow::Result<String> {
    let out = Command::new(python)
        .arg("-c")
        .arg(script)
        .args(args)
        .output()?;
    if !out.status.success() {
        bail!("{what} failed: {}", String::from_utf8_lossy(&out.stderr));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// SHA-256 of every file's contents in order, as hex (what the Python pass prints).
fn digest_of(expected: &[Vec<u8>]) -> String {
    use sha2::Digest;
    let mut h = sha2::Sha256::new();
    for d in expected {
        h.update(d);
    }
    myriad_client::proto::auth::hex(&h.finalize())
}

fn python_pass(
    args: &PythonArgs,
    map: &Path,
    list: &Path,
    expected_digest: &str,
) -> anyhow::Result<f64> {
    let text = run_python(
        &args.python,
        "the Python pass",
        PYTHON_PASS,
        &[
            map.as_os_str(),
            list.as_os_str(),
            args.parallel.to_string().as_ref(),
            args.file_size.to_string().as_ref(),
        ],
    )?;
    let mut words = text.split_whitespace();
    let rate: f64 = words.next().context("no rate from Python")?.parse()?;
    let digest = words.next().context("no digest from Python")?;
    if digest != expected_digest {
        bail!("the Python pass read other contents than were written");
    }
    Ok(rate)
}

/// A running `myriad s3` process and the credentials it takes.
struct Gateway {
    child: std::process::Child,
    host: String,
    secret: String,
}

impl Drop for Gateway {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Gateway {
    fn start(cluster: &LocalCluster, tmp: &Path) -> anyhow::Result<Gateway> {
        use std::os::unix::fs::PermissionsExt;
        let secret = format!("{:032x}", rand::random::<u128>());
        let creds = tmp.join("s3-credentials");
        std::fs::write(&creds, format!("{ACCESS_KEY} {secret}\n"))?;
        std::fs::set_permissions(&creds, std::fs::Permissions::from_mode(0o600))?;
        let child = Command::new(std::env::current_exe()?)
            .arg("s3")
            .arg("--cluster")
            .arg(crate::cluster::map_path(&cluster.dir))
            .args(["--listen", "127.0.0.1:0", "--credentials"])
            .arg(&creds)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .context("cannot start the S3 gateway")?;
        // Owned by a Gateway from here on: stopped by its drop whatever happens next.
        let mut gateway = Gateway {
            child,
            host: String::new(),
            secret,
        };
        let stdout = gateway.child.stdout.take().context("no gateway stdout")?;
        let mut line = String::new();
        std::io::BufReader::new(stdout).read_line(&mut line)?;
        gateway.host = line
            .trim()
            .strip_prefix("s3: http://")
            .with_context(|| format!("the gateway printed {line:?}, not its address"))?
            .trim_end_matches('/')
            .to_string();
        Ok(gateway)
    }
}

async fn s3_pass(
    gateway: &Gateway,
    args: &PythonArgs,
    expected: &Arc<Vec<Vec<u8>>>,
) -> anyhow::Result<f64> {
    let connections = args.parallel;
    let t = Instant::now();
    let mut tasks = Vec::new();
    for k in 0..connections {
        let (host, secret, expected) = (
            gateway.host.clone(),
            gateway.secret.clone(),
            expected.clone(),
        );
        let files = args.files;
        tasks.push(tokio::spawn(async move {
            let tcp = tokio::net::TcpStream::connect(&host).await?;
            tcp.set_nodelay(true)?;
            let (mut send, conn) =
                hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(tcp)).await?;
            tokio::spawn(conn);
            let mut i = k as u64;
            while i < files {
                let path = format!("/{BUCKET}/{}", key_of(i));
                let now = std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)?
                    .as_secs();
                let date = crate::sigv4::amz_date(now);
                let mut req = hyper::Request::get(&path);
                for (name, value) in
                    crate::sigv4::signed_get(&host, &path, ACCESS_KEY, &secret, &date)
                {
                    req = req.header(name, value);
                }
                let resp = send.send_request(req.body(Empty::<Bytes>::new())?).await?;
                let status = resp.status();
                let body = resp.into_body().collect().await?.to_bytes();
                let want = usize::try_from(i).ok().and_then(|i| expected.get(i));
                if !status.is_success() || Some(&body[..]) != want.map(Vec::as_slice) {
                    anyhow::bail!("GET {path}: {status}, {} bytes, not the file", body.len());
                }
                i += connections as u64;
            }
            Ok::<(), anyhow::Error>(())
        }));
    }
    for t in tasks {
        t.await??;
    }
    Ok(args.files as f64 / t.elapsed().as_secs_f64())
}

const BOTO3_PASS: &str = r#"
import sys, time
from concurrent.futures import ThreadPoolExecutor
try:
    import boto3, botocore.config
except ImportError:
    print("none"); sys.exit(0)
host, key, secret, n, size = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5])
s3 = boto3.client("s3", endpoint_url="http://" + host, aws_access_key_id=key,
                  aws_secret_access_key=secret, region_name="us-east-1",
                  config=botocore.config.Config(s3={"addressing_style": "path"},
                                                max_pool_connections=32))
keys = ["d%03d/f%06d" % (i // 1000, i) for i in range(n)]
get = lambda k: s3.get_object(Bucket="bench", Key=k)["Body"].read()
list(ThreadPoolExecutor(32).map(get, keys[:64]))
t = time.perf_counter()
got = list(ThreadPoolExecutor(32).map(get, keys))
dt = time.perf_counter() - t
assert all(len(g) == size for g in got)
print(n / dt)
"#;

fn boto3_pass(args: &PythonArgs, gateway: &Gateway) -> anyhow::Result<Option<f64>> {
    let text = run_python(
        &args.python,
        "the boto3 pass",
        BOTO3_PASS,
        &[
            gateway.host.as_ref(),
            ACCESS_KEY.as_ref(),
            gateway.secret.as_ref(),
            BOTO3_FILES.min(args.files).to_string().as_ref(),
            args.file_size.to_string().as_ref(),
        ],
    )?;
    match text.trim() {
        "none" => Ok(None),
        t => Ok(Some(t.parse()?)),
    }
}
