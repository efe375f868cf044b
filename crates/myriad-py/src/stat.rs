//! `Stat`: a file's attributes with the names of `os.stat_result`, so code written for
//! local files reads them unchanged (`st.st_size`, `stat.S_ISDIR(st.st_mode)`).

use myriad_client::{FileKind, Inode};
use pyo3::prelude::*;

#[pyclass(module = "myriad._native", name = "Stat", frozen, get_all)]
pub struct PyStat {
    /// Type bits (S_IFREG, S_IFDIR, ...) and permission bits.
    pub st_mode: u32,
    pub st_ino: u64,
    pub st_nlink: u32,
    pub st_uid: u32,
    pub st_gid: u32,
    pub st_size: u64,
    pub st_atime: f64,
    pub st_mtime: f64,
    pub st_ctime: f64,
    pub st_atime_ns: i64,
    pub st_mtime_ns: i64,
    pub st_ctime_ns: i64,
    pub st_rdev: u64,
    /// "file", "directory", "symlink", "fifo", "socket", "char-device" or "block-device".
    pub kind: &'static str,
    /// A symbolic link's target; None for every other kind.
    pub target: Option<String>,
}

/// The `st_mode` type bits and the `kind` name of a file kind.
fn kind_bits(kind: FileKind) -> (u32, &'static str) {
    match kind {
        FileKind::File | FileKind::HardLink => (0o100_000, "file"),
        FileKind::Directory => (0o040_000, "directory"),
        FileKind::Symlink => (0o120_000, "symlink"),
        FileKind::Fifo => (0o010_000, "fifo"),
        FileKind::Socket => (0o140_000, "socket"),
        FileKind::CharDevice => (0o020_000, "char-device"),
        FileKind::BlockDevice => (0o060_000, "block-device"),
    }
}

fn seconds(ns: i64) -> f64 {
    ns as f64 / 1e9
}

impl From<&Inode> for PyStat {
    fn from(i: &Inode) -> PyStat {
        let (bits, kind) = kind_bits(i.kind);
        PyStat {
            st_mode: bits | (i.mode & 0o7777),
            st_ino: i.ino.0,
            st_nlink: i.nlink,
            st_uid: i.uid,
            st_gid: i.gid,
            st_size: i.size,
            st_atime: seconds(i.atime_ns),
            st_mtime: seconds(i.mtime_ns),
            st_ctime: seconds(i.ctime_ns),
            st_atime_ns: i.atime_ns,
            st_mtime_ns: i.mtime_ns,
            st_ctime_ns: i.ctime_ns,
            st_rdev: i.rdev,
            kind,
            target: i.symlink_target.clone(),
        }
    }
}

#[pymethods]
impl PyStat {
    fn is_dir(&self) -> bool {
        self.kind == "directory"
    }

    fn is_file(&self) -> bool {
        self.kind == "file"
    }

    fn is_symlink(&self) -> bool {
        self.kind == "symlink"
    }

    fn __repr__(&self) -> String {
        format!(
            "myriad.Stat(kind={:?}, st_mode=0o{:o}, st_ino={}, st_size={}, st_uid={}, st_gid={}, st_mtime={})",
            self.kind,
            self.st_mode,
            self.st_ino,
            self.st_size,
            self.st_uid,
            self.st_gid,
            self.st_mtime
        )
    }
}
