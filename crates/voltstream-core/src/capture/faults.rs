//! Fault injection for tests: one seeded, deterministic plan that drops,
//! duplicates, reorders, truncates, garbles or adds foreign packets to a packet
//! stream, and counts exactly what it did, so a test can assert the capture's
//! loss counters against what was injected instead of writing its own faults.
//!
//! The same plan works at two places:
//! - on a list of packets ([`Injector::apply`]), before they are sent over a
//!   real socket or pushed into an [`crate::assemble::Assembler`];
//! - around any engine ([`Faults`]), between the engine and the capture thread.
//!
//! Each input packet gets at most one fault. What each fault does to the
//! capture's counters, when the plan spares the first and last packets
//! ([`FaultPlan::between`]) and delays stay inside the assembler's window:
//!
//! | fault | delivered | counted |
//! |---|---|---|
//! | [`Fault::Drop`] | nothing | `missing` |
//! | [`Fault::Duplicate`] | the packet, then a copy | `duplicate` (`late` if the copy comes after its chunk left the window) |
//! | [`Fault::Delay`] | the packet, later | nothing (`late` beyond the window) |
//! | [`Fault::Truncate`] | [`Received::Truncated`], or the packet cut short | `malformed`, and the packet `missing` |
//! | [`Fault::Garbage`] | random bytes instead of the packet | `malformed` (formats with a fixed length), and the packet `missing` |
//! | [`Fault::Foreign`] | the packet, then a foreign one made from it | `foreign` |
//!
//! Allocates per packet: a test tool, not a receive path.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::ops::Range;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::{Engine, Received, Sink};
use crate::{Error, Result};

/// What happens to one packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// Never delivered.
    Drop,
    /// Delivered, and a copy of it after the next `delay` input packets (0:
    /// right after).
    Duplicate { delay: usize },
    /// Delivered after the next `n` input packets (reordering): at most `n`
    /// packets sent after it arrive before it.
    Delay(usize),
    /// Replaced by a truncation: [`Received::Truncated`], or the packet cut to
    /// the length set by [`FaultPlan::cut_to`] (for packets sent over a socket).
    Truncate,
    /// Replaced by garbage (see [`FaultPlan::garbage`]).
    Garbage,
    /// Delivered, followed by a foreign packet made from it (see
    /// [`FaultPlan::foreign`]).
    Foreign,
}

/// What an injector did, counted once per fault.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Injected {
    /// Input packets seen.
    pub packets: u64,
    /// Items passed on (packets, copies, foreign packets, truncations).
    pub delivered: u64,
    pub dropped: u64,
    pub duplicated: u64,
    pub delayed: u64,
    pub truncated: u64,
    pub garbage: u64,
    pub foreign: u64,
}

impl Injected {
    /// Input packets that arrive as themselves (not dropped, truncated or
    /// replaced by garbage): what a capture counts `received` when nothing is late.
    pub fn intact(&self) -> u64 {
        self.packets - self.dropped - self.truncated - self.garbage
    }
}

/// One item an injector passes on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Delivered {
    Packet(Vec<u8>),
    /// A packet the engine could not receive whole.
    Truncated,
}

impl Delivered {
    /// As an engine hands it to the capture thread.
    pub fn received(&self) -> Received<'_> {
        match self {
            Delivered::Packet(p) => Received::Packet(p),
            Delivered::Truncated => Received::Truncated,
        }
    }

    /// The bytes to send over a socket; `None` for a reported truncation.
    pub fn bytes(&self) -> Option<&[u8]> {
        match self {
            Delivered::Packet(p) => Some(p),
            Delivered::Truncated => None,
        }
    }
}

/// Makes a packet from the one it replaces or follows.
type Maker = Box<dyn FnMut(&[u8]) -> Vec<u8> + Send>;

