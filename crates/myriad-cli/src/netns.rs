//! Two zones on one machine (`bench zones`): a network namespace per zone, each with one
//! address its servers and clients share. The zones reach each other over a delay line:
//! a TUN device in each namespace, host routes to the other zone's address through it, and
//! two threads of this process that pass each packet to the other side `delay` after it
//! was sent (a userspace netem: the kernels we run on have no `sch_netem`). Traffic inside
//! a zone (its own address, over its loopback) takes no delay. A bridge in this process's
//! namespace reaches both zones directly, undelayed: the coordinator's control traffic.

use std::process::Command;

use anyhow::{Context, bail};

/// The namespaces, links and addresses of a two-zone set-up; removed when dropped.
pub struct TwoZones {
    tag: String,
    net: u32,
}

fn run(cmd: &mut Command) -> anyhow::Result<()> {
    let out = cmd
        .output()
        .with_context(|| format!("cannot run {:?}", cmd.get_program()))?;
    if !out.status.success() {
        bail!(
            "{:?} {:?}: {}",
            cmd.get_program(),
            cmd.get_args().collect::<Vec<_>>(),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(())
}

fn ip(args: &[&str]) -> anyhow::Result<()> {
    run(Command::new("ip").args(args))
}

/// The zones' names, in order: zone i lives in namespace `ns(i)` at `addr(i)`.
pub const ZONES: [&str; 2] = ["a", "b"];

impl TwoZones {
    /// Creates the namespaces and links, with `delay_ms` each way between the zones. Needs
    /// root (CAP_NET_ADMIN), iproute2, nsenter and TUN.
    pub fn new(delay_ms: u64) -> anyhow::Result<TwoZones> {
        // SAFETY: geteuid cannot fail.
        if unsafe { libc::geteuid() } != 0 {
            bail!("bench zones makes network namespaces with delays between them: run it as root");
        }
        let id = std::process::id() % 10_000;
        let z = TwoZones {
            tag: format!("mz{id}"),
            net: 150 + id % 100,
        };
        // Leftovers of an earlier run with this pid would make `add` fail: gone first.
        z.remove();
        z.build(delay_ms).context("setting up the zones' network")?;
        Ok(z)
    }

    fn build(&self, delay_ms: u64) -> anyhow::Result<()> {
        let bridge = self.name("br");
        ip(&["link", "add", &bridge, "type", "bridge"])?;
        ip(&["link", "set", &bridge, "up"])?;
        ip(&[
            "addr",
            "add",
            &format!("{}/24", self.host(254)),
            "dev",
            &bridge,
        ])?;
        for i in 0..ZONES.len() {
            let ns = self.ns(i);
            let (outside, inside) = (self.name(&format!("v{i}")), self.name(&format!("p{i}")));
            ip(&["netns", "add", &ns])?;
            ip(&[
                "link", "add", &outside, "type", "veth", "peer", "name", &inside,
            ])?;
            ip(&["link", "set", &inside, "netns", &ns])?;
            ip(&["link", "set", &outside, "master", &bridge, "up"])?;
            let addr = format!("{}/24", self.addr(i));
            ip(&["-n", &ns, "addr", "add", &addr, "dev", &inside])?;
            ip(&["-n", &ns, "link", "set", &inside, "up"])?;
            ip(&["-n", &ns, "link", "set", "lo", "up"])?;
        }
        // The delay line between the zones.
        let mut ends = Vec::new();
        for i in 0..ZONES.len() {
            let tun = self.name(&format!("t{i}"));
            ends.push(open_tun(&tun)?);
            ip(&["link", "set", &tun, "netns", &self.ns(i)])?;
            ip(&["-n", &self.ns(i), "link", "set", &tun, "up"])?;
            let other = self.addr(1 - i);
            ip(&[
                "-n",
                &self.ns(i),
                "route",
                "add",
                &format!("{other}/32"),
                "dev",
                &tun,
                "src",
                &self.addr(i),
            ])?;
        }
        let delay = std::time::Duration::from_millis(delay_ms);
        let (b, a) = (ends.pop(), ends.pop());
        if let (Some(a), Some(b)) = (a, b) {
            let (a, b) = (std::sync::Arc::new(a), std::sync::Arc::new(b));
            delay_line(a.clone(), b.clone(), delay);
            delay_line(b, a, delay);
        }
        Ok(())
    }

    fn name(&self, what: &str) -> String {
        format!("{}{what}", self.tag)
    }

    fn host(&self, k: u32) -> String {
        format!("10.{}.0.{k}", self.net)
    }

    /// The network namespace of zone `i`.
    #[must_use]
    pub fn ns(&self, i: usize) -> String {
        self.name(&format!("z{}", ZONES[i]))
    }

    /// The address of zone `i` (its servers listen on ports of it).
    #[must_use]
    pub fn addr(&self, i: usize) -> String {
        self.host(u32::try_from(i).unwrap_or(0) + 1)
    }

    /// `program` to run in zone `i`'s namespace (nsenter execs it: its pid is the child's).
    #[must_use]
    pub fn enter(&self, i: usize, program: impl AsRef<std::ffi::OsStr>) -> Command {
        let mut c = Command::new("nsenter");
        c.arg(format!("--net=/run/netns/{}", self.ns(i)))
            .arg("--")
            .arg(program);
        c
    }

    fn remove(&self) {
        for i in 0..ZONES.len() {
            let _ = ip(&["netns", "del", &self.ns(i)]);
            let _ = ip(&["link", "del", &self.name(&format!("v{i}"))]);
            let _ = ip(&["link", "del", &self.name(&format!("t{i}"))]);
        }
        let _ = ip(&["link", "del", &self.name("br")]);
    }
}

/// Creates TUN device `name` (layer 3, no packet information) in this namespace.
fn open_tun(name: &str) -> anyhow::Result<std::fs::File> {
    use std::os::fd::AsRawFd;
    #[repr(C)]
    struct IfReq {
        name: [u8; 16],
        flags: libc::c_short,
        pad: [u8; 22],
    }
    const TUNSETIFF: libc::c_ulong = 0x4004_54ca;
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/net/tun")
        .context("cannot open /dev/net/tun (the delay line between the zones needs TUN)")?;
    let mut req = IfReq {
        name: [0; 16],
        flags: (libc::IFF_TUN | libc::IFF_NO_PI) as libc::c_short,
        pad: [0; 22],
    };
    if name.len() >= req.name.len() {
        bail!("interface name {name} is too long");
    }
    req.name[..name.len()].copy_from_slice(name.as_bytes());
    // SAFETY: TUNSETIFF reads and writes one ifreq, which `req` is laid out as.
    let rc = unsafe { libc::ioctl(file.as_raw_fd(), TUNSETIFF, &mut req) };
    if rc < 0 {
        bail!(
            "cannot create TUN device {name}: {}",
            std::io::Error::last_os_error()
        );
    }
    Ok(file)
}

/// Packets read from `from` are written to `to` `delay` after they were read, in order.
/// The threads end when a device goes (its namespace is deleted).
fn delay_line(
    from: std::sync::Arc<std::fs::File>,
    to: std::sync::Arc<std::fs::File>,
    delay: std::time::Duration,
) {
    use std::io::{Read, Write};
    let (tx, rx) = std::sync::mpsc::channel::<(std::time::Instant, Vec<u8>)>();
    std::thread::spawn(move || {
        let mut buf = vec![0u8; 65536];
        while let Ok(n) = (&*from).read(&mut buf) {
            if tx
                .send((std::time::Instant::now() + delay, buf[..n].to_vec()))
                .is_err()
            {
                break;
            }
        }
    });
    std::thread::spawn(move || {
        for (due, packet) in rx {
            let now = std::time::Instant::now();
            if due > now {
                std::thread::sleep(due - now);
            }
            // A packet the other side cannot take now is lost, as on a wire: TCP resends.
            let _ = (&*to).write(&packet);
        }
    });
}

impl Drop for TwoZones {
    fn drop(&mut self) {
        self.remove();
    }
}
