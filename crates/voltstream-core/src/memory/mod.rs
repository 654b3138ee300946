//! Memory for the receive path: fixed-size buffers allocated, placed (huge
//! pages, the NIC's NUMA node), pre-faulted and locked at start-up, so that no
//! page fault or allocation happens once packets flow.
//!
//! Contract: a [`Buffer`] never moves or resizes; its bytes are readable and
//! writable for its whole life; it is released with `munmap` on drop. Placement
//! is best effort: what could not be had is a warning carried by the buffer and
//! summarised in a [`MemoryReport`], never an error.

mod buffer;
mod numa;

pub(crate) use buffer::page_size;
pub use buffer::{Buffer, HUGE_PAGE};
pub use numa::{interface_numa_node, MemoryReport, Placement};