/// Which faults, how often, where: random rates per packet plus faults placed
/// at given input positions, all from one seed.
///
/// ```
/// use voltstream_core::capture::{Fault, FaultPlan};
/// let plan = FaultPlan::new(7)
///     .rate(Fault::Drop, 0.02)
///     .rate(Fault::Delay(8), 0.05) // by 1 to 8 packets
///     .rate(Fault::Foreign, 0.01)
///     .foreign(|p| [&p[..8], &9u16.to_be_bytes(), &p[10..]].concat())
///     .at(0, Fault::Duplicate { delay: 0 });
/// let sent = plan.injector().unwrap().apply([[0u8; 12], [1; 12]]);
/// assert_eq!(sent.len(), 3);
/// ```
pub struct FaultPlan {
    seed: u64,
    /// Per-packet probability of each kind of fault, with its largest delay.
    rates: Vec<(Fault, f64)>,
    between: Range<u64>,
    script: BTreeMap<u64, Fault>,
    cut: Option<usize>,
    garbage: Option<Maker>,
    foreign: Option<Maker>,
}

impl FaultPlan {
    /// No faults yet; `seed` fixes every random choice.
    pub fn new(seed: u64) -> Self {
        FaultPlan {
            seed,
            rates: Vec::new(),
            between: 0..u64::MAX,
            script: BTreeMap::new(),
            cut: None,
            garbage: None,
            foreign: None,
        }
    }

    /// Gives each input packet the probability `p` of `fault` (replacing an
    /// earlier rate of the same kind). Delays are drawn up to the one given:
    /// `Fault::Delay(8)` delays by 1 to 8 packets, `Fault::Duplicate { delay: 8 }`
    /// sends the copy 0 to 8 packets later.
    pub fn rate(mut self, fault: Fault, p: f64) -> Self {
        let same = std::mem::discriminant(&fault);
        self.rates.retain(|r| std::mem::discriminant(&r.0) != same);
        self.rates.push((fault, p));
        self
    }

    /// What a [`Fault::Foreign`] adds after its packet: `make(packet)`, a packet
    /// of another station, stream or format (the plan cannot know what is
    /// foreign to the capture under test).
    pub fn foreign(mut self, make: impl FnMut(&[u8]) -> Vec<u8> + Send + 'static) -> Self {
        self.foreign = Some(Box::new(make));
        self
    }

    /// Random faults only for input packets at positions in `positions` (0 is
    /// the first packet): sparing the first packet keeps the capture's timeline
    /// start, sparing the last its end, so the counters are exact.
    pub fn between(mut self, positions: Range<u64>) -> Self {
        self.between = positions;
        self
    }

    /// `fault` for the input packet at `position`, whatever the rates say.
    pub fn at(mut self, position: u64, fault: Fault) -> Self {
        self.script.insert(position, fault);
        self
    }

    /// What a [`Fault::Garbage`] puts in its packet's place: `make(packet)`.
    /// The default, random bytes one longer than the packet, is malformed for
    /// formats with a fixed packet length; formats that check a magic number
    /// may count random bytes foreign instead.
    pub fn garbage(mut self, make: impl FnMut(&[u8]) -> Vec<u8> + Send + 'static) -> Self {
        self.garbage = Some(Box::new(make));
        self
    }

    /// Truncation cuts the packet to at most `len` bytes (fewer than it has)
    /// instead of reporting [`Received::Truncated`]: a short datagram, as a
    /// socket would see it.
    pub fn cut_to(mut self, len: usize) -> Self {
        self.cut = Some(len);
        self
    }

    /// Checks the plan and starts applying it.
    pub fn injector(self) -> Result<Injector> {
        let bad = |why: String| Err(Error::Config(format!("fault plan: {why}")));
        if let Some((_, p)) = self.rates.iter().find(|r| !(0.0..=1.0).contains(&r.1)) {
            return bad(format!("a rate of {p} is not a probability (0 to 1)"));
        }
        let sum: f64 = self.rates.iter().map(|r| r.1).sum();
        if sum > 1.0 + 1e-9 {
            return bad(format!(
                "the rates add up to {sum}: each packet gets at most one fault, lower them"
            ));
        }
        if self.rates.iter().any(|r| r.0 == Fault::Delay(0)) {
            return bad("reordering needs a delay of at least 1 packet".into());
        }
        let foreign = |f: &Fault| *f == Fault::Foreign;
        let wants_foreign =
            self.script.values().any(foreign) || self.rates.iter().any(|r| foreign(&r.0));
        if wants_foreign && self.foreign.is_none() {
            return bad("Fault::Foreign needs a maker: call FaultPlan::foreign".into());
        }
        Ok(Injector {
            // xorshift has one fixed point, 0.
            rng: Rng(self.seed ^ 0x9e37_79b9_7f4a_7c15),
            plan: self,
            seen: 0,
            held: Vec::new(),
            injected: Injected::default(),
            log: Vec::new(),
        })
    }
}

