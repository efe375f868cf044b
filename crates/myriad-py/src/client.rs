//! `Client`: one connection to a cluster, shared by every thread of the process. Each
//! method is one call of the native client (`myriad_client::Client`), made with the GIL
//! released.

use std::path::PathBuf;
use std::sync::Mutex;
use std::time::Duration;

use myriad_client::proto::XattrMode;
use myriad_client::{Client, FsError, RenameFlags};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyList};

use crate::errors::{os_error, setup_error};
use crate::handle::PyHandle;
use crate::live::{Live, Setup, start};
use crate::meta;
use crate::stat::PyStat;

#[pyclass(module = "myriad._native", name = "Client", subclass, frozen)]
pub struct PyClient {
    setup: Setup,
    live: Mutex<Live>,
}

/// `given`, else the environment variable `var`.
fn given_or_env(given: Option<PathBuf>, var: &str) -> Option<PathBuf> {
    given.or_else(|| std::env::var_os(var).map(PathBuf::from))
}

impl PyClient {
    /// This process's client: made anew in a forked child, from the newest map known.
    pub(crate) fn live(&self) -> PyResult<Live> {
        let mut g = self
            .live
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if g.pid != std::process::id() {
            let map = g.client.map();
            let fresh = start(&self.setup, map)?;
            // The parent's client holds the parent's connections and tasks: leak it.
            std::mem::forget(std::mem::replace(&mut *g, fresh));
        }
        Ok(g.clone())
    }
}

/// Opens the existing file `path` if the client's user may read it (`read`) and write it
/// (`write`): `PermissionError` at open, as open(2) gives it.
async fn open_checked(
    c: &Client,
    path: &str,
    read: bool,
    write: bool,
) -> Result<myriad_client::FileHandle, FsError> {
    use myriad_client::proto::access;
    let h = c.open_follow(path).await?;
    let want = if read { access::READ } else { 0 } | if write { access::WRITE } else { 0 };
    if access::allowed(&h.inode, c.caller(), want) {
        Ok(h)
    } else {
        Err(FsError::PermissionDenied)
    }
}

/// FileNotFoundError for a file named that is not there (a cluster may also be named by
/// servers' addresses, `h1:7401,h2:7401`, when `addresses`), as open() raises it.
fn missing_file(path: &std::path::Path, addresses: bool) -> PyResult<()> {
    let text = path.to_string_lossy();
    let looks_like_addresses = addresses
        && !text.contains('/')
        && text.split(',').all(|a| {
            a.rsplit_once(':')
                .is_some_and(|(_, port)| port.parse::<u16>().is_ok())
        });
    if looks_like_addresses || path.exists() {
        return Ok(());
    }
    Err(pyo3::exceptions::PyFileNotFoundError::new_err((
        2,
        "No such file or directory",
        text.into_owned(),
    )))
}

fn bytes<'py>(py: Python<'py>, data: &[u8]) -> Bound<'py, PyBytes> {
    PyBytes::new(py, data)
}

