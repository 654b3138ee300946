//! Per-frame work of a burst: which frames are ours, and the counters.

use super::DpdkCounts;
use crate::capture::batch::pass;
use crate::capture::flow::{Flow, Frame};
use crate::capture::{Received, Sink};

/// Per-frame work of a burst: classification, parsing, counting.
pub(super) struct Deliver {
    pub(super) flow: Flow,
    pub(super) max_packet: usize,
    pub(super) counts: DpdkCounts,
}

impl Deliver {
    /// Passes one whole frame on; returns how many packets reached `sink` (0 or 1).
    pub(super) fn frame<F: Sink>(&mut self, l2: Option<&[u8]>, sink: &mut F) -> usize {
        self.counts.frames += 1;
        let Some(l2) = l2 else {
            sink(Received::Truncated); // a chain longer than the scratch buffer
            return 1;
        };
        match self.flow.frame(l2) {
            Frame::Udp(p) => pass(p, self.max_packet, sink),
            Frame::Cut => {
                self.counts.cut += 1;
                sink(Received::Truncated)
            }
            Frame::Malformed => sink(Received::Truncated),
            Frame::Other => {
                self.counts.other += 1;
                return 0;
            }
        }
        1
    }
}
