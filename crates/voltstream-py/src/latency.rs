//! `_core.LatencySession`: the low-latency mode's Rust session, driven from
//! Python (voltstream/latency/run.py). Steps: bind (the receiver, so the frame
//! size is known), `attach` (the GPU hand-off, with CuPy's handles, or the
//! host stand-in), `pointers` (for launching the persistent kernel), `start`
//! (the hot loop on its own pinned thread), `join`, `records`, `close`.

use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict};
use voltstream_core::latency::frame::FrameConfig;
use voltstream_core::latency::gpu::{CudaDriver, CudaOps};
use voltstream_core::latency::handoff::{DeviceBuffers, Handoff, HandoffConfig, Mode};
use voltstream_core::latency::layout::CONTROL_ABORT;
use voltstream_core::latency::session::{run_session, End, Limits, Live, Receiver};
use voltstream_core::latency::standin::{HostGpu, StandinOptions};
use voltstream_core::send::frames::bench_layout;
use voltstream_core::wire::{FormatSpec, LayoutField};

use crate::errors::{config_error, to_py};
use crate::format_args::{format_spec, FormatArgs};
use crate::layout::layout_field;
use crate::lock::lock;
use crate::sections::{need, section, set, spec_dict, Section};

const WHAT: &str = "latency spec";

/// The sections of `LatencySession(spec)`: `format` is a capture's (or
/// `{"name": "vlat", "payload_len": N}`, FrameSender's frames); `network`,
/// `frames` and `handoff` are the core's receiver, [`FrameConfig`] and
/// [`HandoffConfig`]. Needed: `network.bind`, `frames.packets_per_frame`,
/// `handoff.mode` and `handoff.records`; the rest keeps the core's defaults.
const LATENCY_SECTIONS: [&str; 4] = [
    FormatArgs::NAME,
    LatencyNetworkArgs::NAME,
    FrameArgs::NAME,
    HandoffArgs::NAME,
];

section! {
    /// Where frames arrive (a socket read in batches of `batch` packets).
    struct LatencyNetworkArgs("network") {
        bind: String,
        batch: usize,
    }
}

section! {
    /// How packets make frames.
    struct FrameArgs("frames") {
        packets_per_frame: usize,
        window: usize,
        timeout_us: u64,
        resync_frames: u64,
        #[pyo3(from_py_with = frame_field_arg)]
        frame_field: LayoutField,
        #[pyo3(from_py_with = send_time_arg)]
        send_time: LayoutField,
    }
}

section! {
    /// How frames reach the GPU (or the host stand-in).
    struct HandoffArgs("handoff") {
        mode: String,
        slots: usize,
        threads: u32,
        check_pattern: bool,
        write_combined: bool,
        records: usize,
        standin: bool,
    }
}

fn field_arg(value: &Bound<'_, PyAny>, what: &str) -> PyResult<Option<LayoutField>> {
    if value.is_none() {
        return Ok(None);
    }
    Ok(Some(layout_field(value.cast::<PyDict>()?, what)?))
}

fn frame_field_arg(value: &Bound<'_, PyAny>) -> PyResult<Option<LayoutField>> {
    field_arg(value, "frame_field")
}

fn send_time_arg(value: &Bound<'_, PyAny>) -> PyResult<Option<LayoutField>> {
    field_arg(value, "send_time")
}

/// The GPU side of a session: the real one or the host stand-in.
enum Hand {
    Cuda(Handoff<CudaOps>),
    Standin(Handoff<HostGpu>),
}

/// Everything the hot loop owns; moved to its thread and back.
struct Parts {
    rx: Receiver,
    hand: Option<Hand>,
}

enum State {
    Ready(Parts),
    Running(JoinHandle<(Parts, Result<End, String>)>),
    Done(Parts, Result<End, String>),
    Closed,
}

#[pyclass(name = "LatencySession")]
pub struct PyLatencySession {
    state: Mutex<State>,
    stop: Arc<AtomicBool>,
    /// The loop's counters as last published (every 100 ms, and at the end).
    live: Arc<Mutex<Live>>,
    frame_bytes: usize,
    local_addr: String,
    /// The hand-off as the spec says; `attach` gives it its launch shape.
    handoff: HandoffConfig,
    records: usize,
    standin: bool,
    /// Host address of the control block once attached (0 before): `abort()`
    /// writes it from Python's thread while the loop runs.
    control: Mutex<usize>,
}

