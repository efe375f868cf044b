//! `mount.myriad`: the helper mount(8) runs for `mount -t myriad SPEC DIR -o OPTIONS` and
//! for /etc/fstab lines such as
//!
//! ```text
//! 10.0.0.1:7401,10.0.0.2:7401  /mnt/myriad  myriad  _netdev,secret_file=/etc/myriad/client.key,allow_other  0  0
//! ```
//!
//! Installed as a link to the `myriad` binary (`ln -s /usr/local/bin/myriad
//! /sbin/mount.myriad`); invoked under that name, it turns mount(8)'s arguments into a
//! `myriad mount --daemon` command line (docs/deploy.md "Mounting at boot"). Options it
//! does not know are refused with their name (unless mount(8) passes -s), never ignored:
//! an option silently dropped (`ro`, `noexec`) is a promise broken.

use std::ffi::OsString;

use anyhow::bail;

/// The name mount(8) runs for file system type `myriad`.
pub const NAME: &str = "mount.myriad";

/// Whether this process was started as `mount.myriad`.
#[must_use]
pub fn invoked_as_helper() -> bool {
    std::env::args_os()
        .next()
        .and_then(|a| {
            std::path::Path::new(&a)
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
        })
        .is_some_and(|n| n == NAME)
}

/// What mount(8) asked for.
#[derive(Debug, PartialEq, Eq)]
pub enum Plan {
    /// The `myriad` command line that mounts (`myriad ... mount DIR --daemon ...`).
    Mount(Vec<OsString>),
    /// `-f`: do everything but mount.
    Fake,
}

/// Options mount(8), systemd and fstab conventions pass that need nothing from Myriad:
/// when to mount (`auto`, `_netdev`, `nofail`...), who may (`user`...), and the defaults a
/// Myriad mount has anyway (`rw`, `suid`, `dev`, `exec`, `async`; atime is never written).
const NOTHING_TO_DO: &[&str] = &[
    "defaults",
    "auto",
    "noauto",
    "_netdev",
    "nofail",
    "user",
    "nouser",
    "users",
    "owner",
    "group",
    "rw",
    "suid",
    "dev",
    "exec",
    "async",
    "noatime",
    "relatime",
    "nodiratime",
    "lazytime",
    "nolazytime",
    "silent",
    "loud",
];

/// Flags of `myriad mount` an option switches on.
const FLAGS: &[(&str, &str)] = &[
    ("ro", "--read-only"),
    ("nosuid", "--nosuid"),
    ("nodev", "--nodev"),
    ("noexec", "--noexec"),
    ("sync", "--sync-close"),
    ("allow_other", "--allow-other"),
    ("writeback_cache", "--writeback-cache"),
    ("no_xattr", "--no-xattr"),
    ("sync_close", "--sync-close"),
    ("no_leases", "--no-leases"),
    ("no_write_behind", "--no-write-behind"),
    ("no_index", "--no-index"),
    ("fuse_ring", "--fuse-ring"),
    ("no_fuse_ring", "--no-fuse-ring"),
];

/// Options of `myriad mount` given a value (`name=value`).
const VALUES: &[(&str, &str)] = &[
    ("entry_ttl_ms", "--entry-ttl-ms"),
    ("attr_ttl_ms", "--attr-ttl-ms"),
    ("negative_ttl_ms", "--negative-ttl-ms"),
    ("fuse_threads", "--fuse-threads"),
    ("fuse_ring_depth", "--fuse-ring-depth"),
    ("metrics", "--metrics"),
    ("log", "--log"),
    ("index_cache_dir", "--index-cache-dir"),
    ("auto_index_every", "--auto-index-every"),
];

/// Options of the `myriad` command itself (before `mount`).
const GLOBAL_VALUES: &[(&str, &str)] = &[
    ("secret_file", "--secret-file"),
    ("keyfile", "--secret-file"),
    ("timeout_ms", "--timeout-ms"),
    ("zone", "--zone"),
];

