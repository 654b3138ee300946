//! What every engine's receive loop shares: waiting for the next batch
//! without spinning, and handing packets on. (Publishing stats once per
//! batch, draining at the end and honouring a stop are the capture thread's,
//! in `runner.rs`, once for all engines.)

use std::io;
use std::time::Duration;

use super::{Received, Sink};
use crate::{Error, Result};

/// Waits at most `timeout` for `fd` to become readable (or to report an
/// error). `Ok(false)`: it timed out, or a signal interrupted the wait (the
/// engine returns an empty batch and the capture loop checks for a stop).
pub(crate) fn wait_readable(fd: libc::c_int, timeout: Duration) -> io::Result<bool> {
    let mut pfd = libc::pollfd {
        fd,
        events: libc::POLLIN | libc::POLLERR,
        revents: 0,
    };
    let ts = libc::timespec {
        tv_sec: timeout.as_secs().min(i32::MAX as u64) as libc::time_t,
        tv_nsec: timeout.subsec_nanos() as libc::c_long,
    };
    // SAFETY: one valid pollfd, count 1, a valid timespec, no signal mask.
    let r = unsafe { libc::ppoll(&mut pfd, 1, &ts, std::ptr::null()) };
    match r {
        r if r > 0 => Ok(true),
        0 => Ok(false),
        _ => match io::Error::last_os_error() {
            e if e.kind() == io::ErrorKind::Interrupted => Ok(false),
            e => Err(e),
        },
    }
}

/// Whether a batch is ready: `ready()` now, or after waiting at most
/// `timeout` for `fd` (a ring's socket: the kernel wakes it when it hands
/// over a block or a descriptor). `what` names the socket in errors.
pub(crate) fn ready_within(
    fd: libc::c_int,
    timeout: Duration,
    what: &str,
    ready: impl Fn() -> bool,
) -> Result<bool> {
    if ready() {
        return Ok(true);
    }
    match wait_readable(fd, timeout) {
        Ok(true) => Ok(ready()),
        Ok(false) => Ok(false),
        Err(e) => Err(Error::io(format!("poll on the {what} failed"), e)),
    }
}

/// Hands one payload on: whole, or as a truncation when it is longer than the
/// engine's packets may be (the assembler counts it malformed).
#[inline]
pub(crate) fn pass<F: Sink>(p: &[u8], max_packet: usize, sink: &mut F) {
    if p.len() <= max_packet {
        sink(Received::Packet(p));
    } else {
        sink(Received::Truncated);
    }
}