/// Small deterministic generator (xorshift64*), so a seed reproduces a run.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// Uniform in [0, 1).
    fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

/// A fault plan being applied to a packet stream, packet by packet.
pub struct Injector {
    plan: FaultPlan,
    rng: Rng,
    /// Input packets seen (the next one's position).
    seen: u64,
    /// Delayed items and the value of `seen` at which they are due, in due
    /// order (ties in the order they were delayed).
    held: Vec<(u64, Delivered)>,
    injected: Injected,
    log: Vec<(u64, Fault)>,
}

impl Injector {
    /// Applies the plan to the next input packet, passing what results to `out`
    /// (possibly nothing, possibly earlier packets that were delayed).
    pub fn push(&mut self, packet: &[u8], out: &mut dyn FnMut(Delivered)) {
        let position = self.seen;
        self.seen += 1;
        self.injected.packets += 1;
        let fault = match self.plan.script.get(&position) {
            Some(&f) => Some(f),
            None if self.plan.between.contains(&position) => self.draw(),
            None => None,
        };
        match fault {
            Some(fault) => self.inject(position, fault, packet, out),
            None => self.emit(Delivered::Packet(packet.to_vec()), out),
        }
        // Delays count input packets, so a delayed packet's displacement is
        // bounded whatever else the plan delays or drops.
        while self.held.first().is_some_and(|h| h.0 <= self.seen) {
            let (_, item) = self.held.remove(0);
            self.emit(item, out);
        }
    }

    fn inject(
        &mut self,
        position: u64,
        fault: Fault,
        packet: &[u8],
        out: &mut dyn FnMut(Delivered),
    ) {
        self.log.push((position, fault));
        match fault {
            Fault::Drop => self.injected.dropped += 1,
            Fault::Duplicate { delay } => {
                self.injected.duplicated += 1;
                self.emit(Delivered::Packet(packet.to_vec()), out);
                self.later(delay, Delivered::Packet(packet.to_vec()), out);
            }
            Fault::Delay(n) => {
                self.injected.delayed += 1;
                self.later(n, Delivered::Packet(packet.to_vec()), out);
            }
            Fault::Truncate => {
                self.injected.truncated += 1;
                let cut = match self.plan.cut {
                    Some(len) => Delivered::Packet(
                        packet[..len.min(packet.len().saturating_sub(1))].to_vec(),
                    ),
                    None => Delivered::Truncated,
                };
                self.emit(cut, out);
            }
            Fault::Garbage => {
                self.injected.garbage += 1;
                let bytes = match &mut self.plan.garbage {
                    Some(make) => make(packet),
                    None => (0..=packet.len()).map(|_| self.rng.next() as u8).collect(),
                };
                self.emit(Delivered::Packet(bytes), out);
            }
            Fault::Foreign => {
                self.injected.foreign += 1;
                self.emit(Delivered::Packet(packet.to_vec()), out);
                // `injector` checked that a Foreign fault has its maker.
                if let Some(make) = &mut self.plan.foreign {
                    let foreign = make(packet);
                    self.emit(Delivered::Packet(foreign), out);
                }
            }
        }
    }

    /// Passes an item on untouched (an engine's own truncations).
    pub fn pass(&mut self, item: Delivered, out: &mut dyn FnMut(Delivered)) {
        self.emit(item, out);
    }

    /// Passes on every delayed item still held, in the order they were due:
    /// the end of the stream (or a quiet moment) releases them.
    pub fn finish(&mut self, out: &mut dyn FnMut(Delivered)) {
        while !self.held.is_empty() {
            let (_, item) = self.held.remove(0);
            self.emit(item, out);
        }
    }

