use std::collections::VecDeque;
use std::ops::{Deref, DerefMut};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::Duration;

use super::wait::take_or_wait;
use crate::assemble::{Chunk, ChunkSink};

struct State {
    free: VecDeque<Chunk>,
    filled: VecDeque<Chunk>,
    closed: bool,
}

struct Shared {
    state: Mutex<State>,
    filled: Condvar,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic elsewhere while holding the lock leaves the queues consistent
        // (every operation is a single push or pop), so poisoning is ignored.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn give_back(&self, chunk: Chunk) {
        self.lock().free.push_back(chunk);
    }
}

/// Builds the ring from chunks allocated at start-up; all start free.
pub fn chunk_ring(chunks: Vec<Chunk>) -> (Producer, Consumer) {
    let n = chunks.len();
    let mut free = VecDeque::with_capacity(n);
    free.extend(chunks);
    let shared = Arc::new(Shared {
        state: Mutex::new(State {
            free,
            filled: VecDeque::with_capacity(n),
            closed: false,
        }),
        filled: Condvar::new(),
    });
    (
        Producer {
            shared: shared.clone(),
        },
        Consumer { shared },
    )
}

/// The capture thread's end. Dropping it closes the ring.
pub struct Producer {
    shared: Arc<Shared>,
}

impl Producer {
    /// Takes a free chunk if one is available; never waits.
    pub fn try_acquire(&self) -> Option<Chunk> {
        self.shared.lock().free.pop_front()
    }

    /// Queues a filled chunk for consumers. Never waits for a consumer and never
    /// allocates: the queue's capacity already holds every chunk of the ring.
    pub fn push(&self, chunk: Chunk) {
        self.shared.lock().filled.push_back(chunk);
        self.shared.filled.notify_one();
    }

    /// Tells consumers no more chunks will come (they still get the queued ones).
    pub fn close(&self) {
        self.shared.lock().closed = true;
        self.shared.filled.notify_all();
    }
}

impl Drop for Producer {
    fn drop(&mut self) {
        self.close();
    }
}

impl ChunkSink for Producer {
    fn acquire(&mut self) -> Option<Chunk> {
        self.try_acquire()
    }

    fn emit(&mut self, chunk: Chunk) {
        self.push(chunk);
    }
}

/// A consumer's end; clones share the same queue (each chunk goes to one of them).
#[derive(Clone)]
pub struct Consumer {
    shared: Arc<Shared>,
}

impl Consumer {
    /// Waits up to `timeout` for a filled chunk. `None` on timeout, or at once
    /// when the ring is closed and drained.
    pub fn pop(&self, timeout: Duration) -> Option<Lease> {
        let take = |s: &mut State| s.filled.pop_front();
        let chunk = take_or_wait(
            self.shared.lock(),
            &self.shared.filled,
            timeout,
            take,
            |s| s.closed,
        )?;
        Some(Lease {
            chunk: Some(chunk),
            shared: self.shared.clone(),
        })
    }

    /// True once the producer closed the ring (filled chunks may remain).
    pub fn is_closed(&self) -> bool {
        self.shared.lock().closed
    }

    /// True once the producer closed the ring and every filled chunk was taken.
    pub fn is_finished(&self) -> bool {
        let s = self.shared.lock();
        s.closed && s.filled.is_empty()
    }

    /// Chunks currently free and waiting to be filled (for tests and monitors).
    pub fn free_count(&self) -> usize {
        self.shared.lock().free.len()
    }
}

/// Exclusive ownership of one filled chunk; the chunk returns to the free list
/// when the lease is dropped or [`Lease::release`]d.
pub struct Lease {
    chunk: Option<Chunk>,
    shared: Arc<Shared>,
}

impl Lease {
    /// Returns the chunk to the pool now.
    pub fn release(self) {}
}

impl Deref for Lease {
    type Target = Chunk;
    fn deref(&self) -> &Chunk {
        // Invariant: `chunk` is `Some` until `drop` takes it.
        self.chunk
            .as_ref()
            .expect("lease holds its chunk until dropped")
    }
}

impl DerefMut for Lease {
    fn deref_mut(&mut self) -> &mut Chunk {
        self.chunk
            .as_mut()
            .expect("lease holds its chunk until dropped")
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        if let Some(chunk) = self.chunk.take() {
            self.shared.give_back(chunk);
        }
    }
}

impl std::fmt::Debug for Lease {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("Lease").field(&self.chunk).finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::assemble::ChunkLayout;
    use std::time::Instant;

    fn ring(n: usize) -> (Producer, Consumer) {
        let layout = ChunkLayout {
            streams: 2,
            packets_per_chunk: 4,
            payload_len: 16,
        };
        chunk_ring((0..n).map(|_| Chunk::new(layout).unwrap()).collect())
    }

    #[test]
    fn chunks_circulate_and_exhaustion_is_reported_without_waiting() {
        let (p, c) = ring(2);
        let a = p.try_acquire().unwrap();
        let b = p.try_acquire().unwrap();
        assert!(p.try_acquire().is_none());
        p.push(a);
        p.push(b);
        let la = c.pop(Duration::from_millis(10)).unwrap();
        assert!(p.try_acquire().is_none());
        drop(la);
        assert_eq!(c.free_count(), 1);
        assert!(p.try_acquire().is_some());
        let lb = c.pop(Duration::ZERO).unwrap();
        lb.release();
        assert_eq!(c.free_count(), 1);
    }

    #[test]
    fn pop_times_out_then_sees_close() {
        let (p, c) = ring(1);
        let t = Instant::now();
        assert!(c.pop(Duration::from_millis(30)).is_none());
        assert!(t.elapsed() >= Duration::from_millis(30));
        let c2 = c.clone();
        let waiter = std::thread::spawn(move || c2.pop(Duration::from_secs(10)).is_none());
        std::thread::sleep(Duration::from_millis(20));
        drop(p);
        assert!(waiter.join().unwrap());
        assert!(c.is_finished());
    }

    #[test]
    fn consumer_on_another_thread_receives_in_order() {
        let (p, c) = ring(3);
        let consumer = std::thread::spawn(move || {
            let mut ids = Vec::new();
            while let Some(l) = c.pop(Duration::from_secs(5)) {
                ids.push(l.chunk_id());
            }
            ids
        });
        let mut next = 0u64;
        while next < 200 {
            if let Some(mut ch) = p.try_acquire() {
                ch.chunk_id = next;
                p.push(ch);
                next += 1;
            } else {
                std::thread::yield_now();
            }
        }
        drop(p);
        assert_eq!(consumer.join().unwrap(), (0..200).collect::<Vec<_>>());
    }
}
