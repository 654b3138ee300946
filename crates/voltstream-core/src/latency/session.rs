//! The latency mode's hot loop: one pinned thread that never sleeps.
//!
//! Each turn: one non-blocking receive (`Engine::recv_batch` with a zero
//! timeout: the socket engine then calls `recvmmsg(MSG_DONTWAIT)` and never
//! `poll`), every packet into the [`FrameAssembler`] (which hands a frame to
//! the GPU the moment its last packet is placed), then a look at the
//! outstanding acknowledgements. An empty turn also lets the assembler close
//! frames whose deadline passed. The clock is read once per receive call:
//! that time is every packet's arrival time, taken right after the call
//! returned.
//!
//! Nothing here allocates; the records of every frame are preallocated by the
//! hand-off.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use super::frame::{FrameAssembler, FrameConfig, FrameCounters};
use super::gpu::GpuOps;
use super::handoff::{Handoff, HandoffCounters};
use super::{monotonic_ns, FrameSink};
use crate::capture::{pin_current_thread, Engine, Received, SocketConfig, SocketEngine};
use crate::wire::{FormatSpec, Locate, Locator};
use crate::Result;

/// What the loop needs of a hand-off beyond [`FrameSink`].
pub trait Handover: FrameSink {
    /// Takes every acknowledgement that has arrived, without waiting.
    fn poll_acks(&mut self, now_ns: u64);
    /// Frames handed over and not yet acknowledged.
    fn outstanding(&self) -> u64;
    /// The hand-off's counters, for the live snapshot.
    fn handoff_counters(&self) -> HandoffCounters;
}

/// The counters as the loop last published them (every [`LIVE_EVERY`]): what a
/// metrics server or status line reads while the loop runs.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Live {
    pub frames: FrameCounters,
    pub handoff: HandoffCounters,
}

/// How often the loop publishes [`Live`] (a `try_lock`: it never waits).
pub const LIVE_EVERY: Duration = Duration::from_millis(100);

/// When the loop ends (besides the stop flag).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Limits {
    /// After this many frames were closed (whole or incomplete).
    pub frames: Option<u64>,
    /// After this long.
    pub duration: Option<Duration>,
    /// After this long without a packet (once the first packet came).
    pub idle: Option<Duration>,
}

/// Why the loop ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum End {
    Frames,
    Duration,
    Idle,
    Stopped,
}

impl End {
    pub fn as_str(self) -> &'static str {
        match self {
            End::Frames => "frames",
            End::Duration => "duration",
            End::Idle => "idle",
            End::Stopped => "stopped",
        }
    }
}

/// How long the drain after the loop waits for the GPU's last acknowledgements.
pub const DRAIN: Duration = Duration::from_secs(2);