    /// Applies the plan to a whole list of packets, delayed ones released at the end.
    pub fn apply<I, P>(&mut self, packets: I) -> Vec<Delivered>
    where
        I: IntoIterator<Item = P>,
        P: AsRef<[u8]>,
    {
        let mut got = Vec::new();
        for p in packets {
            self.push(p.as_ref(), &mut |d| got.push(d));
        }
        self.finish(&mut |d| got.push(d));
        got
    }

    /// Counts of what was injected so far.
    pub fn injected(&self) -> Injected {
        self.injected
    }

    /// Every fault applied: (input position, fault), in input order.
    pub fn log(&self) -> &[(u64, Fault)] {
        &self.log
    }

    /// Delayed items not yet passed on.
    pub fn held(&self) -> usize {
        self.held.len()
    }

    fn draw(&mut self) -> Option<Fault> {
        let r = self.rng.unit();
        let mut edge = 0.0;
        let &(fault, _) = self.plan.rates.iter().find(|&&(_, p)| {
            edge += p;
            r < edge
        })?;
        Some(match fault {
            Fault::Duplicate { delay } => Fault::Duplicate {
                delay: self.rng.below(delay + 1),
            },
            Fault::Delay(n) => Fault::Delay(1 + self.rng.below(n)),
            other => other,
        })
    }

    fn later(&mut self, n: usize, item: Delivered, out: &mut dyn FnMut(Delivered)) {
        if n == 0 {
            return self.emit(item, out);
        }
        let due = self.seen + n as u64;
        // Stay ordered by due time, ties in arrival order.
        let at = self.held.partition_point(|h| h.0 <= due);
        self.held.insert(at, (due, item));
    }

    fn emit(&mut self, item: Delivered, out: &mut dyn FnMut(Delivered)) {
        out(item);
        self.injected.delivered += 1;
    }
}

/// What a [`Faults`] engine injected, readable from the test while the capture
/// thread owns the engine; updated after every batch.
#[derive(Clone, Default)]
pub struct FaultReport(Arc<Mutex<Reported>>);

/// The counts, and the log of faults applied.
type Reported = (Injected, Vec<(u64, Fault)>);

impl FaultReport {
    /// Counts of what was injected so far.
    pub fn injected(&self) -> Injected {
        self.lock().0
    }

