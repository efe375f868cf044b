//! Myriad's errors as Python's own: `OSError(errno, message, path)`, which Python turns into
//! the matching subclass (`FileNotFoundError` for ENOENT, `PermissionError` for EACCES,
//! `FileExistsError`, `IsADirectoryError`, `NotADirectoryError`, `TimeoutError`, ...).

use myriad_client::FsError;
use pyo3::PyErr;
use pyo3::exceptions::{PyOSError, PyValueError};

/// The Python exception for `e` met on `path`.
pub fn os_error(e: &FsError, path: &str) -> PyErr {
    PyOSError::new_err((e.errno(), e.to_string(), path.to_string()))
}

/// The Python exception for a client that could not be set up (a missing or bad cluster
/// map or key file).
pub fn setup_error(e: impl std::fmt::Display) -> PyErr {
    PyValueError::new_err(e.to_string())
}
