//! Memory for the receive path: fixed-size buffers allocated, pre-faulted and
//! (best effort) locked at start-up, so that no page fault or allocation happens
//! once packets flow.
//!
//! Contract: a [`Buffer`] never moves or resizes; its bytes are readable and
//! writable for its whole life; it is released with `munmap` on drop.

mod buffer;

pub use buffer::Buffer;
