//! `_core.Recorder`: records a running `Capture` to files on many disks
//! (voltstream-core's `record`); only conversion here.

use std::path::PathBuf;
use std::sync::Mutex;

use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList};
use voltstream_core::record::{RecordReport, RecordSpec, Recorder};

use crate::capture::{capture_error, lock, PyCapture};
use crate::errors::to_py;

/// Records every chunk of a started capture: one writer thread per directory,
/// chunk files `<dir>/<scan>/<scan>.<8-digit number>`; never holds the capture
/// back (chunks no disk has room for are counted `chunks_unwritten`). Call
/// `finish()` after the capture's `stop()`.
#[pyclass(module = "voltstream._core", name = "Recorder", frozen)]
pub struct PyRecorder {
    running: Mutex<Option<Recorder>>,
    last: Mutex<Option<RecordReport>>,
}

#[pymethods]
impl PyRecorder {
    #[new]
    #[pyo3(signature = (capture, dirs, scan, queue_chunks = 2))]
    fn new(
        capture: &PyCapture,
        dirs: Vec<PathBuf>,
        scan: String,
        queue_chunks: usize,
    ) -> PyResult<Self> {
        let group = capture.running_group()?;
        let consumers = (0..group.threads().len())
            .filter_map(|t| group.consumer(t))
            .collect();
        let mut spec = RecordSpec::new(dirs, scan);
        spec.queue_chunks = queue_chunks;
        let rec = Recorder::start(consumers, &spec).map_err(to_py)?;
        Ok(PyRecorder {
            running: Mutex::new(Some(rec)),
            last: Mutex::new(None),
        })
    }

    /// Counters now: chunks and bytes written, chunks unwritten, per writer.
    fn report<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let report = match lock(&self.running).as_ref() {
            Some(rec) => rec.report(),
            None => lock(&self.last)
                .clone()
                .ok_or_else(|| capture_error("the recorder has no report".into()))?,
        };
        report_dict(py, &report)
    }

    /// Waits until every chunk the (stopped) capture delivered is written or
    /// counted, ends the writers, and returns the final report. Idempotent.
    fn finish<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        if let Some(rec) = lock(&self.running).take() {
            let report = py.detach(|| rec.finish());
            *lock(&self.last) = Some(report);
        }
        self.report(py)
    }
}

fn report_dict<'py>(py: Python<'py>, r: &RecordReport) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    set_fields!(d, r, [chunks_written, bytes_written, chunks_unwritten]);
    let writers = PyList::empty(py);
    for w in &r.writers {
        let wd = PyDict::new(py);
        wd.set_item("dir", w.dir.to_string_lossy())?;
        set_fields!(
            wd,
            w,
            [
                chunks,
                bytes,
                direct_chunks,
                lost_chunks,
                zero_filled_packets,
                failed
            ]
        );
        writers.append(wd)?;
    }
    d.set_item(
        "chunks_lost",
        r.writers.iter().map(|w| w.lost_chunks).sum::<u64>(),
    )?;
    let zeroed: u64 = r.writers.iter().map(|w| w.zero_filled_packets).sum();
    d.set_item("zero_filled_packets", zeroed)?;
    d.set_item("writers", writers)?;
    Ok(d)
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PyRecorder>()
}
