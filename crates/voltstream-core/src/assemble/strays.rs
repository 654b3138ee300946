//! Packets a capture thread received for a chunk another thread owns.
//!
//! When threads take turns by chunk (`AssemblerConfig::chunk_stride`), the
//! kernel steers each packet by its own index, so a stray is rare: a
//! super-frame of a local sender's UDP GSO (loopback) is steered whole by its
//! first datagram, and its tail may belong to the next chunk. Such a packet is
//! copied into the owner's inbox here and the owner places it after its next
//! batch, as if it had received it. Each inbox is a fixed ring of slots
//! allocated once; a full inbox (or one whose thread has finished) refuses the
//! packet, and the sender counts it `dropped` for its stream, so accounting
//! stays exact either way.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard};

/// The inbox, whatever a panic elsewhere left behind (its state stays valid).
fn lock(m: &Mutex<Inbox>) -> MutexGuard<'_, Inbox> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// One thread's inbox: `slots` packets of at most `slot_len` bytes.
struct Inbox {
    buf: Box<[u8]>,
    lens: Box<[usize]>,
    head: usize,
    len: usize,
    closed: bool,
}

/// The inboxes of every thread of a capture that takes turns by chunk.
pub struct Strays {
    inboxes: Box<[Mutex<Inbox>]>,
    /// Packets waiting in each inbox: what the owner checks after every packet
    /// (one relaxed load), taking the lock only when there are some.
    waiting: Box<[AtomicUsize]>,
    slot_len: usize,
}

impl Strays {
    /// `threads` inboxes of `slots` packets of up to `slot_len` bytes each.
    pub fn new(threads: usize, slots: usize, slot_len: usize) -> Strays {
        let inboxes = (0..threads)
            .map(|_| {
                Mutex::new(Inbox {
                    buf: vec![0u8; slots * slot_len].into_boxed_slice(),
                    lens: vec![0; slots].into_boxed_slice(),
                    head: 0,
                    len: 0,
                    closed: false,
                })
            })
            .collect();
        let waiting = (0..threads).map(|_| AtomicUsize::new(0)).collect();
        Strays {
            inboxes,
            waiting,
            slot_len,
        }
    }

    /// Copies `packet` into thread `to`'s inbox; false when it cannot take it
    /// (full, finished, too long or no such thread).
    pub fn send(&self, to: usize, packet: &[u8]) -> bool {
        let Some(inbox) = self.inboxes.get(to) else {
            return false;
        };
        let mut b = lock(inbox);
        let slots = b.lens.len();
        if b.closed || b.len == slots || packet.len() > self.slot_len {
            return false;
        }
        let i = (b.head + b.len) % slots;
        b.buf[i * self.slot_len..i * self.slot_len + packet.len()].copy_from_slice(packet);
        b.lens[i] = packet.len();
        b.len += 1;
        self.waiting[to].store(b.len, Ordering::Release);
        true
    }

    /// Whether thread `me`'s inbox has packets (cheap: no lock).
    #[inline]
    pub fn waiting(&self, me: usize) -> bool {
        self.waiting
            .get(me)
            .is_some_and(|w| w.load(Ordering::Acquire) > 0)
    }

    /// Hands every packet in thread `me`'s inbox to `place`, oldest first;
    /// with `close`, refuses any later packet (the thread is finishing).
    pub fn drain(&self, me: usize, close: bool, mut place: impl FnMut(&[u8])) {
        let Some(inbox) = self.inboxes.get(me) else {
            return;
        };
        let mut b = lock(inbox);
        let slots = b.lens.len();
        while b.len > 0 {
            let i = b.head;
            let start = i * self.slot_len;
            place(&b.buf[start..start + b.lens[i]]);
            b.head = (i + 1) % slots;
            b.len -= 1;
        }
        b.closed |= close;
        self.waiting[me].store(0, Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn packets_reach_their_thread_in_order_and_a_full_or_closed_inbox_refuses() {
        let s = Strays::new(2, 3, 8);
        assert!(!s.waiting(1));
        assert!(s.send(1, b"ab") && s.send(1, b"cde") && s.send(1, b"f"));
        assert!(s.waiting(1) && !s.waiting(0));
        assert!(!s.send(1, b"g"), "full");
        assert!(!s.send(0, &[0; 9]), "too long");
        assert!(!s.send(2, b"x"), "no such thread");
        let mut got = Vec::new();
        s.drain(1, false, |p| got.push(p.to_vec()));
        assert_eq!(got, [b"ab".to_vec(), b"cde".to_vec(), b"f".to_vec()]);
        assert!(!s.waiting(1));
        assert!(s.send(1, b"hi") && s.send(1, b"jk"), "room again, wrapping");
        got.clear();
        s.drain(1, true, |p| got.push(p.to_vec()));
        assert_eq!(got, [b"hi".to_vec(), b"jk".to_vec()]);
        assert!(!s.send(1, b"late"), "closed");
    }
}
