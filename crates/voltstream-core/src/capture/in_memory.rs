//! An engine fed from memory, for tests: the capture thread, the assembler and
//! the chunk ring run as in production, but the packets come from a channel
//! instead of a socket, so a test controls exactly what arrives and in which
//! order, without a network, sleeps or kernel buffers.
//!
//! A test keeps the [`Feeder`] and sends packets (and truncations, and kernel
//! drops to report) while the capture runs; [`crate::capture::Capture::stop`]
//! drains whatever is still queued, so every packet fed before `stop` is
//! counted. Allocates per packet: not a receive path, a test tool.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{channel, Receiver, RecvTimeoutError, Sender};
use std::sync::Arc;
use std::time::Duration;

use super::{Engine, Received, Sink};
use crate::Result;

/// Most packets one `recv_batch` passes on, like a `recvmmsg` batch.
const BATCH: usize = 64;

/// One item of the feed: what an engine can deliver.
enum Item {
    Packet(Vec<u8>),
    Truncated,
}

/// An [`Engine`] that delivers the packets its [`Feeder`] sent, in order.
pub struct InMemoryEngine {
    rx: Receiver<Item>,
    drops: Arc<AtomicU64>,
}

/// The sending side of an [`InMemoryEngine`]; clone it to feed from several
/// threads. Dropping every feeder ends the feed (the engine then reports
/// timeouts).
#[derive(Clone)]
pub struct Feeder {
    tx: Sender<Item>,
    drops: Arc<AtomicU64>,
}

impl InMemoryEngine {
    /// An engine and the feeder that supplies it.
    pub fn new() -> (InMemoryEngine, Feeder) {
        let (tx, rx) = channel();
        let drops = Arc::new(AtomicU64::new(0));
        let engine = InMemoryEngine {
            rx,
            drops: drops.clone(),
        };
        (engine, Feeder { tx, drops })
    }

    /// An engine that delivers `packets` and nothing else.
    pub fn from_packets<I, P>(packets: I) -> InMemoryEngine
    where
        I: IntoIterator<Item = P>,
        P: Into<Vec<u8>>,
    {
        let (engine, feeder) = InMemoryEngine::new();
        for p in packets {
            feeder.send(p);
        }
        engine
    }
}

impl Feeder {
    /// Queues one packet (its whole UDP payload).
    pub fn send(&self, packet: impl Into<Vec<u8>>) {
        // The engine gone means the capture ended: nothing to deliver to.
        let _ = self.tx.send(Item::Packet(packet.into()));
    }

    /// Queues a packet the engine could not receive whole.
    pub fn send_truncated(&self) {
        let _ = self.tx.send(Item::Truncated);
    }

    /// Adds `n` to the drops the engine reports as the kernel's.
    pub fn kernel_drops(&self, n: u64) {
        self.drops.fetch_add(n, Ordering::Relaxed);
    }
}

impl Engine for InMemoryEngine {
    fn recv_batch<F: Sink>(&mut self, timeout: Duration, mut sink: F) -> Result<usize> {
        let pass = |item: Item, sink: &mut F| match item {
            Item::Packet(p) => sink(Received::Packet(&p)),
            Item::Truncated => sink(Received::Truncated),
        };
        match self.rx.recv_timeout(timeout) {
            Ok(item) => pass(item, &mut sink),
            Err(RecvTimeoutError::Timeout) => return Ok(0),
            Err(RecvTimeoutError::Disconnected) => {
                // A closed feed returns at once; waiting out the timeout keeps
                // the capture thread from spinning on it until it is stopped.
                std::thread::sleep(timeout);
                return Ok(0);
            }
        }
        let mut n = 1;
        while n < BATCH {
            match self.rx.try_recv() {
                Ok(item) => pass(item, &mut sink),
                Err(_) => break,
            }
            n += 1;
        }
        Ok(n)
    }

    fn name(&self) -> &'static str {
        "in-memory"
    }

    fn kernel_drops(&mut self) -> u64 {
        self.drops.load(Ordering::Relaxed)
    }

    fn rcvbuf(&self) -> u64 {
        0
    }

    fn local_addr(&self) -> Option<SocketAddr> {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::capture::test_collect;

    #[test]
    fn delivers_what_it_was_fed_in_order_in_batches() {
        let (mut e, feed) = InMemoryEngine::new();
        for i in 0..100u8 {
            feed.send(vec![i; 3]);
        }
        feed.send_truncated();
        feed.kernel_drops(7);
        let n = e
            .recv_batch(Duration::from_millis(10), |_| {})
            .expect("in-memory never fails");
        assert_eq!(n, BATCH);
        let (got, truncated) = test_collect(&mut e, 100 - BATCH + 1);
        let want: Vec<Vec<u8>> = (BATCH as u8..100).map(|i| vec![i; 3]).collect();
        assert_eq!((got, truncated), (want, 1));
        assert_eq!(e.kernel_drops(), 7);
        assert_eq!(e.recv_batch(Duration::from_millis(1), |_| {}).unwrap(), 0);
        drop(feed);
        assert_eq!(e.recv_batch(Duration::from_millis(1), |_| {}).unwrap(), 0);
    }
}
