//! The recorder's forward stage: a chunk, once written, is passed on (in the
//! order the dispatcher took chunks) to one more consumer in the same process,
//! e.g. a live fold, instead of going back to the pool; it goes back when that
//! consumer drops it. Two consumers popping one capture's rings would split the
//! chunks between them; this way both see every chunk, the recorder first
//! (docs/architecture.md, "One capture, several consumers").
//!
//! Contract: the forward stage never makes the recorder wait. Writers finish
//! chunks out of order (several disks), so chunks are put back in dispatch order
//! here; a chunk that was never written (unwritten, lost with a disk) is a hole
//! the consumer sees as a gap in chunk ids. When the consumer is slow, the queue
//! for it (`depth` chunks) or the reorder buffer (`depth` chunks) fills, and
//! further chunks go back to the pool at once, counted `not_forwarded`: a slow
//! consumer costs counted chunks of its own, never packets or recorded chunks,
//! as long as the pool holds `2 * depth` chunks more than the recorder needs.

use std::collections::{BTreeMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::Duration;

use crate::ring::{take_or_wait, Lease};

/// A written chunk on its way on, with the capture thread (ring) it came from.
pub struct Forwarded {
    pub lease: Lease,
    pub ring: usize,
}

#[derive(Default)]
struct State {
    /// The dispatch number the consumer gets next.
    next: u64,
    /// Settled chunks past `next` (None: never written), waiting for `next`.
    pending: BTreeMap<u64, Option<Forwarded>>,
    /// Chunks ready for the consumer, in dispatch order.
    ready: VecDeque<Forwarded>,
    closed: bool,
}

/// The queue between the recorder's writers and one more consumer.
pub struct Forward {
    depth: usize,
    state: Mutex<State>,
    ready: Condvar,
    forwarded: AtomicU64,
    not_forwarded: AtomicU64,
}

impl Forward {
    /// A forward stage holding at most `depth` chunks ready and `depth` waiting
    /// for an earlier one (`depth` at least 1).
    pub fn new(depth: usize) -> Self {
        Forward {
            depth: depth.max(1),
            state: Mutex::new(State::default()),
            ready: Condvar::new(),
            forwarded: AtomicU64::new(0),
            not_forwarded: AtomicU64::new(0),
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // Each operation leaves the queues consistent: poisoning is ignored.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Chunk `number`'s fate: written (`Some`, to pass on) or not (`None`). Every
    /// number the dispatcher gave must be settled once, or later chunks wait
    /// until `close`.
    pub fn settle(&self, number: u64, chunk: Option<Forwarded>) {
        let mut s = self.lock();
        let chunk = match chunk {
            // The reorder buffer is full: this one goes back (a slow earlier write
            // must not take the pool with it).
            Some(c) if number != s.next && s.pending.len() >= self.depth => {
                drop(c);
                self.not_forwarded.fetch_add(1, Ordering::AcqRel);
                None
            }
            other => other,
        };
        s.pending.insert(number, chunk);
        let s = &mut *s; // one borrow of the guard for both fields
        while let Some(chunk) = s.pending.remove(&s.next) {
            s.next += 1;
            self.pass_on(s, chunk);
        }
    }

    fn pass_on(&self, s: &mut State, chunk: Option<Forwarded>) {
        let Some(chunk) = chunk else { return };
        if s.ready.len() < self.depth {
            s.ready.push_back(chunk);
            self.forwarded.fetch_add(1, Ordering::AcqRel);
            self.ready.notify_one();
        } else {
            drop(chunk); // the consumer is behind: back to the pool, counted
            self.not_forwarded.fetch_add(1, Ordering::AcqRel);
        }
    }

    /// No more chunks will be settled (the writers have ended): what waits for a
    /// number that never came is passed on in order, and the consumer gets
    /// `None` once it has taken every chunk.
    pub fn close(&self) {
        let mut s = self.lock();
        let rest = std::mem::take(&mut s.pending);
        for (number, chunk) in rest {
            s.next = number + 1;
            self.pass_on(&mut s, chunk);
        }
        s.closed = true;
        self.ready.notify_all();
    }

    /// Waits up to `timeout` for the next chunk; `None` on timeout, or at once
    /// once closed and drained.
    pub fn pop(&self, timeout: Duration) -> Option<Forwarded> {
        take_or_wait(
            self.lock(),
            &self.ready,
            timeout,
            |s| s.ready.pop_front(),
            |s| s.closed,
        )
    }

    /// True once closed and every chunk was taken.
    pub fn is_finished(&self) -> bool {
        let s = self.lock();
        s.closed && s.ready.is_empty()
    }

    /// Chunks passed on so far, and chunks written but not passed on (the
    /// consumer was behind).
    pub fn counts(&self) -> (u64, u64) {
        (
            self.forwarded.load(Ordering::Acquire),
            self.not_forwarded.load(Ordering::Acquire),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::assemble::{Chunk, ChunkLayout};
    use crate::ring::chunk_ring;

    /// `n` leases of a fresh ring, chunk ids 0.., and the ring's consumer end
    /// (to count what went back to the pool).
    fn leases(n: usize) -> (Vec<Lease>, crate::ring::Consumer) {
        let layout = ChunkLayout {
            streams: 1,
            packets_per_chunk: 2,
            payload_len: 8,
        };
        let (p, c) = chunk_ring((0..n).map(|_| Chunk::new(layout).unwrap()).collect());
        for id in 0..n as u64 {
            let mut ch = p.try_acquire().unwrap();
            ch.chunk_id = id;
            p.push(ch);
        }
        let out = (0..n).map(|_| c.pop(Duration::ZERO).unwrap()).collect();
        (out, c)
    }

    fn ids(f: &Forward) -> Vec<u64> {
        std::iter::from_fn(|| f.pop(Duration::ZERO))
            .map(|c| c.lease.chunk_id())
            .collect()
    }

    #[test]
    fn chunks_settled_out_of_order_come_out_in_dispatch_order_with_holes() {
        let (mut l, _c) = leases(4);
        let f = Forward::new(8);
        let mut take = |k: usize| {
            Some(Forwarded {
                lease: l.remove(k),
                ring: 0,
            })
        };
        // Dispatch numbers 0..5: number 2 was never written.
        let (c0, c1) = (take(0), take(0));
        let (c3, c4) = (take(0), take(0));
        f.settle(3, c3);
        f.settle(1, c1);
        assert!(f.pop(Duration::ZERO).is_none(), "0 has not been settled");
        f.settle(0, c0);
        f.settle(4, c4);
        f.settle(2, None);
        assert_eq!(ids(&f), vec![0, 1, 2, 3]);
        assert_eq!(f.counts(), (4, 0));
        f.close();
        assert!(f.is_finished());
    }

    #[test]
    fn a_slow_consumer_costs_counted_chunks_that_go_back_to_the_pool() {
        let (l, c) = leases(5);
        let f = Forward::new(2);
        for (n, lease) in l.into_iter().enumerate() {
            f.settle(n as u64, Some(Forwarded { lease, ring: 0 }));
        }
        assert_eq!(f.counts(), (2, 3));
        assert_eq!(
            c.free_count(),
            3,
            "the chunks not passed on are back in the pool"
        );
        assert_eq!(ids(&f), vec![0, 1]);
        assert_eq!(c.free_count(), 5);
    }

    #[test]
    fn the_reorder_buffer_is_bounded_and_close_flushes_it() {
        let (l, c) = leases(4);
        let f = Forward::new(2);
        let mut l = l.into_iter();
        // Number 0 never settles (a writer still busy): 1 and 2 wait, 3 is refused.
        for n in 1..4 {
            f.settle(
                n,
                Some(Forwarded {
                    lease: l.next().unwrap(),
                    ring: 0,
                }),
            );
        }
        assert_eq!(f.counts(), (0, 1));
        assert_eq!(c.free_count(), 1);
        f.close();
        assert_eq!(ids(&f), vec![0, 1]);
        assert!(f.is_finished());
        assert!(f.pop(Duration::from_millis(1)).is_none());
    }
}