#[pymethods]
impl PyClient {
    /// Connects to the cluster whose map is in `cluster_file` (else $MYRIAD_CLUSTER), or
    /// whose servers are at these addresses ("h1:7401,h2:7401": any one that answers
    /// gives the map), with the key file `secret_file` (else $MYRIAD_SECRET_FILE, else
    /// the cluster secret or client key beside the map file), as the calling process's
    /// user. Requests give up after `timeout` seconds of the cluster not answering
    /// (TimeoutError).
    #[new]
    #[pyo3(signature = (cluster_file=None, secret_file=None, timeout=30.0, zone=None))]
    fn new(
        py: Python<'_>,
        cluster_file: Option<PathBuf>,
        secret_file: Option<PathBuf>,
        timeout: f64,
        zone: Option<String>,
    ) -> PyResult<PyClient> {
        let Some(cluster_file) = given_or_env(cluster_file, "MYRIAD_CLUSTER") else {
            return Err(setup_error(
                "no cluster given: pass cluster_file or set MYRIAD_CLUSTER (`myriad cluster up` prints it)",
            ));
        };
        if !(timeout.is_finite() && timeout > 0.0) {
            return Err(PyValueError::new_err(
                "timeout must be a positive number of seconds",
            ));
        }
        missing_file(&cluster_file, true)?;
        let secret_file = given_or_env(secret_file, "MYRIAD_SECRET_FILE");
        if let Some(f) = &secret_file {
            missing_file(f, false)?;
        }
        let keys = myriad_client::setup::client_keys(secret_file.as_deref(), Some(&cluster_file))
            .map_err(setup_error)?;
        // A map file, or servers' addresses ("h1:7401,h2:7401") asked for the map.
        let map = py
            .detach(|| {
                myriad_client::setup::load_cluster(
                    &cluster_file,
                    &keys,
                    Duration::from_secs_f64(timeout.min(30.0)),
                )
            })
            .map_err(setup_error)?;
        let zone = zone
            .or_else(|| std::env::var("MYRIAD_ZONE").ok())
            .unwrap_or_else(|| myriad_client::setup::zone_of_this_host(&map));
        let setup = Setup {
            keys,
            caller: myriad_client::setup::current_caller(),
            zone,
            timeout: Duration::from_secs_f64(timeout),
        };
        let live = start(&setup, map)?;
        Ok(PyClient {
            setup,
            live: Mutex::new(live),
        })
    }

