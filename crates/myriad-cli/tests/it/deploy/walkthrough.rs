//! docs/deploy.md run as written (issue 48: "every command in it runs in a test"): its
//! shell blocks, in order, each on the host its `# on 10.0.0.N` line names (else the
//! client host, 10.0.0.9), changed only where a test must: the hosts' addresses
//! (10.0.0.N is this harness's 10.X.0.N) and `/var/lib/myriad`, `/etc/myriad` and
//! `/mnt/myriad` under each host's own directory. What the text asks a person to do
//! between blocks (copy a key, join another host "as in step 2", lose a host) the test
//! does, and after each block it checks what the text promises. Lines not run: those
//! that need a service manager (`systemctl restart`: the test stops the server with
//! SIGTERM and starts step 1's command again, as the unit does) or would change this
//! machine outside the test (`ln -s ... /sbin/mount.myriad`: the harness installs that
//! link itself). A block added to the text fails this test until it is run here.

use std::net::TcpStream;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use myriad_client::{Caller, Client, ClientConfig, ClusterMap};

use super::{PORT, first_map, until_settled, wait_back};
use crate::harness::BIN;
use crate::hosts::Hosts;
use crate::mount::umount;

/// A fenced block of the text: the heading above it, its language and its lines with
/// `\` continuations joined.
struct Block {
    heading: String,
    lang: String,
    lines: Vec<String>,
}

fn blocks(md: &str) -> Vec<Block> {
    let (mut out, mut heading, mut open): (Vec<Block>, String, Option<Block>) =
        (Vec::new(), String::new(), None);
    for line in md.lines() {
        if let Some(b) = open.as_mut() {
            if line.starts_with("```") {
                out.extend(open.take());
            } else if let Some(prev) = b.lines.last_mut().filter(|p| p.ends_with('\\')) {
                prev.pop();
                prev.push_str(line.trim_start());
            } else {
                b.lines.push(line.to_string());
            }
        } else if let Some(lang) = line.strip_prefix("```") {
            open = Some(Block {
                heading: heading.clone(),
                lang: lang.trim().to_string(),
                lines: Vec::new(),
            });
        } else if line.starts_with('#') {
            heading = line.trim_start_matches('#').trim().to_string();
        }
    }
    out
}

/// The hosts a block's `# on 10.0.0.N (and likewise on 10.0.0.M)` line names.
fn named_hosts(b: &Block) -> Vec<u32> {
    let Some(on) = b.lines.iter().find(|l| l.starts_with("# on ")) else {
        return Vec::new();
    };
    on.split("10.0.0.")
        .skip(1)
        .filter_map(|rest| {
            rest.chars()
                .take_while(char::is_ascii_digit)
                .collect::<String>()
                .parse()
                .ok()
        })
        .collect()
}

/// Lines that start a process that runs until stopped: started in the background.
fn runs_until_stopped(cmd: &str) -> bool {
    let words: Vec<&str> = cmd.split_whitespace().collect();
    words.first() == Some(&"myriad") && (words.contains(&"server") || words.contains(&"s3"))
}

/// Lines this test does by other means (see the module's text).
fn not_run(cmd: &str) -> bool {
    cmd.starts_with("systemctl ") || cmd.starts_with("ln -s ")
}

struct Walk {
    h: Hosts,
    /// A directory holding `myriad` (the binary under test), first on every PATH.
    bin: PathBuf,
}

impl Walk {
    /// `text` as host `k` runs it: this harness's addresses and host `k`'s directories.
    fn local(&self, k: u32, text: &str) -> String {
        let home = self.h.home(k);
        let first = self.h.ip(1);
        let prefix = first.strip_suffix('1').unwrap_or(&first);
        let mut s = text.replace("10.0.0.", prefix);
        for dir in ["/var/lib/myriad", "/etc/myriad", "/mnt/myriad"] {
            s = s.replace(dir, &format!("{}{dir}", home.display()));
        }
        s
    }

