//! `_core.Recorder`: records a running `Capture` to files on many disks
//! (voltstream-core's `record`); only conversion here.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList};
use voltstream_core::record::{Forward, Layout, Piece, RecordReport, RecordSpec, Recorder};

use crate::capture::PyCapture;
use crate::chunk::PyChunk;
use crate::errors::{capture_error, config_error, to_py};
use crate::lock::lock;

/// Records every chunk of a started capture: one writer thread per directory,
/// in the layout asked (vbs, mark6, vdif, dada); never holds the capture back
/// (chunks no disk has room for are counted `chunks_unwritten`). Call
/// `finish()` after the capture's `stop()`. With `forward_chunks` > 0, every
/// chunk written is then passed on, in order, to `next_chunk()` (one more
/// consumer of the same capture, e.g. a fold) instead of back to the pool.
#[pyclass(module = "voltstream._core", name = "Recorder", frozen)]
pub struct PyRecorder {
    forward: Option<Arc<Forward>>,
    /// The capture's stream ids of each capture thread's chunk positions.
    thread_streams: Vec<Vec<usize>>,
    running: Mutex<Option<Recorder>>,
    last: Mutex<Option<RecordReport>>,
    /// Every piece, kept when the recorder finishes.
    pieces: Mutex<Vec<Piece>>,
}

#[pymethods]
impl PyRecorder {
    #[new]
    #[pyo3(signature = (
        capture, dirs, scan, layout = "vbs", queue_chunks = 2, file_chunks = 16,
        dada_header = None, frames_per_second = None, packet_format = 2, forward_chunks = 0,
        dada_headers = None
    ))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        capture: &PyCapture,
        dirs: Vec<PathBuf>,
        scan: String,
        layout: &str,
        queue_chunks: usize,
        file_chunks: usize,
        dada_header: Option<String>,
        frames_per_second: Option<u32>,
        packet_format: i32,
        forward_chunks: usize,
        dada_headers: Option<Vec<String>>,
    ) -> PyResult<Self> {
        let layout = match layout {
            "vbs" => Layout::Vbs,
            "mark6" => Layout::Mark6 { packet_format },
            "vdif" => Layout::Vdif {
                frames_per_second: frames_per_second.unwrap_or(0),
            },
            "dada" => Layout::Dada {
                headers: dada_headers.unwrap_or_else(|| vec![dada_header.unwrap_or_default()]),
            },
            other => {
                return Err(config_error(format!(
                    "layout {other:?}: use vbs, mark6, vdif or dada"
                )))
            }
        };
        if layout.whole_packets() != capture.whole_packets() {
            let want = if layout.whole_packets() {
                "True"
            } else {
                "False"
            };
            return Err(config_error(format!(
                "the {} layout needs a capture with whole_packets={want}",
                layout.name()
            )));
        }
        let group = capture.running_group()?;
        let consumers = (0..group.threads().len())
            .filter_map(|t| group.consumer(t))
            .collect();
        let mut spec = RecordSpec::new(dirs, scan);
        spec.queue_chunks = queue_chunks;
        spec.file_chunks = file_chunks;
        if frames_per_second == Some(0) {
            return Err(config_error("frames_per_second must be positive".into()));
        }
        spec.vdif_fill = frames_per_second;
        spec.layout = layout;
        spec.forward_chunks = forward_chunks;
        let thread_streams = capture.thread_streams();
        let rec = Recorder::start(consumers, thread_streams.clone(), &spec).map_err(to_py)?;
        Ok(PyRecorder {
            forward: rec.forwarded(),
            thread_streams,
            running: Mutex::new(Some(rec)),
            last: Mutex::new(None),
            pieces: Mutex::new(Vec::new()),
        })
    }

    /// The finished files (Mark6: blocks) from position `start` of the log on,
    /// each a dict: path, streams, number, first_index, packets, offset, bytes.
    #[pyo3(signature = (start = 0))]
    fn pieces<'py>(&self, py: Python<'py>, start: usize) -> PyResult<Bound<'py, PyList>> {
        let pieces = match lock(&self.running).as_ref() {
            Some(rec) => rec.pieces(start),
            None => lock(&self.pieces)
                .get(start..)
                .map(<[Piece]>::to_vec)
                .unwrap_or_default(),
        };
        let list = PyList::empty(py);
        for p in &pieces {
            let d = PyDict::new(py);
            d.set_item("path", p.path.to_string_lossy())?;
            set_fields!(
                d,
                p,
                [
                    streams,
                    number,
                    first_index,
                    packets,
                    offset,
                    bytes,
                    tail_absent
                ]
            );
            list.append(d)?;
        }
        Ok(list)
    }

    /// Waits up to `timeout_s` seconds for the next chunk written and passed on
    /// (`forward_chunks` > 0), in the order the recorder took them; None on
    /// timeout, or once `finish()` has run and every chunk was taken. Release
    /// it soon: until then it holds a chunk of the capture's pool.
    fn next_chunk(&self, py: Python<'_>, timeout_s: f64) -> PyResult<Option<PyChunk>> {
        if !(timeout_s >= 0.0 && timeout_s.is_finite()) {
            return Err(config_error(format!(
                "timeout_s must be a finite number of seconds >= 0, got {timeout_s}"
            )));
        }
        let Some(forward) = &self.forward else {
            return Err(config_error(
                "this recorder passes no chunks on: create it with forward_chunks > 0".into(),
            ));
        };
        let deadline = Instant::now() + Duration::from_secs_f64(timeout_s.min(1e9));
        loop {
            // Short waits, so that Ctrl-C is seen.
            let left = deadline.saturating_duration_since(Instant::now());
            let slice = left.min(Duration::from_millis(100));
            if let Some(c) = py.detach(|| forward.pop(slice)) {
                let streams = self.thread_streams.get(c.ring).cloned().unwrap_or_default();
                return Ok(Some(PyChunk::new(c.lease, c.ring, streams)));
            }
            py.check_signals()?;
            if left <= slice || forward.is_finished() {
                return Ok(None);
            }
        }
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
            let (report, pieces) = py.detach(|| rec.finish());
            *lock(&self.last) = Some(report);
            *lock(&self.pieces) = pieces;
        }
        self.report(py)
    }
}

fn report_dict<'py>(py: Python<'py>, r: &RecordReport) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    set_fields!(
        d,
        r,
        [
            chunks_written,
            bytes_written,
            chunks_unwritten,
            chunks_forwarded,
            chunks_not_forwarded
        ]
    );
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
                filled_packets,
                failed
            ]
        );
        writers.append(wd)?;
    }
    d.set_item(
        "chunks_lost",
        r.writers.iter().map(|w| w.lost_chunks).sum::<u64>(),
    )?;
    let zeroed: u64 = r.writers.iter().map(|w| w.filled_packets).sum();
    d.set_item("filled_packets", zeroed)?;
    d.set_item("writers", writers)?;
    Ok(d)
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PyRecorder>()
}