    /// A file's whole contents: one request to one server for a small file. A symbolic
    /// link is followed (as open() follows it).
    fn fetch<'py>(&self, py: Python<'py>, path: &str) -> PyResult<Bound<'py, PyBytes>> {
        let p = path.to_string();
        let (_, data) = self
            .live()?
            .call(py, path, |c| async move { c.fetch_follow(&p).await })?;
        Ok(bytes(py, &data))
    }

    /// The contents of many files, in the order given, with `parallel` fetches in flight.
    /// `on_error`: "raise" (the first failure, after all are done), "return" (the exception
    /// in the file's place) or "omit" (None in its place).
    #[pyo3(signature = (paths, parallel=myriad_client::FETCH_MANY_PARALLEL, on_error="raise"))]
    fn fetch_many<'py>(
        &self,
        py: Python<'py>,
        paths: Vec<String>,
        parallel: usize,
        on_error: &str,
    ) -> PyResult<Bound<'py, PyList>> {
        if !matches!(on_error, "raise" | "return" | "omit") {
            return Err(PyValueError::new_err(
                "on_error must be \"raise\", \"return\" or \"omit\"",
            ));
        }
        let live = self.live()?;
        let (rt, client) = (live.rt.clone(), live.client.clone());
        let got = py.detach(|| rt.block_on(client.fetch_many(&paths, parallel)));
        let list = PyList::empty(py);
        for (path, r) in paths.iter().zip(got) {
            match r {
                Ok((_, data)) => list.append(bytes(py, &data))?,
                Err(e) => {
                    let err = os_error(&e, path);
                    match on_error {
                        "raise" => return Err(err),
                        "return" => list.append(err.into_value(py))?,
                        _ => list.append(py.None())?,
                    }
                }
            }
        }
        Ok(list)
    }

    /// `size` bytes (all, when None) of a file from `offset`; short only at its end.
    #[pyo3(signature = (path, offset=0, size=None))]
    fn read<'py>(
        &self,
        py: Python<'py>,
        path: &str,
        offset: u64,
        size: Option<u64>,
    ) -> PyResult<Bound<'py, PyBytes>> {
        let p = path.to_string();
        let data = self.live()?.call(py, path, |c| async move {
            if offset == 0 && size.is_none() {
                return Ok(c.fetch_follow(&p).await?.1);
            }
            let h = c.open_follow(&p).await?;
            let len = size.unwrap_or_else(|| h.inode.size.saturating_sub(offset));
            c.read(&h, offset, len).await
        })?;
        Ok(bytes(py, &data))
    }

    /// Makes `path` a file holding exactly `data` (created with `mode`, or truncated and
    /// rewritten in place). Returns the number of bytes written.
    #[pyo3(signature = (path, data, mode=0o644))]
    fn write(&self, py: Python<'_>, path: &str, data: &[u8], mode: u32) -> PyResult<usize> {
        let p = path.to_string();
        self.live()?.call(
            py,
            path,
            |c| async move { c.write_file(&p, mode, data).await },
        )?;
        Ok(data.len())
    }

    /// Writes many files (`write` of each `(path, data)`), `parallel` at a time. Raises the
    /// first failure once all are done; the others are written.
    #[pyo3(signature = (items, mode=0o644, parallel=myriad_client::FETCH_MANY_PARALLEL))]
    fn write_many(
        &self,
        py: Python<'_>,
        items: Vec<(String, Vec<u8>)>,
        mode: u32,
        parallel: usize,
    ) -> PyResult<usize> {
        let live = self.live()?;
        let (rt, client) = (live.rt.clone(), live.client.clone());
        let got = py.detach(|| rt.block_on(client.write_many(&items, mode, parallel)));
        for ((path, _), r) in items.iter().zip(got) {
            r.map_err(|e| os_error(&e, path))?;
        }
        Ok(items.len())
    }

    /// Attributes of what `path` names, following symbolic links (as os.stat), or of
    /// `path` itself with `follow_symlinks=False` (as os.lstat).
    #[pyo3(signature = (path, follow_symlinks=true))]
    fn stat(&self, py: Python<'_>, path: &str, follow_symlinks: bool) -> PyResult<PyStat> {
        let p = path.to_string();
        let i = self.live()?.call(py, path, |c| async move {
            if follow_symlinks {
                c.stat_follow(&p).await
            } else {
                c.stat(&p).await
            }
        })?;
        Ok(PyStat::from(&i))
    }

    /// The names in a directory (one listing; no "." or "..").
    fn listdir(&self, py: Python<'_>, path: &str) -> PyResult<Vec<String>> {
        let p = path.to_string();
        let entries = self
            .live()?
            .call(py, path, |c| async move { c.readdir_follow(&p).await })?;
        Ok(entries.into_iter().map(|e| e.name).collect())
    }

    /// The entries of a directory with their attributes, from the same single listing.
    fn scandir(&self, py: Python<'_>, path: &str) -> PyResult<Vec<(String, PyStat)>> {
        let p = path.to_string();
        let entries = self
            .live()?
            .call(py, path, |c| async move { c.readdir_follow(&p).await })?;
        Ok(entries
            .iter()
            .map(|e| (e.name.clone(), PyStat::from(&e.inode)))
            .collect())
    }

    /// Makes a directory; `parents`: its missing ancestors too; `exist_ok`: the directory
    /// existing already is fine (as `os.makedirs` has them).
    #[pyo3(signature = (path, mode=0o777, parents=false, exist_ok=false))]
    fn mkdir(
        &self,
        py: Python<'_>,
        path: &str,
        mode: u32,
        parents: bool,
        exist_ok: bool,
    ) -> PyResult<()> {
        let p = path.to_string();
        self.live()?.call(py, path, |c| async move {
            match c.mkdir(&p, mode).await {
                // An ancestor is missing: make them all (as os.makedirs).
                Err(FsError::NotFound) if parents => c.mkdir_p(&p, mode).await,
                Err(FsError::AlreadyExists) if exist_ok => match c.stat_follow(&p).await?.kind {
                    myriad_client::FileKind::Directory => Ok(()),
                    _ => Err(FsError::AlreadyExists),
                },
                r => r.map(|_| ()),
            }
        })
    }

    /// Removes a file, symbolic link or other non-directory.
    fn remove(&self, py: Python<'_>, path: &str) -> PyResult<()> {
        let p = path.to_string();
        self.live()?
            .call(py, path, |c| async move { c.unlink(&p).await })
    }

    /// Removes an empty directory.
    fn rmdir(&self, py: Python<'_>, path: &str) -> PyResult<()> {
        let p = path.to_string();
        self.live()?
            .call(py, path, |c| async move { c.rmdir(&p).await })
    }

    /// Renames `src` to `dst`, replacing `dst` as POSIX rename does.
    fn rename(&self, py: Python<'_>, src: &str, dst: &str) -> PyResult<()> {
        let (s, d) = (src.to_string(), dst.to_string());
        self.live()?.call(py, src, |c| async move {
            c.rename(&s, &d, RenameFlags::default()).await
        })
    }

    /// Makes `path` a symbolic link to `target`.
    fn symlink(&self, py: Python<'_>, target: &str, path: &str) -> PyResult<()> {
        let (t, p) = (target.to_string(), path.to_string());
        self.live()?.call(
            py,
            path,
            |c| async move { c.symlink(&t, &p).await.map(|_| ()) },
        )
    }

    /// A symbolic link's target.
    fn readlink(&self, py: Python<'_>, path: &str) -> PyResult<String> {
        let p = path.to_string();
        self.live()?
            .call(py, path, |c| async move { c.readlink(&p).await })
    }

    /// Sets a file's permission bits.
    fn chmod(&self, py: Python<'_>, path: &str, mode: u32) -> PyResult<()> {
        let p = path.to_string();
        self.live()?.call(
            py,
            path,
            |c| async move { c.chmod(&p, mode).await.map(|_| ()) },
        )
    }

    /// Opens a file for the Python file object of `open()`: `create` makes it if missing
    /// (with `mode`), `exclusive` refuses an existing one, `truncate` empties it. An
    /// existing file is checked for the access asked (`read`, `write`) here, as open(2)
    /// checks it, not at the first read or write; the servers check every request again.
    #[pyo3(signature = (path, create=false, exclusive=false, truncate=false, mode=0o644, read=true, write=false))]
    #[allow(clippy::too_many_arguments)]
    fn open_handle(
        &self,
        py: Python<'_>,
        path: &str,
        create: bool,
        exclusive: bool,
        truncate: bool,
        mode: u32,
        read: bool,
        write: bool,
    ) -> PyResult<PyHandle> {
        let live = self.live()?;
        let p = path.to_string();
        let h = live.call(py, path, |c| async move {
            // Always an exclusive create: a file this call made is written with the
            // creator's rights (`opened`), but an existing one is opened like any other
            // file, so its mode is checked on every write and truncate (a non-exclusive
            // create would hand back an existing read-only file as if just made).
            let h = match create.then(|| c.create(&p, mode, true, &[])) {
                Some(made) => match made.await {
                    Err(FsError::AlreadyExists) if !exclusive => {
                        open_checked(&c, &p, read, write).await?
                    }
                    r => r?,
                },
                None => open_checked(&c, &p, read, write).await?,
            };
            if truncate && h.inode.size > 0 {
                c.truncate(&h, 0).await?;
            }
            Ok(h)
        })?;
        Ok(PyHandle::new(live, h))
    }

    /// Sets the owner and group (-1 or None: unchanged), of what a symbolic link names
    /// unless `follow_symlinks` is False (as os.chown).
    #[pyo3(signature = (path, uid, gid, follow_symlinks=true))]
    fn chown(
        &self,
        py: Python<'_>,
        path: &str,
        uid: Option<i64>,
        gid: Option<i64>,
        follow_symlinks: bool,
    ) -> PyResult<()> {
        let ids = (
            meta::id_arg(uid).map_err(PyValueError::new_err)?,
            meta::id_arg(gid).map_err(PyValueError::new_err)?,
        );
        let p = path.to_string();
        self.live()?.call(py, path, |c| async move {
            meta::chown(&c, &p, ids, follow_symlinks).await
        })
    }

    /// Sets access and modification times, `ns` = (atime_ns, mtime_ns), or both to now.
    #[pyo3(signature = (path, ns=None, follow_symlinks=true))]
    fn utime(
        &self,
        py: Python<'_>,
        path: &str,
        ns: Option<(i64, i64)>,
        follow_symlinks: bool,
    ) -> PyResult<()> {
        let p = path.to_string();
        self.live()?.call(py, path, |c| async move {
            meta::utime(&c, &p, ns, follow_symlinks).await
        })
    }

    /// Cuts or extends a file to `length` bytes (as os.truncate).
    fn truncate(&self, py: Python<'_>, path: &str, length: u64) -> PyResult<()> {
        let p = path.to_string();
        self.live()?.call(
            py,
            path,
            |c| async move { meta::truncate(&c, &p, length).await },
        )
    }

    /// Makes `dst` a hard link to the file `src` (as os.link).
    fn link(&self, py: Python<'_>, src: &str, dst: &str) -> PyResult<()> {
        let (s, d) = (src.to_string(), dst.to_string());
        self.live()?
            .call(py, dst, |c| async move { meta::link(&c, &s, &d).await })
    }

    /// Whether this client's user may access `path` as `mode` asks (as os.access: F_OK,
    /// R_OK, W_OK, X_OK).
    fn access(&self, py: Python<'_>, path: &str, mode: u32) -> PyResult<bool> {
        let p = path.to_string();
        self.live()?.call(
            py,
            path,
            |c| async move { meta::access(&c, &p, mode).await },
        )
    }

    /// An extended attribute's value (OSError ENODATA if there is none).
    #[pyo3(signature = (path, name, follow_symlinks=true))]
    fn getxattr<'py>(
        &self,
        py: Python<'py>,
        path: &str,
        name: &str,
        follow_symlinks: bool,
    ) -> PyResult<Bound<'py, PyBytes>> {
        let (p, n) = (path.to_string(), name.to_string());
        let v = self.live()?.call(py, path, |c| async move {
            meta::getxattr(&c, &p, &n, follow_symlinks).await
        })?;
        Ok(bytes(py, &v))
    }

    /// The names of a file's extended attributes.
    #[pyo3(signature = (path, follow_symlinks=true))]
    fn listxattr(
        &self,
        py: Python<'_>,
        path: &str,
        follow_symlinks: bool,
    ) -> PyResult<Vec<String>> {
        let p = path.to_string();
        self.live()?.call(py, path, |c| async move {
            meta::listxattr(&c, &p, follow_symlinks).await
        })
    }

    /// Sets an extended attribute (`user.` names); `flags` as os.setxattr's.
    #[pyo3(signature = (path, name, value, flags=0, follow_symlinks=true))]
    fn setxattr(
        &self,
        py: Python<'_>,
        path: &str,
        name: &str,
        value: &[u8],
        flags: i32,
        follow_symlinks: bool,
    ) -> PyResult<()> {
        let mode = meta::xattr_mode(flags).map_err(PyValueError::new_err)?;
        let (p, n) = (path.to_string(), name.to_string());
        self.live()?.call(py, path, |c| async move {
            meta::setxattr(&c, &p, (&n, Some(value)), mode, follow_symlinks).await
        })
    }

    /// Removes an extended attribute (OSError ENODATA if there is none).
    #[pyo3(signature = (path, name, follow_symlinks=true))]
    fn removexattr(
        &self,
        py: Python<'_>,
        path: &str,
        name: &str,
        follow_symlinks: bool,
    ) -> PyResult<()> {
        let (p, n) = (path.to_string(), name.to_string());
        self.live()?.call(py, path, |c| async move {
            meta::setxattr(&c, &p, (&n, None), XattrMode::Replace, follow_symlinks).await
        })
    }

    /// Copies the file `src` to `dst` on the servers (no byte passes through this process);
    /// a new `dst` gets `mode`. The number of bytes copied.
    #[pyo3(signature = (src, dst, mode=0o644))]
    fn copy(&self, py: Python<'_>, src: &str, dst: &str, mode: u32) -> PyResult<u64> {
        let (s, d) = (src.to_string(), dst.to_string());
        self.live()?.call(
            py,
            dst,
            |c| async move { meta::copy(&c, &s, &d, mode).await },
        )
    }

    /// The cluster's capacity: total, used and free bytes, and files.
    fn statfs(&self, py: Python<'_>) -> PyResult<std::collections::BTreeMap<&'static str, u64>> {
        let s = self
            .live()?
            .call(py, "/", |c| async move { c.statfs().await })?;
        Ok([
            ("total_bytes", s.total_bytes),
            ("used_bytes", s.used_bytes),
            ("free_bytes", s.free_bytes),
            ("files", s.files),
        ]
        .into_iter()
        .collect())
    }
}
