//! One run: drawing steps, running each as its user on both trees, comparing, reporting.

use super::*;

pub(super) struct Run<'a> {
    pub(super) cfg: &'a NsxConfig,
    /// O_PATH descriptors of the roots of A and B.
    pub(super) dirs: [RawFd; 2],
    pub(super) rng: Rng,
    /// Every name either tree held after the last step, with its state on A and B.
    pub(super) seen: BTreeMap<String, [Obs; 2]>,
    /// Whether `seen` is every name of both trees (a walk followed the last step).
    pub(super) complete: bool,
    pub(super) log: Vec<String>,
    pub(super) step: u64,
    /// Allowed differences by "operation:field".
    pub(super) allowed_counts: BTreeMap<String, u64>,
    /// Outcomes on B by "operation result", for MYRIAD_NSX_VERBOSE=1.
    pub(super) outcomes: BTreeMap<String, u64>,
    /// Timestamp verdicts that differed where the clock allows it.
    pub(super) clock_excused: u64,
}

impl Run<'_> {
    pub(super) fn observe(&self, path: &str) -> [Obs; 2] {
        self.dirs.map(|d| lstat(d, path))
    }

    /// One name component: mostly from a small pool, so that names collide; sometimes the
    /// longest allowed name (255 bytes) or one byte more (ENAMETOOLONG).
    pub(super) fn component(&mut self, pool: &[&str]) -> String {
        match self.rng.below(100) {
            0..=2 => "l".repeat(255),
            3..=4 => "m".repeat(256),
            _ => self.rng.pick(pool).to_string(),
        }
    }

    /// Up to three components. Directories on the way come from "a", "b" and "c" only, and
    /// the last name at the top is mostly "c", "d" or "e": files at the top would otherwise
    /// turn most deeper paths into ENOTDIR (mkdir favours the directory names).
    pub(super) fn path(&mut self) -> String {
        let depth = match self.rng.below(100) {
            0..=39 => 1,
            40..=79 => 2,
            _ => 3,
        };
        let mut parts: Vec<String> = (1..depth).map(|_| self.component(&NAMES[..3])).collect();
        let last = if depth == 1 && self.rng.chance(75) {
            &NAMES[2..]
        } else {
            &NAMES[..]
        };
        parts.push(self.component(last));
        parts.join("/")
    }

    /// A path of directory names only.
    pub(super) fn dir_path(&mut self) -> String {
        let depth = 1 + self.rng.below(3);
        let parts: Vec<String> = (0..depth).map(|_| self.component(&NAMES[..3])).collect();
        parts.join("/")
    }

    /// A path for operations on names: sometimes ending in ".", ".." or "/", whose
    /// handling the VFS and the file system share.
    pub(super) fn name_path(&mut self) -> String {
        let p = self.path();
        match self.rng.below(100) {
            0..=1 => format!("{p}/."),
            2..=3 => format!("{p}/.."),
            4..=7 => format!("{p}/"),
            _ => p,
        }
    }

    /// A symlink target: names in the tree (the pool makes many dangle and some loop),
    /// never ".." or absolute, so nothing resolves outside the tree.
    pub(super) fn target(&mut self) -> String {
        match self.rng.below(100) {
            0..=69 => self.path(),
            70..=79 => "zz".to_string(),
            // Not ".": a symlink to the root would hand chmod and chown the root itself.
            80..=84 => format!("{}/.", self.rng.pick(&NAMES)),
            85..=89 => format!("{}/./{}", self.rng.pick(&NAMES), self.rng.pick(&NAMES)),
            90..=94 => "t".repeat(300),
            95..=96 => "u".repeat(4095),
            97..=98 => "v".repeat(4096),
            _ => String::new(),
        }
    }

    pub(super) fn time(&mut self) -> (i64, i64) {
        match self.rng.below(100) {
            0..=29 => (0, libc::UTIME_NOW),
            30..=49 => (0, libc::UTIME_OMIT),
            // Nanoseconds out of range: EINVAL.
            50..=51 => (self.rng.pick(&SECS), 1_000_000_000),
            _ => (self.rng.pick(&SECS), self.rng.pick(&NSECS)),
        }
    }

    pub(super) fn file_mode(&mut self) -> u32 {
        self.rng.pick(&FILE_MODES)
    }

    /// The next operation, from the seed alone (never from the trees' state), so that a seed
    /// replays the same sequence on any file system. Weights in percent, plus 3 for rm -r.
    pub(super) fn pick_op(&mut self) -> Op {
        match self.rng.below(103) {
            100..=102 => Op::Clear { path: self.path() },
            0..=9 => {
                let access = self
                    .rng
                    .pick(&[libc::O_RDONLY, libc::O_WRONLY, libc::O_RDWR]);
                let excl = self.rng.pick(&[0, 0, libc::O_EXCL]);
                let trunc = self.rng.pick(&[0, 0, 0, 0, libc::O_TRUNC]);
                let flags = libc::O_CREAT | access | excl | trunc;
                Op::Create {
                    path: self.name_path(),
                    flags,
                    mode: self.file_mode(),
                }
            }
            10..=17 => {
                // Mostly the names paths go through, so that deeper paths exist.
                let path = match self.rng.chance(70) {
                    true => self.dir_path(),
                    false => self.name_path(),
                };
                Op::Mkdir {
                    path,
                    mode: self.rng.pick(&DIR_MODES),
                }
            }
            18..=22 => self.mknod(),
            23..=29 => Op::Symlink {
                target: self.target(),
                path: self.name_path(),
            },
            30..=36 => Op::Link {
                from: self.path(),
                to: self.name_path(),
            },
            37..=46 => {
                let exchange = if self.cfg.exchange {
                    libc::RENAME_EXCHANGE
                } else {
                    0
                };
                let flags = self.rng.pick(&[0, 0, 0, libc::RENAME_NOREPLACE, exchange]);
                let (from, to) = (self.name_path(), self.name_path());
                let is_dir = |o: &Obs| o.is_ok_and(|s| s.fmt == libc::S_IFDIR);
                let dirs = is_dir(&self.observe(&from)[0]) || is_dir(&self.observe(&to)[0]);
                let flags = if flags == exchange && dirs && !self.cfg.exchange_dirs {
                    0
                } else {
                    flags
                };
                Op::Rename { from, to, flags }
            }
            47..=53 => Op::Unlink {
                path: self.name_path(),
            },
            54..=58 => Op::Rmdir {
                path: self.name_path(),
            },
            59..=65 => {
                let mode = match self.rng.below(3) {
                    0 => self.file_mode(),
                    1 => self.rng.pick(&DIR_MODES),
                    _ => self.rng.below(0o10000) as u32,
                };
                Op::Chmod {
                    path: self.path(),
                    mode,
                    nofollow: self.rng.chance(15),
                }
            }
            66..=72 => Op::Chown {
                path: self.path(),
                uid: self.rng.pick(&IDS),
                gid: self.rng.pick(&IDS),
                nofollow: self.rng.chance(30),
            },
            73..=79 => Op::Utimens {
                path: self.path(),
                times: [self.time(), self.time()],
                nofollow: self.rng.chance(25),
            },
            80..=85 => Op::Truncate {
                path: self.path(),
                size: self.rng.pick(&SIZES),
                create: self.rng.chance(30),
            },
            86..=93 => self.open(),
            _ => Op::Write {
                path: self.path(),
                len: 1 + self.rng.below(16) as usize,
                append: self.rng.chance(50),
            },
        }
    }

    pub(super) fn mknod(&mut self) -> Op {
        let perm = self.file_mode();
        let (kind, rdev) = match self.rng.below(100) {
            0..=44 => (libc::S_IFIFO, 0),
            45..=69 => (libc::S_IFSOCK, 0),
            // /dev/null, harmless when opened; block major 240 has no driver (ENXIO).
            70..=84 if self.cfg.devices => (libc::S_IFCHR, libc::makedev(1, 3)),
            85..=99 if self.cfg.devices => (libc::S_IFBLK, libc::makedev(240, 7)),
            _ => (libc::S_IFIFO, 0),
        };
        Op::Mknod {
            path: self.name_path(),
            mode: kind | perm,
            rdev,
        }
    }

    pub(super) fn open(&mut self) -> Op {
        let mut flags = self
            .rng
            .pick(&[libc::O_RDONLY, libc::O_WRONLY, libc::O_RDWR]);
        for (percent, bit) in [
            (15, libc::O_APPEND),
            (15, libc::O_TRUNC),
            (10, libc::O_DIRECTORY),
            (15, libc::O_NOFOLLOW),
            (15, libc::O_CREAT),
        ] {
            if self.rng.chance(percent) {
                flags |= bit;
            }
        }
        if flags & libc::O_CREAT != 0 && self.rng.chance(50) {
            flags |= libc::O_EXCL;
        }
        Op::Open {
            path: self.path(),
            flags,
            mode: self.file_mode(),
        }
    }

    pub(super) fn one_step(&mut self) {
        let user = self.rng.below(self.cfg.users.len() as u64) as usize;
        let op = self.pick_op();
        let touched: Vec<String> = op.paths().into_iter().flat_map(with_parents).collect();
        // Before: the state after the last step (nothing has run since), and a first look
        // at names not held before.
        let mut before = self.seen.clone();
        for t in touched {
            if let Entry::Vacant(e) = before.entry(t) {
                let obs = self.observe(e.key());
                e.insert(obs);
            }
        }
        let cfg = self.cfg;
        let u = match op {
            Op::Clear { .. } => &ROOT,
            _ => &cfg.users[user],
        };
        become_user(u);
        let coarse_a = coarse_now();
        let res_a = exec(self.dirs[0], &op);
        let coarse_b = coarse_now();
        let res = (res_a, exec(self.dirs[1], &op));
        become_root();

        let mut names: BTreeSet<String> = before.keys().cloned().collect();
        let walked = self.cfg.walk_every > 0 && self.step.is_multiple_of(self.cfg.walk_every);
        if walked {
            names.extend(walk(self.dirs[0]));
            names.extend(walk(self.dirs[1]));
        }
        let after: BTreeMap<String, [Obs; 2]> = names
            .into_iter()
            .map(|n| (n.clone(), self.observe(&n)))
            .collect();
        self.log.push(format!(
            "{}: uid {}: {op} -> A {}, B {}",
            self.step, u.uid, res.0, res.1
        ));
        if self.log.len() > 1000 {
            self.log.drain(..500);
        }
        let outcome = match res.1 {
            Res::Ok(_) => format!("{} ok", op.name()),
            Res::Err(call, e) => format!("{} {call} {}", op.name(), errno_name(e)),
        };
        *self.outcomes.entry(outcome).or_default() += 1;
        let diffs = self.compare(res, &before, &after, [coarse_a, coarse_b]);
        self.judge(u, &op, res, diffs);
        // Names neither tree holds are forgotten ("." is the root itself).
        self.seen = after
            .into_iter()
            .filter(|(n, o)| n == "." || o.iter().any(|x| x.is_ok()))
            .collect();
        self.complete = walked;
    }

    pub(super) fn compare(
        &mut self,
        res: (Res, Res),
        before: &BTreeMap<String, [Obs; 2]>,
        after: &BTreeMap<String, [Obs; 2]>,
        coarse: [(i64, i64); 2],
    ) -> Vec<Diff> {
        let mut out = Vec::new();
        if res.0 != res.1 {
            let (a, b) = (res.0.to_string(), res.1.to_string());
            out.push(Diff::new("result", "", a, b));
        }
        // A name not observed before the step held nothing if the last walk saw it all.
        let absent = [Err(libc::ENOENT), Err(libc::ENOENT)];
        let links = [link_sets(after, 0), link_sets(after, 1)];
        for (name, [a, b]) in after {
            compare_obs(name, a, b, &mut out);
            let pre = before.get(name).or(self.complete.then_some(&absent));
            let ca = change(pre.map(|p| &p[0]), a, coarse[0]);
            let cb = change(pre.map(|p| &p[1]), b, coarse[1]);
            if a.is_ok() == b.is_ok() {
                self.clock_excused += compare_change(name, ca, cb, &mut out);
            }
            let (la, lb) = (links[0].get(name.as_str()), links[1].get(name.as_str()));
            if a.is_ok() && b.is_ok() && la != lb {
                let names = |l: Option<&Vec<&str>>| {
                    let l: Vec<String> = l.into_iter().flatten().map(|n| show(n)).collect();
                    format!("{l:?}")
                };
                out.push(Diff::new("links", name, names(la), names(lb)));
            }
        }
        out
    }

    pub(super) fn allowed(&self, op: &str, field: &str) -> bool {
        let qualified = format!("{op}:{field}");
        self.cfg
            .allowed
            .iter()
            .any(|(k, _)| *k == field || *k == qualified)
    }

    pub(super) fn judge(&mut self, u: &User, op: &Op, res: (Res, Res), diffs: Vec<Diff>) {
        let mut failing = false;
        let mut report = String::new();
        for d in &diffs {
            let ok = self.allowed(op.name(), d.field);
            if ok {
                *self
                    .allowed_counts
                    .entry(format!("{}:{}", op.name(), d.field))
                    .or_default() += 1;
            }
            failing |= !ok;
            let mark = if ok { " (allowed)" } else { "" };
            let path = if d.path.is_empty() {
                String::new()
            } else {
                format!(" {}", show(&d.path))
            };
            report.push_str(&format!(
                "    [{}]{path}: A {}, B {}{mark}\n",
                d.field, d.a, d.b
            ));
        }
        if failing {
            let paths: Vec<String> = diffs
                .iter()
                .filter(|d| !d.path.is_empty())
                .map(|d| show(&d.path))
                .collect();
            let earlier = touching(&self.log, &paths, 40);
            self.fail(&format!(
                "as uid {} gid {} groups {:?}: {op}\n  result: A {}, B {}\n  differences:\n{report}\
                 earlier operations on those paths or their directories:\n{earlier}",
                u.uid, u.gid, u.groups, res.0, res.1
            ));
        }
    }

    pub(super) fn fail(&self, what: &str) -> ! {
        let s = crate::exerciser::last_lines(&self.log, crate::harness::log_lines(25));
        panic!(
            "nsx seed {} step {}: A (under test) and B (reference) differ\n  {what}\
             last operations:\n{s}replay: MYRIAD_NSX_SEED={} MYRIAD_NSX_STEPS={} cargo test -p \
             myriad-cli --test it nsx_replay_local -- --ignored --nocapture",
            self.cfg.seed, self.step, self.cfg.seed, self.step
        );
    }
}

/// The last `n` lines of `log` that name one of `paths` or a directory holding one (a name
/// a failure's difference was found on: what changed it may be long before the last lines).
fn touching(log: &[String], paths: &[String], n: usize) -> String {
    let mut names: Vec<String> = Vec::new();
    for p in paths {
        let mut at = p.as_str();
        loop {
            if !at.is_empty() && !names.iter().any(|x| x == at) {
                names.push(at.to_string());
            }
            match at.rfind('/') {
                Some(i) => at = &at[..i],
                None => break,
            }
        }
    }
    // A name counts where it stands whole: after a space or '(', before ',', ')' or ' '.
    let names_it = |line: &str| {
        names.iter().any(|name| {
            line.match_indices(name.as_str()).any(|(i, _)| {
                let before = line[..i].chars().last();
                let after = line[i + name.len()..].chars().next();
                matches!(before, Some(' ' | '(')) && matches!(after, Some(',' | ')' | ' '))
            })
        })
    };
    let hits: Vec<&String> = log.iter().filter(|l| names_it(l)).collect();
    let start = hits.len().saturating_sub(n);
    hits[start..].iter().map(|l| format!("{l}\n")).collect()
}
