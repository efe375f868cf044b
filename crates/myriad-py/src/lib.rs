//! `myriad._native`: the Myriad client for Python. The Python half of the package
//! (`python/myriad`) builds the user's API on it: paths made canonical, `open()` as a
//! buffered file object, `walk`, and the fsspec filesystem for `myriad://`.
//!
//! Every call releases the GIL and runs on a Tokio runtime of the process's own
//! (`runtime.rs`), so Python threads calling at once use the cluster at once.

mod client;
mod errors;
mod handle;
mod live;
mod meta;
mod runtime;
mod stat;

use pyo3::prelude::*;

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<client::PyClient>()?;
    m.add_class::<handle::PyHandle>()?;
    m.add_class::<stat::PyStat>()?;
    m.add("FETCH_MANY_PARALLEL", myriad_client::FETCH_MANY_PARALLEL)?;
    Ok(())
}