/// Runs the loop until a limit or `stop`; then closes the open frames and
/// waits (at most [`DRAIN`]) for the acknowledgements of every frame handed
/// over. The caller stops the GPU side afterwards.
pub fn run<E: Engine, L: Locate, H: Handover>(
    engine: &mut E,
    asm: &mut FrameAssembler<L>,
    hand: &mut H,
    limits: Limits,
    stop: &AtomicBool,
    live: &Mutex<Live>,
) -> Result<End> {
    let publish = |asm: &FrameAssembler<L>, hand: &H| {
        if let Ok(mut l) = live.try_lock() {
            *l = Live {
                frames: *asm.counters(),
                handoff: hand.handoff_counters(),
            };
        }
    };
    let mut next_live = 0u64;
    let start = monotonic_ns();
    let deadline = limits.duration.map(|d| start + d.as_nanos() as u64);
    let idle = limits.idle.map(|d| d.as_nanos() as u64);
    let mut last_packet = 0u64;
    let mut turns = 0u32;
    let end = loop {
        let mut now = 0;
        let n = engine.recv_batch(Duration::ZERO, |r: Received<'_>| {
            if now == 0 {
                now = monotonic_ns();
            }
            match r {
                Received::Packet(p) => asm.push(p, now, hand),
                Received::Truncated => asm.push_truncated(),
            }
        })?;
        if n == 0 {
            now = monotonic_ns();
            asm.poll(now, hand);
            hand.poll_acks(now);
        } else {
            last_packet = now;
            // A fresh stamp: an acknowledgement seen after placing packets must
            // not carry the receive call's time (that would hide the GPU's part).
            hand.poll_acks(monotonic_ns());
        }
        if let Some(f) = limits.frames {
            let c = asm.counters();
            if c.frames_complete + c.frames_incomplete + c.frames_gpu_busy >= f {
                break End::Frames;
            }
        }
        // The stop flag and the clock limits are looked at every 64 turns: an
        // atomic load per turn is cheap, but the turn is the latency.
        turns = turns.wrapping_add(1);
        if turns % 64 == 0 || n == 0 {
            if now >= next_live {
                publish(asm, hand);
                next_live = now + LIVE_EVERY.as_nanos() as u64;
            }
            if stop.load(Ordering::Relaxed) {
                break End::Stopped;
            }
            if deadline.is_some_and(|d| now >= d) {
                break End::Duration;
            }
            if idle.is_some_and(|i| last_packet != 0 && now.saturating_sub(last_packet) >= i) {
                break End::Idle;
            }
        }
    };
    asm.finish(monotonic_ns(), hand);
    let drain_until = monotonic_ns() + DRAIN.as_nanos() as u64;
    while hand.outstanding() > 0 && monotonic_ns() < drain_until {
        hand.poll_acks(monotonic_ns());
    }
    publish(asm, hand);
    Ok(end)
}

impl<G: GpuOps> Handover for Handoff<G> {
    fn poll_acks(&mut self, now_ns: u64) {
        Handoff::poll_acks(self, now_ns);
    }
    fn outstanding(&self) -> u64 {
        Handoff::outstanding(self)
    }
    fn handoff_counters(&self) -> HandoffCounters {
        self.counters()
    }
}

/// How long the GPU gets to acknowledge the stop frame.
pub const STOP_TIMEOUT: Duration = Duration::from_secs(2);

/// The receive side of a session: the socket engine and the frame assembler.
pub struct Receiver {
    pub engine: SocketEngine,
    pub frames: FrameAssembler<Locator>,
}

impl Receiver {
    /// Packets read per system call unless a session says otherwise: frames
    /// are small and one is in flight, so a short batch is enough.
    pub const BATCH: usize = 16;

    /// Binds `bind` (port 0: a free port) for packets of `format`, assembled
    /// into frames as `frame` says.
    pub fn bind(format: &FormatSpec, bind: &str, frame: FrameConfig, batch: usize) -> Result<Self> {
        let frames = FrameAssembler::new(format.locator()?, frame)?;
        let mut config = SocketConfig::new(bind);
        config.batch = batch;
        // Small frames, one in flight: a modest queue is plenty and stays in cache.
        config.net.queue_bytes = 8 << 20;
        Ok(Receiver {
            engine: SocketEngine::bind(&config)?,
            frames,
        })
    }

    pub fn local_addr(&self) -> Option<std::net::SocketAddr> {
        self.engine.local_addr()
    }
}

/// Runs one session on the calling thread: pins it to `cpu`, binds the GPU
/// context, runs [`run`], then hands the GPU the stop frame (persistent
/// modes) and waits at most [`STOP_TIMEOUT`] for its acknowledgement.
pub fn run_session<G: GpuOps>(
    rx: &mut Receiver,
    hand: &mut Handoff<G>,
    cpu: Option<usize>,
    limits: Limits,
    stop: &AtomicBool,
    live: &Mutex<Live>,
) -> Result<End> {
    if let Some(cpu) = cpu {
        pin_current_thread(cpu)?;
    }
    hand.gpu().bind_thread()?;
    let end = run(&mut rx.engine, &mut rx.frames, hand, limits, stop, live);
    // Stop the GPU side whatever happened: a persistent kernel left spinning
    // would hold the GPU until its idle limit.
    let stopped = hand.stop(STOP_TIMEOUT);
    if stopped.is_err() {
        hand.abort();
    }
    let end = end?;
    if let Some(e) = hand.take_error() {
        return Err(e);
    }
    stopped.map(|_| end)
}