/// The plan for mount(8)'s arguments (without the program name): `SPEC DIR [-sfnv]
/// [-N NS] [-o OPTIONS] [-t TYPE]`. `exe`: the `myriad` binary.
pub fn plan(exe: OsString, args: &[String]) -> anyhow::Result<Plan> {
    let mut positional = Vec::new();
    let mut options: Vec<String> = Vec::new();
    let (mut sloppy, mut fake) = (false, false);
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "-o" => match it.next() {
                Some(o) => options.extend(o.split(',').filter(|s| !s.is_empty()).map(String::from)),
                None => bail!("-o needs a list of options"),
            },
            // mount(8)'s -t TYPE and -N NAMESPACE carry values this helper does not need.
            "-t" | "-N" => {
                it.next();
            }
            flags if flags.starts_with('-') && flags.len() > 1 => {
                for c in flags[1..].chars() {
                    match c {
                        's' => sloppy = true,
                        'f' => fake = true,
                        // -n (no mtab) and -v (verbose) change nothing here.
                        'n' | 'v' => {}
                        other => bail!("{NAME}: unknown flag -{other}"),
                    }
                }
            }
            _ => positional.push(a.clone()),
        }
    }
    let [spec, dir] = positional.as_slice() else {
        bail!(
            "usage: {NAME} SERVER:PORT[,SERVER:PORT...][:/SUBDIR] DIR [-o OPTIONS] (got \
             {positional:?})"
        );
    };
    let (seeds, sub) = source_of(spec)?;
    let mut global: Vec<OsString> = vec![exe, "--cluster".into(), seeds.clone().into()];
    let mut mount: Vec<OsString> = vec![
        "mount".into(),
        dir.into(),
        "--daemon".into(),
        "--source".into(),
        // What `mount` lists: the addresses, and the directory when it is not the root.
        if sub == "/" {
            seeds.clone().into()
        } else {
            format!("{seeds}:{sub}").into()
        },
    ];
    if sub != "/" {
        mount.extend(["--subdir".into(), sub.into()]);
    }
    let mut unknown = Vec::new();
    for o in &options {
        let (name, value) = match o.split_once('=') {
            Some((n, v)) => (n, Some(v)),
            None => (o.as_str(), None),
        };
        let lookup = |table: &[(&str, &'static str)]| {
            table.iter().find(|(n, _)| *n == name).map(|(_, f)| *f)
        };
        match value {
            None if NOTHING_TO_DO.contains(&name) || name.starts_with("x-") => {}
            None if lookup(FLAGS).is_some() => {
                mount.extend(lookup(FLAGS).map(OsString::from));
            }
            Some(_) if name == "comment" || name.starts_with("x-") => {}
            Some(v) if lookup(GLOBAL_VALUES).is_some() => {
                global.extend(lookup(GLOBAL_VALUES).map(OsString::from));
                global.push(v.into());
            }
            Some(v) if lookup(VALUES).is_some() => {
                mount.extend(lookup(VALUES).map(OsString::from));
                mount.push(v.into());
            }
            _ => unknown.push(o.clone()),
        }
    }
    if !unknown.is_empty() && !sloppy {
        bail!(
            "{NAME}: unknown mount options: {} (options: ro, nosuid, nodev, noexec, sync, \
             allow_other, secret_file=FILE, timeout_ms=N, zone=Z, and the flags of `myriad \
             mount` with _ for -, e.g. no_xattr, entry_ttl_ms=N)",
            unknown.join(",")
        );
    }
    if fake {
        return Ok(Plan::Fake);
    }
    global.extend(mount);
    Ok(Plan::Mount(global))
}

/// The cluster's addresses and the directory to mount in a mount source
/// `h1:7401,h2:7401[:/SUBDIR]` (or a cluster map file).
fn source_of(spec: &str) -> anyhow::Result<(String, String)> {
    let (seeds, sub) = match spec.find(":/") {
        Some(i) => (&spec[..i], &spec[i + 1..]),
        None => (spec, "/"),
    };
    if seeds.is_empty() {
        bail!("{NAME}: no server address in {spec:?} (SERVER:PORT[,SERVER:PORT...])");
    }
    Ok((seeds.to_string(), sub.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(s: &str) -> Vec<String> {
        s.split_whitespace().map(String::from).collect()
    }

    fn line(p: Plan) -> String {
        match p {
            Plan::Mount(v) => v
                .iter()
                .map(|a| a.to_string_lossy().into_owned())
                .collect::<Vec<_>>()
                .join(" "),
            Plan::Fake => "fake".into(),
        }
    }

    #[test]
    fn an_fstab_line_becomes_a_daemon_mount_with_its_flags() {
        let p = plan(
            "myriad".into(),
            &args(
                "10.0.0.1:7401,10.0.0.2:7401 /mnt/m -o rw,_netdev,nofail,secret_file=/etc/k,\
                 allow_other,ro,noexec,x-systemd.automount,entry_ttl_ms=500,timeout_ms=9000",
            ),
        )
        .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            line(p),
            "myriad --cluster 10.0.0.1:7401,10.0.0.2:7401 --secret-file /etc/k --timeout-ms \
             9000 mount /mnt/m --daemon --source 10.0.0.1:7401,10.0.0.2:7401 --allow-other \
             --read-only --noexec --entry-ttl-ms 500"
        );
    }

    #[test]
    fn a_root_source_ipv6_and_mount_flags_are_understood() {
        let p = plan("m".into(), &args("[fd00::1]:7401:/ /mnt -n -v -t myriad"))
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            line(p),
            "m --cluster [fd00::1]:7401 mount /mnt --daemon --source [fd00::1]:7401"
        );
        assert_eq!(
            plan("m".into(), &args("h:1 /mnt -f -o ro")).ok(),
            Some(Plan::Fake)
        );
    }

    #[test]
    fn a_subdirectory_source_mounts_that_directory() {
        let p = plan("m".into(), &args("h1:1,h2:1:/data/x /mnt")).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            line(p),
            "m --cluster h1:1,h2:1 mount /mnt --daemon --source h1:1,h2:1:/data/x --subdir /data/x"
        );
    }

    #[test]
    fn unknown_options_and_bad_sources_are_refused_with_their_names() {
        let e = plan("m".into(), &args("h:1 /mnt -o rw,bogus,mand"))
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(e.contains("bogus,mand"), "{e}");
        // -s (sloppy): unknown options are passed over.
        assert!(plan("m".into(), &args("h:1 /mnt -s -o bogus")).is_ok());
        assert!(plan("m".into(), &args("/mnt")).is_err());
        assert!(plan("m".into(), &args(":/ /mnt")).is_err());
    }
}