fn duration(seconds: Option<f64>, what: &str) -> PyResult<Option<Duration>> {
    seconds
        .map(|s| {
            Duration::try_from_secs_f64(s).map_err(|_| {
                config_error(format!("{what} must be a non-negative number of seconds"))
            })
        })
        .transpose()
}

#[pymethods]
impl PyLatencySession {
    /// A session of `spec`, one dict of sections (see [`LATENCY_SECTIONS`]):
    /// binds the receiver; the core validates the frames and the hand-off.
    #[new]
    #[pyo3(signature = (spec, /))]
    fn new(spec: &Bound<'_, PyAny>) -> PyResult<Self> {
        let d = spec_dict(spec, WHAT, &LATENCY_SECTIONS)?;
        let net: LatencyNetworkArgs = section(&d, WHAT)?;
        let frames: FrameArgs = section(&d, WHAT)?;
        let hand: HandoffArgs = section(&d, WHAT)?;
        let fmt: FormatArgs = section(&d, WHAT)?;

        let mut frame = FrameConfig::new(need(
            frames.packets_per_frame,
            WHAT,
            "frames.packets_per_frame",
        )?);
        set(&mut frame.window, frames.window);
        if let Some(us) = frames.timeout_us {
            frame.timeout_ns = us.saturating_mul(1000);
        }
        set(&mut frame.resync_frames, frames.resync_frames);
        frame.frame_field = frames.frame_field;
        frame.send_time = frames.send_time;
        let spec = if fmt.name.as_deref() == Some("vlat") {
            // The built-in latency frame (FrameSender's), stamped by its sender.
            let payload_len = need(fmt.payload_len, WHAT, "format.payload_len for 'vlat'")?;
            let (layout, stamp) = bench_layout(payload_len);
            frame.send_time = frame.send_time.or(Some(stamp));
            FormatSpec::Layout(layout)
        } else {
            format_spec(fmt)?
        };
        let bind = need(net.bind, WHAT, "network.bind")?;
        let batch = net.batch.unwrap_or(Receiver::BATCH);
        let rx = Receiver::bind(&spec, &bind, frame, batch).map_err(to_py)?;
        let local_addr = rx.local_addr().map(|a| a.to_string()).unwrap_or_default();
        let frame_bytes = rx.frames.frame_bytes() as usize;
        let mode = need(hand.mode, WHAT, "handoff.mode")?;
        let mut handoff = HandoffConfig::new(Mode::parse(&mode).map_err(to_py)?, frame_bytes);
        set(&mut handoff.slots, hand.slots);
        set(&mut handoff.threads, hand.threads);
        set(&mut handoff.check_pattern, hand.check_pattern);
        set(&mut handoff.write_combined, hand.write_combined);
        handoff.validate().map_err(to_py)?;
        Ok(PyLatencySession {
            frame_bytes,
            state: Mutex::new(State::Ready(Parts { rx, hand: None })),
            stop: Arc::new(AtomicBool::new(false)),
            live: Arc::new(Mutex::new(Live::default())),
            local_addr,
            handoff,
            records: need(hand.records, WHAT, "handoff.records")?,
            standin: hand.standin.unwrap_or(false),
            control: Mutex::new(0),
        })
    }

    /// Payload bytes of a whole frame.
    #[getter]
    fn frame_bytes(&self) -> usize {
        self.frame_bytes
    }

    /// The bound address as "host:port".
    #[getter]
    fn local_addr(&self) -> String {
        self.local_addr.clone()
    }