    /// Runs `lines` on host `k` as one `sh -e` script in the host's directory; its output.
    fn script(&self, k: u32, lines: &[String]) -> String {
        let text = self.local(k, &lines.join("\n"));
        eprintln!("---- on host {k}:\n{text}");
        let path = std::env::var("PATH").unwrap_or_default();
        let out = self
            .h
            .command(k, "sh")
            .arg("-ec")
            .arg(&text)
            .current_dir(self.h.home(k))
            .env("PATH", format!("{}:{path}", self.bin.display()))
            .env_remove("MYRIAD_CLUSTER")
            .env_remove("MYRIAD_SECRET_FILE")
            .output()
            .unwrap_or_else(|e| panic!("{e}"));
        let (o, e) = (
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr),
        );
        assert!(
            out.status.success(),
            "docs/deploy.md on host {k} failed ({}):\n{text}\nstdout:\n{o}\nstderr:\n{e}",
            out.status
        );
        eprintln!("{o}{e}");
        o.into_owned()
    }

    /// Runs a block on host `k`, replacing `from` (one host's address in the text) by
    /// `to` ("likewise on"): processes that run until stopped in the background, the
    /// other lines as scripts in between; returns what the scripts printed.
    fn run(&mut self, b: &Block, k: u32, likewise: Option<(&str, &str)>) -> String {
        let mut printed = String::new();
        let mut pending = Vec::new();
        for line in &b.lines {
            let line = match likewise {
                Some((from, to)) => line.replace(from, to),
                None => line.clone(),
            };
            let cmd = line.trim();
            if not_run(cmd) {
                eprintln!("---- not run here (see the test's text): {cmd}");
            } else if runs_until_stopped(cmd) {
                printed += &self.script(k, &std::mem::take(&mut pending));
                self.start(k, cmd);
            } else {
                pending.push(line);
            }
        }
        if pending
            .iter()
            .any(|l| !l.trim().is_empty() && !l.starts_with('#'))
        {
            printed += &self.script(k, &pending);
        }
        printed
    }

    /// Starts `cmd` on host `k` in the background, its output in `server.log` (a server)
    /// or `NAME.log` (anything else).
    fn start(&mut self, k: u32, cmd: &str) {
        let cmd = self.local(k, cmd);
        eprintln!("---- on host {k}, in the background: {cmd}");
        let log = if cmd.contains(" server ") {
            if self.h.home(k).join("server.log").exists() {
                "server-restarted.log"
            } else {
                "server.log"
            }
        } else {
            "s3.log"
        };
        let home = self.h.home(k);
        let sh = format!(
            "cd {} && PATH={}:$PATH exec {cmd}",
            home.display(),
            self.bin.display()
        );
        self.h.spawn_program(k, log, "sh", &["-c", &sh]);
    }

    fn addr(&self, k: u32) -> String {
        format!("{}:{PORT}", self.h.ip(k))
    }
}

