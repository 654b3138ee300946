//! Handoff of chunks between the capture thread and consumers.
//!
//! Contract: every chunk of a capture is allocated once, at start-up, and then
//! circulates: free list → assembler ([`Producer::try_acquire`]) → filled queue
//! ([`Producer::push`]) → consumer ([`Consumer::pop`], an owned [`Lease`]) → back
//! to the free list when the lease is dropped or released. The capture side only
//! uses operations that cannot wait for a consumer: when no free chunk is
//! available `try_acquire` returns `None` and the assembler drops that chunk whole.
//!
//! Both queues sit behind one `Mutex`, with a `Condvar` for consumers waiting on
//! filled chunks. This is deliberate for now: traffic is one lock per *chunk*
//! (thousands of packets), the critical sections are a push or pop on a
//! `VecDeque` whose capacity already holds every chunk (no allocation), and no
//! code waits or does I/O while holding the lock, so the capture thread can only
//! ever wait for another thread's few-instruction critical section. A lock-free
//! SPSC ring replaces it when a benchmark shows the lock.

mod handoff;
mod wait;

pub use handoff::{chunk_ring, Consumer, Lease, Producer};
pub use wait::take_or_wait;