    /// Builds the hand-off: allocates the host memory on the calling thread's
    /// CUDA context (CuPy's, current here) with CuPy's handles, or starts the
    /// host stand-in when the session was made with `standin=True`.
    #[pyo3(signature = (
        blocks, threads = None, context = 0, sum_frame = 0, copy_stream = 0, device_slots = 0,
        accum = 0
    ))]
    #[allow(clippy::too_many_arguments)]
    fn attach(
        &self,
        blocks: u32,
        threads: Option<u32>,
        context: usize,
        sum_frame: usize,
        copy_stream: usize,
        device_slots: u64,
        accum: u64,
    ) -> PyResult<()> {
        let mut state = lock(&self.state);
        let State::Ready(parts) = &mut *state else {
            return Err(config_error("attach() goes once, before start()".into()));
        };
        if parts.hand.is_some() {
            return Err(config_error("attach() goes once, before start()".into()));
        }
        let mut cfg = self.handoff;
        cfg.blocks = blocks;
        set(&mut cfg.threads, threads);
        let hand = if self.standin {
            Hand::Standin(
                Handoff::standin(cfg, StandinOptions::default(), self.records).map_err(to_py)?,
            )
        } else {
            let driver = CudaDriver::load().map_err(to_py)?;
            // SAFETY: the handles are CuPy's live context, kernel and stream,
            // kept alive by the Python side until close().
            let ops =
                unsafe { CudaOps::new(driver, context, sum_frame, copy_stream) }.map_err(to_py)?;
            let device = DeviceBuffers {
                slots: device_slots,
                accum,
            };
            Hand::Cuda(Handoff::new(ops, cfg, device, self.records).map_err(to_py)?)
        };
        let control = match &hand {
            Hand::Cuda(h) => h.control_host_ptr(),
            Hand::Standin(h) => h.control_host_ptr(),
        };
        *lock(&self.control) = control as usize;
        parts.hand = Some(hand);
        Ok(())
    }

    /// Device addresses and sizes for launching `latency_persistent`.
    fn pointers<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let state = lock(&self.state);
        let hand = match &*state {
            State::Ready(Parts { hand: Some(h), .. })
            | State::Done(Parts { hand: Some(h), .. }, _) => h,
            _ => return Err(config_error("pointers() needs attach() first".into())),
        };
        let d = PyDict::new(py);
        macro_rules! fill {
            ($h:expr) => {{
                d.set_item("mapped_slots", $h.mapped_slots_device_ptr())?;
                d.set_item("acks", $h.acks_device_ptr())?;
                d.set_item("control", $h.control_device_ptr())?;
                d.set_item("slot_stride", $h.slot_stride())?;
                d.set_item("payload_cap", $h.payload_cap())?;
            }};
        }
        match hand {
            Hand::Cuda(h) => fill!(h),
            Hand::Standin(h) => fill!(h),
        }
        Ok(d)
    }

    /// Starts the hot loop on a new thread (pinned to `cpu`); it ends after
    /// `frames` frames, `seconds`, `idle_s` without packets, or `stop()`.
    #[pyo3(signature = (cpu = None, frames = None, seconds = None, idle_s = None))]
    fn start(
        &self,
        cpu: Option<usize>,
        frames: Option<u64>,
        seconds: Option<f64>,
        idle_s: Option<f64>,
    ) -> PyResult<()> {
        let limits = Limits {
            frames,
            duration: duration(seconds, "seconds")?,
            idle: duration(idle_s, "idle_s")?,
        };
        let mut state = lock(&self.state);
        let parts = match std::mem::replace(&mut *state, State::Closed) {
            State::Ready(p) if p.hand.is_some() => p,
            other => {
                *state = other;
                return Err(config_error(
                    "start() needs attach() first, and runs once".into(),
                ));
            }
        };
        let stop = self.stop.clone();
        let live = self.live.clone();
        let handle = std::thread::Builder::new()
            .name("voltstream-latency".into())
            .spawn(move || {
                let mut parts = parts;
                let end = {
                    let Parts { rx, hand } = &mut parts;
                    match hand.as_mut() {
                        Some(Hand::Cuda(h)) => run_session(rx, h, cpu, limits, &stop, &live),
                        Some(Hand::Standin(h)) => run_session(rx, h, cpu, limits, &stop, &live),
                        None => unreachable!("checked before the thread started"),
                    }
                };
                (parts, end.map_err(|e| e.to_string()))
            })
            .map_err(|e| config_error(format!("cannot start the latency thread: {e}")))?;
        *state = State::Running(handle);
        Ok(())
    }

    fn running(&self) -> bool {
        matches!(&*lock(&self.state), State::Running(h) if !h.is_finished())
    }

    /// Asks the loop to end (it closes open frames, drains and stops the GPU).
    fn stop(&self) {
        self.stop.store(true, Ordering::Relaxed);
    }

    /// Tells a persistent kernel to return now (the abort word).
    fn abort(&self) {
        let control = *lock(&self.control);
        if control != 0 {
            // SAFETY: the control block lives until close(), which clears
            // `control` first; the kernel reads the word with acquire loads.
            unsafe { &*((control + CONTROL_ABORT) as *const AtomicU32) }
                .store(1, Ordering::Release);
        }
    }

    /// The report once the loop has ended (None while it runs, after waiting
    /// at most `timeout_s`): every counter and why it ended.
    fn join<'py>(&self, py: Python<'py>, timeout_s: f64) -> PyResult<Option<Bound<'py, PyDict>>> {
        let deadline = std::time::Instant::now() + Duration::from_secs_f64(timeout_s.max(0.0));
        loop {
            let finished = match &*lock(&self.state) {
                State::Running(h) => h.is_finished(),
                State::Done(..) => true,
                _ => return Err(config_error("join() needs start() first".into())),
            };
            if finished {
                break;
            }
            if std::time::Instant::now() >= deadline {
                return Ok(None);
            }
            py.detach(|| std::thread::sleep(Duration::from_millis(1)));
        }
        let mut state = lock(&self.state);
        if let State::Running(_) = &*state {
            let State::Running(h) = std::mem::replace(&mut *state, State::Closed) else {
                unreachable!()
            };
            let (parts, end) = h
                .join()
                .map_err(|_| config_error("the latency thread panicked".into()))?;
            *state = State::Done(parts, end);
        }
        let State::Done(_, end) = &*state else {
            unreachable!()
        };
        let d = counters(py, &lock(&self.live))?;
        match end {
            Ok(e) => d.set_item("end", e.as_str())?,
            Err(e) => {
                d.set_item("end", "error")?;
                d.set_item("error", e)?;
            }
        }
        Ok(Some(d))
    }

    /// Every counter as the loop last published it (every 0.1 s while it runs,
    /// and at its end): what `--metrics` shows live.
    fn stats<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        counters(py, &lock(&self.live))
    }

    /// Every acknowledged frame's record, packed (voltstream.latency.stats.RECORD_DTYPE).
    fn records<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyBytes>> {
        let state = lock(&self.state);
        let recs = match &*state {
            State::Done(
                Parts {
                    hand: Some(Hand::Cuda(h)),
                    ..
                },
                _,
            ) => h.records(),
            State::Done(
                Parts {
                    hand: Some(Hand::Standin(h)),
                    ..
                },
                _,
            ) => h.records(),
            _ => {
                return Err(config_error(
                    "records() needs the loop to have ended".into(),
                ))
            }
        };
        let mut out = Vec::with_capacity(recs.len() * 64);
        for r in recs {
            out.extend_from_slice(&r.seq.to_le_bytes());
            out.extend_from_slice(&r.frame.to_le_bytes());
            out.extend_from_slice(&r.status.to_le_bytes());
            out.extend_from_slice(&(r.ok as u32).to_le_bytes());
            for t in [
                r.t_send_ns,
                r.t_first_ns,
                r.t_done_ns,
                r.t_handed_ns,
                r.t_ack_ns,
            ] {
                out.extend_from_slice(&t.to_le_bytes());
            }
        }
        Ok(PyBytes::new(py, &out))
    }

    /// Frees the host memory. Only once the persistent kernel has returned
    /// (the caller's job: stop, else abort, then wait for its stream).
    fn close(&self) -> PyResult<()> {
        let mut state = lock(&self.state);
        if matches!(&*state, State::Running(_)) {
            return Err(config_error(
                "close() while the loop runs; stop() and join() first".into(),
            ));
        }
        *lock(&self.control) = 0;
        *state = State::Closed;
        Ok(())
    }
}

/// The counters of the assembler and of the hand-off.
fn counters<'py>(py: Python<'py>, live: &Live) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    let (f, c) = (&live.frames, &live.handoff);
    set_fields!(
        d,
        f,
        [
            received,
            dropped,
            duplicate,
            late,
            missing,
            malformed,
            truncated,
            foreign,
            frames_complete,
            frames_incomplete,
            frames_lost,
            frames_gpu_busy,
            resyncs
        ]
    );
    set_fields!(
        d,
        c,
        [
            frames_published,
            frames_acked,
            frames_skipped,
            sum_mismatch,
            torn,
            torn_words,
            ack_timeouts,
            records_dropped,
            gpu_errors,
            bad_writes
        ]
    );
    Ok(d)
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PyLatencySession>()?;
    Ok(())
}