fn wait_for(what: &str, within: Duration, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + within;
    while !done() {
        assert!(Instant::now() < deadline, "{what}: not within {within:?}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The node id the map gives the server at `addr`.
fn id_of(m: &ClusterMap, addr: &str) -> Option<u32> {
    m.nodes.iter().find(|n| n.addr == addr).map(|n| n.id.0)
}

#[test]
fn docs_deploy_md_runs_as_written() {
    super::client_log();
    let md = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/deploy.md"))
        .unwrap_or_else(|e| panic!("{e}"));
    let all = blocks(&md);
    let sh: Vec<&Block> = all.iter().filter(|b| b.lang == "sh").collect();
    let headings: Vec<&str> = sh.iter().map(|b| b.heading.as_str()).collect();
    // The blocks this test knows, in order; a new one must be added below.
    assert_eq!(
        headings,
        [
            "1. The first host makes the cluster",
            "2. The others join it",
            "3. Clients need an address and the client key",
            "3. Clients need an address and the client key",
            "Administering the servers from any host",
            "Administering the servers from any host",
            "Restarting a server (planned), and a rolling restart",
            "Mounting at boot (`mount -t myriad`, fstab)",
        ],
        "docs/deploy.md's shell blocks changed: run the new ones in this test"
    );
    let Some(h) = Hosts::for_root(9) else {
        return;
    };
    let bin = h.dir.path().join("bin");
    std::fs::create_dir_all(&bin).unwrap_or_else(|e| panic!("{e}"));
    std::os::unix::fs::symlink(BIN, bin.join("myriad")).unwrap_or_else(|e| panic!("{e}"));
    let mut w = Walk { h, bin };
    let client_host = 9;

    // 1. The first host makes the cluster.
    assert_eq!(named_hosts(sh[0]), [1]);
    w.run(sh[0], 1, None);
    let data1 = w.h.home(1).join("var/lib/myriad");
    let (secret, client_key) = (data1.join("cluster.secret"), data1.join("client.key"));
    wait_for("--init writes the keys", Duration::from_secs(30), || {
        secret.exists() && client_key.exists() && data1.join("node.id").exists()
    });
    for f in ["cluster.secret", "client.key"] {
        let mode = std::fs::metadata(data1.join(f))
            .map(|m| std::os::unix::fs::PermissionsExt::mode(&m.permissions()) & 0o777)
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(mode, 0o600, "{f} is owner-only");
    }
    let keys = myriad_client::setup::load_keys(&client_key).unwrap_or_else(|e| panic!("{e}"));
    let rt = tokio::runtime::Runtime::new().unwrap_or_else(|e| panic!("{e}"));
    let mut cfg = ClientConfig::new(first_map(&w.h, &w.addr(1), &keys), Caller::root(), keys);
    cfg.request_timeout = Duration::from_secs(30);
    let client = Client::new(cfg).unwrap_or_else(|e| panic!("{e}"));

    // 2. The others join it: the secret copied to each, then the block on 10.0.0.2 and
    // likewise on 10.0.0.3 (one after the other, so that ids follow the hosts' order,
    // as `node drain 4` below expects of the fourth).
    let (join_block, joiners) = (sh[1], named_hosts(sh[1]));
    assert_eq!(joiners, [2, 3]);
    let join = |w: &mut Walk, k: u32| {
        w.h.give_key_at(&secret, k, "/etc/myriad/cluster.secret");
        w.run(join_block, k, Some(("10.0.0.2", &format!("10.0.0.{k}"))));
        let me = w.addr(k);
        let mut id = None;
        wait_for(
            &format!("host {k} in the map"),
            Duration::from_secs(60),
            || {
                id = id_of(&rt.block_on(client.newest_map()), &me);
                id.is_some()
            },
        );
        id.unwrap_or_default()
    };
    let started = Instant::now();
    for k in joiners {
        assert_eq!(join(&mut w, k), k, "ids follow the order of joins");
    }
    until_settled(&w.h, &rt, &client, 3, Duration::from_secs(120));
    eprintln!(
        "two joins, 3 copies: {:.1} s",
        started.elapsed().as_secs_f64()
    );

    // 3. Clients: the client key on the client host, a file to put, then the block.
    w.h.give_key_at(&client_key, client_host, "/etc/myriad/client.key");
    let run_file = b"a run's results\n".repeat(1000);
    std::fs::write(w.h.home(client_host).join("run"), &run_file).unwrap_or_else(|e| panic!("{e}"));
    w.run(sh[2], client_host, None);
    let mnt = w.h.home(client_host).join("mnt/myriad");
    assert_eq!(
        std::fs::read(mnt.join("data/run")).unwrap_or_else(|e| panic!("{e}")),
        run_file,
        "put, then read through the mount"
    );
    umount(&mnt);
    // The gateway's credentials, then the gateway and `top`.
    let top = w.run(sh[3], client_host, None);
    let creds = w.h.home(client_host).join("etc/myriad/s3.credentials");
    let text = std::fs::read_to_string(&creds).unwrap_or_else(|e| panic!("{e}"));
    assert!(
        text.starts_with("backup ") && text.trim_end().ends_with(" 1000:1000"),
        "{text}"
    );
    assert!(
        top.contains(&w.addr(1)) && top.contains(&w.addr(3)),
        "top:\n{top}"
    );
    let gateway = format!("{}:9000", w.h.ip(client_host));
    wait_for("the S3 gateway listens", Duration::from_secs(30), || {
        TcpStream::connect(&gateway).is_ok()
    });

    // Administering: a fourth host joins as in step 2; `node list`; `node drain 4`.
    assert_eq!(join(&mut w, 4), 4, "the fourth host is server 4");
    until_settled(&w.h, &rt, &client, 4, Duration::from_secs(120));
    w.h.give_key_at(&secret, client_host, "/cluster.secret");
    w.h.give_key_at(&client_key, client_host, "/client.key");
    let t = Instant::now();
    let listed = w.run(sh[4], client_host, None);
    for k in 1..=4 {
        assert!(listed.contains(&w.addr(k)), "node list:\n{listed}");
    }
    let drain_secs = t.elapsed().as_secs_f64();
    let m = rt.block_on(client.newest_map());
    assert_eq!(id_of(&m, &w.addr(4)), None, "drained server 4 left the map");
    until_settled(&w.h, &rt, &client, 3, Duration::from_secs(120));

    // Replacing a dead host: 10.0.0.3 is lost; 10.0.0.5 joins as in step 2; `node remove 3`.
    w.h.kill_host(3);
    // The drained server 4 is still running (the text says "then it can be stopped"): the
    // new server is given its id (ids are reused), and server 4 takes no map that says
    // so (`Host::adopt_map`), nor does the Raft group keep it (`next_member_change`).
    assert_eq!(join(&mut w, 5), 4, "the id of the server that left");
    let t = Instant::now();
    w.run(sh[5], client_host, None);
    let remove_secs = t.elapsed().as_secs_f64();
    until_settled(&w.h, &rt, &client, 3, Duration::from_secs(180));
    let m = rt.block_on(client.newest_map());
    assert_eq!(id_of(&m, &w.addr(3)), None, "server 3 removed");
    let (_, data) = rt
        .block_on(client.fetch("/data/run"))
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(data, run_file, "nothing lost with the dead host");

    // A planned restart: what `systemctl restart` does (SIGTERM, step 1's command again,
    // `--init` and all), then the block's `node list`, then wait for it to be back.
    let t = Instant::now();
    w.h.stop_host(1);
    w.run(sh[0], 1, None);
    let listed = w.run(sh[6], client_host, None);
    assert!(listed.contains(&w.addr(1)), "node list:\n{listed}");
    wait_back(&w.h, &rt, &client, 1, &w.addr(1));
    let restart_secs = t.elapsed().as_secs_f64();

    // Mounting at boot: mount -t myriad and umount, then the fstab line.
    let Some(_helper) = crate::mount::mount_helper() else {
        panic!("/sbin/mount.myriad belongs to another program: cannot run the text");
    };
    let boot = sh[7];
    let at = boot
        .lines
        .iter()
        .position(|l| l.starts_with("umount"))
        .unwrap_or_else(|| panic!("no umount line"));
    w.run(
        &Block {
            heading: boot.heading.clone(),
            lang: "sh".into(),
            lines: boot.lines[..at].to_vec(),
        },
        client_host,
        None,
    );
    assert_eq!(
        std::fs::read(mnt.join("data/run")).unwrap_or_else(|e| panic!("{e}")),
        run_file
    );
    w.run(
        &Block {
            heading: boot.heading.clone(),
            lang: "sh".into(),
            lines: boot.lines[at..].to_vec(),
        },
        client_host,
        None,
    );
    assert!(!crate::mount::is_mounted(&mnt), "umount unmounted");
    let fstab = all
        .iter()
        .find(|b| b.lang == "text" && b.heading == boot.heading)
        .unwrap_or_else(|| panic!("no fstab line"));
    let fstab_file = w.h.home(client_host).join("fstab");
    std::fs::write(
        &fstab_file,
        w.local(client_host, &fstab.lines.join("\n")) + "\n",
    )
    .unwrap_or_else(|e| panic!("{e}"));
    w.script(
        client_host,
        &[format!("mount -T {} /mnt/myriad", fstab_file.display())],
    );
    assert_eq!(
        std::fs::read(mnt.join("data/run")).unwrap_or_else(|e| panic!("{e}")),
        run_file,
        "mounted from the fstab line"
    );
    umount(&mnt);
    eprintln!(
        "docs/deploy.md as written: drain {drain_secs:.1} s, remove of a dead server \
         {remove_secs:.1} s, planned restart until back {restart_secs:.1} s"
    );
}