    /// Every fault applied so far: (input position, fault), in input order.
    pub fn log(&self) -> Vec<(u64, Fault)> {
        self.lock().1.clone()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Reported> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// Wraps any engine and applies a [`FaultPlan`] to what it receives, between
/// the engine and the capture thread. The inner engine's truncations pass
/// untouched; delayed packets still held are released when the inner engine
/// has nothing (so a capture's stop drains them).
pub struct Faults<E: Engine> {
    inner: E,
    injector: Injector,
    batch: Vec<Delivered>,
    report: FaultReport,
}

impl<E: Engine> Faults<E> {
    pub fn new(inner: E, plan: FaultPlan) -> Result<Self> {
        Ok(Faults {
            inner,
            injector: plan.injector()?,
            batch: Vec::new(),
            report: FaultReport::default(),
        })
    }

    /// A handle on what was injected, for after the engine moved to its thread.
    pub fn report(&self) -> FaultReport {
        self.report.clone()
    }
}

impl<E: Engine> Engine for Faults<E> {
    fn recv_batch<F: Sink>(&mut self, timeout: Duration, mut sink: F) -> Result<usize> {
        let (injector, batch) = (&mut self.injector, &mut self.batch);
        let n = self.inner.recv_batch(timeout, |p| match p {
            Received::Packet(b) => injector.push(b, &mut |d| batch.push(d)),
            Received::Truncated => injector.pass(Delivered::Truncated, &mut |d| batch.push(d)),
        })?;
        if n == 0 {
            injector.finish(&mut |d| batch.push(d));
        }
        let delivered = batch.len();
        for item in batch.drain(..) {
            sink(item.received());
        }
        let mut report = self.report.lock();
        report.0 = self.injector.injected();
        let new = &self.injector.log()[report.1.len()..];
        report.1.extend_from_slice(new);
        Ok(delivered)
    }

    // The rest is the inner engine's: faults change what arrives, not where.
    fn name(&self) -> &'static str {
        self.inner.name()
    }

    fn interface(&self) -> Option<&str> {
        self.inner.interface()
    }

    fn local_addr(&self) -> Option<SocketAddr> {
        self.inner.local_addr()
    }

    fn rcvbuf(&self) -> u64 {
        self.inner.rcvbuf()
    }

    fn kernel_drops(&mut self) -> u64 {
        self.inner.kernel_drops()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn packets(n: u32) -> Vec<Vec<u8>> {
        (0..n).map(|i| i.to_be_bytes().to_vec()).collect()
    }

    fn number(d: &Delivered) -> Option<u32> {
        let b = d.bytes()?;
        Some(u32::from_be_bytes(b.try_into().ok()?))
    }

    fn mixed(seed: u64) -> FaultPlan {
        FaultPlan::new(seed)
            .rate(Fault::Drop, 0.05)
            .rate(Fault::Duplicate { delay: 6 }, 0.05)
            .rate(Fault::Delay(6), 0.1)
            .rate(Fault::Truncate, 0.05)
            .rate(Fault::Garbage, 0.05)
            .rate(Fault::Foreign, 0.05)
            .foreign(|p| [p, b"far"].concat())
    }

    #[test]
    fn a_seed_reproduces_the_run_and_counts_match_the_log() {
        let run = |seed| {
            let mut inj = mixed(seed).injector().unwrap();
            (inj.apply(packets(2000)), inj.injected(), inj.log().to_vec())
        };
        let (out, n, log) = run(7);
        assert_eq!(run(7).0, out);
        assert_ne!(run(8).0, out);
        let count = |f: fn(&Fault) -> bool| log.iter().filter(|l| f(&l.1)).count() as u64;
        assert_eq!(n.dropped, count(|f| *f == Fault::Drop));
        assert_eq!(
            n.duplicated,
            count(|f| matches!(f, Fault::Duplicate { .. }))
        );
        assert_eq!(n.delayed, count(|f| matches!(f, Fault::Delay(_))));
        assert_eq!(n.truncated, count(|f| *f == Fault::Truncate));
        assert_eq!(n.garbage, count(|f| *f == Fault::Garbage));
        assert_eq!(n.foreign, count(|f| *f == Fault::Foreign));
        // Each kind happens, at about its rate.
        for k in [n.dropped, n.duplicated, n.truncated, n.garbage, n.foreign] {
            assert!((50..150).contains(&k), "{n:?}");
        }
        assert!((150..250).contains(&n.delayed), "{n:?}");
        assert_eq!(n.packets, 2000);
        assert_eq!(out.len() as u64, n.delivered);
        assert_eq!(n.delivered, 2000 - n.dropped + n.duplicated + n.foreign);
        let truncations = out.iter().filter(|d| **d == Delivered::Truncated).count();
        assert_eq!(truncations as u64, n.truncated);
        let foreign = out
            .iter()
            .filter(|d| d.bytes().is_some_and(|b| b.ends_with(b"far")));
        assert_eq!(foreign.count() as u64, n.foreign);
        // Garbage: one byte longer than the packet, and not the packet.
        let odd = out
            .iter()
            .filter(|d| d.bytes().is_some_and(|b| b.len() == 5));
        assert_eq!(odd.count() as u64, n.garbage);
    }

    #[test]
    fn delays_stay_inside_the_window_and_lose_nothing() {
        let mut inj = FaultPlan::new(3)
            .rate(Fault::Delay(5), 0.3)
            .rate(Fault::Duplicate { delay: 5 }, 0.1)
            .injector()
            .unwrap();
        let out = inj.apply(packets(1000));
        let n = inj.injected();
        assert!(n.delayed > 200 && n.duplicated > 50, "{n:?}");
        let got: Vec<u32> = out.iter().map(|d| number(d).unwrap()).collect();
        let mut sorted = got.clone();
        sorted.sort();
        sorted.dedup();
        assert_eq!(sorted, (0..1000).collect::<Vec<_>>());
        assert_eq!(got.len() as u64, 1000 + n.duplicated);
        // A delayed packet waits for `window` input packets at most: no more
        // packets sent after it overtake it.
        let mut seen = std::collections::BTreeSet::new();
        for &p in &got {
            if seen.insert(p) {
                let overtaken = seen.range(p + 1..).count();
                assert!(overtaken <= 5, "packet {p} overtaken by {overtaken}");
            }
        }
    }

    #[test]
    fn scripted_faults_land_where_they_are_placed() {
        let mut inj = FaultPlan::new(0)
            .at(1, Fault::Drop)
            .at(2, Fault::Delay(2))
            .at(4, Fault::Duplicate { delay: 0 })
            .at(5, Fault::Truncate)
            .at(6, Fault::Foreign)
            .at(7, Fault::Garbage)
            .cut_to(2)
            .foreign(|_| b"x".to_vec())
            .garbage(|_| b"junk".to_vec())
            .injector()
            .unwrap();
        let out: Vec<Vec<u8>> = inj
            .apply(packets(9))
            .iter()
            .map(|d| d.bytes().unwrap().to_vec())
            .collect();
        let p = |i: u32| i.to_be_bytes().to_vec();
        let want = [
            p(0),
            p(3),
            p(4),
            p(4),
            p(2),
            vec![0, 0],
            p(6),
            b"x".to_vec(),
            b"junk".to_vec(),
            p(8),
        ];
        assert_eq!(out, want);
        assert_eq!(inj.log().len(), 6);
    }

    #[test]
    fn random_faults_spare_positions_outside_the_range() {
        let mut inj = FaultPlan::new(1)
            .rate(Fault::Drop, 1.0)
            .between(2..5)
            .injector()
            .unwrap();
        let out = inj.apply(packets(7));
        let got: Vec<u32> = out.iter().map(|d| number(d).unwrap()).collect();
        assert_eq!(got, [0, 1, 5, 6]);
        assert_eq!(inj.injected().dropped, 3);
    }

    #[test]
    fn bad_plans_are_clear_errors() {
        let e = |plan: FaultPlan| plan.injector().err().unwrap().to_string();
        let drop = |p| FaultPlan::new(0).rate(Fault::Drop, p);
        assert!(e(drop(1.5)).contains("not a probability"));
        assert!(e(drop(0.6).rate(Fault::Garbage, 0.6)).contains("add up to"));
        // A later rate of a kind replaces the earlier one.
        assert!(drop(0.6).rate(Fault::Drop, 0.3).injector().is_ok());
        assert!(e(FaultPlan::new(0).rate(Fault::Delay(0), 0.1)).contains("at least 1"));
        let foreign = FaultPlan::new(0).rate(Fault::Foreign, 0.1);
        assert!(e(foreign).contains("FaultPlan::foreign"));
        assert!(e(FaultPlan::new(0).at(3, Fault::Foreign)).contains("FaultPlan::foreign"));
    }

    #[test]
    fn the_wrapper_faults_an_engine_and_releases_held_packets_when_idle() {
        use crate::capture::InMemoryEngine;
        let (inner, feed) = InMemoryEngine::new();
        for p in packets(300) {
            feed.send(p);
        }
        feed.send_truncated();
        feed.kernel_drops(4);
        let plan = FaultPlan::new(9)
            .rate(Fault::Drop, 0.1)
            .rate(Fault::Delay(4), 0.2);
        let mut e = Faults::new(inner, plan).unwrap();
        let report = e.report();
        let (mut got, mut truncated) = (Vec::new(), 0);
        // The first empty batch releases what is held, the second is empty.
        while e
            .recv_batch(Duration::from_millis(1), |p| match p {
                Received::Packet(b) => got.push(b.to_vec()),
                Received::Truncated => truncated += 1,
            })
            .unwrap()
            > 0
        {}
        let n = report.injected();
        assert_eq!(report.log().len() as u64, n.dropped + n.delayed);
        assert!(n.dropped > 10 && n.delayed > 30, "{n:?}");
        assert_eq!(truncated, 1);
        assert_eq!(got.len() as u64, 300 - n.dropped);
        assert_eq!(e.kernel_drops(), 4);
        assert_eq!(e.name(), "in-memory");
    }
}
