//! `Handle`: an open file for `open()`'s file object (`python/myriad/_files.py` wraps it in
//! Python's buffered and text layers). Reads and writes name their offset; the file
//! object keeps the position.

use myriad_client::FileHandle;
use pyo3::prelude::*;
use pyo3::types::PyBytes;

use crate::live::Live;

#[pyclass(module = "myriad._native", name = "Handle", frozen)]
pub struct PyHandle {
    live: Live,
    file: FileHandle,
}

impl PyHandle {
    pub(crate) fn new(live: Live, file: FileHandle) -> PyHandle {
        PyHandle { live, file }
    }
}

#[pymethods]
impl PyHandle {
    /// The path the file was opened at.
    #[getter]
    fn path(&self) -> &str {
        &self.file.path
    }

    /// Up to `size` bytes at `offset`; fewer only at the end of the file.
    fn pread<'py>(&self, py: Python<'py>, offset: u64, size: u64) -> PyResult<Bound<'py, PyBytes>> {
        let h = self.file.clone();
        let data = self.live.call(py, &self.file.path, |c| async move {
            c.read(&h, offset, size).await
        })?;
        Ok(PyBytes::new(py, &data))
    }

    /// Writes `data` at `offset`; returns its length.
    fn pwrite(&self, py: Python<'_>, offset: u64, data: &[u8]) -> PyResult<usize> {
        let h = self.file.clone();
        self.live.call(py, &self.file.path, |c| async move {
            c.write(&h, offset, data).await
        })?;
        Ok(data.len())
    }

    /// The file's size now.
    fn size(&self, py: Python<'_>) -> PyResult<u64> {
        let h = self.file.clone();
        let i = self.live.call(
            py,
            &self.file.path,
            |c| async move { c.stat_open(&h).await },
        )?;
        Ok(i.size)
    }

    /// Cuts or extends the file to `size` bytes.
    fn truncate(&self, py: Python<'_>, size: u64) -> PyResult<()> {
        let h = self.file.clone();
        self.live.call(py, &self.file.path, |c| async move {
            c.truncate(&h, size).await.map(|_| ())
        })
    }

    /// Returns once the file's writes are durable (every acknowledged write already is;
    /// this checks the file is still there).
    fn fsync(&self, py: Python<'_>) -> PyResult<()> {
        let h = self.file.clone();
        self.live
            .call(py, &self.file.path, |c| async move { c.fsync(&h).await })
    }
}
