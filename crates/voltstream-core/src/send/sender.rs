//! The paced sender: one connected UDP socket, bursts of `sendmmsg`.

use std::io;
use std::net::{SocketAddr, UdpSocket};
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};

use crate::{Error, Result};

/// Messages per `sendmmsg` call; the arrays live on the stack.
const MAX_MSGS: usize = 64;
/// Largest UDP payload over IPv4.
const MAX_UDP: usize = 65_507;
/// The kernel refuses GSO sends of more segments than this.
const MAX_GSO_SEGS: usize = 64;
/// Pacing granularity: a burst carries about this much time's worth of data,
/// so receivers see short bursts rather than one long one per call.
const QUANTUM_S: f64 = 100e-6;
/// Below this wait we spin; above it we sleep (and spin the remainder), which
/// keeps a modest-rate sender off the CPU.
const SPIN_S: f64 = 200e-6;
const SNDBUF: libc::c_int = 64 << 20;
// Linux's UDP_SEGMENT socket option (include/uapi/linux/udp.h).
const UDP_SEGMENT: libc::c_int = 103;

/// What one [`Sender::send`] call did.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SendStats {
    pub packets: u64,
    /// UDP payload bytes (headers of lower layers not counted).
    pub bytes: u64,
    pub seconds: f64,
    /// Achieved payload rate, bits per second.
    pub rate_bits_per_s: f64,
    /// The most any burst started behind its due time (0 unpaced): above a few
    /// quanta, the schedule asked for more than the sender could give.
    pub late_s: f64,
}

/// When each packet of one send is due, in seconds on the sender's clock.
#[derive(Debug, Clone, Copy)]
pub enum Pace<'a> {
    /// As fast as possible.
    Unpaced,
    /// At `bits_per_s` payload bits per second, the first packet due at `at_s`.
    Rate { bits_per_s: f64, at_s: f64 },
    /// Packet `i` due at `times_s[i]` (a capture's own time stamps).
    Times(&'a [f64]),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Gso {
    /// Not yet tried with this segment size.
    Untried,
    On(usize),
    /// The kernel or path refused it; plain datagrams from now on.
    Off,
}

/// A paced UDP sender to one destination.
#[derive(Debug)]
pub struct Sender {
    sock: UdpSocket,
    dest: SocketAddr,
    gso: Gso,
    /// Origin of the pacing clock that scheduled sends share, so a replay made
    /// of many calls keeps its average rate over the gaps between them.
    clock: Instant,
    /// Sends answered "port unreachable" and sent again.
    refused: u64,
    /// Bursts refused in a row: a receiver that stays away (see `send_burst`).
    refused_in_a_row: u32,
}

/// Bursts refused in a row (each sent once more) before a send fails: a port
/// handed from one socket to the next costs one; a receiver that is not there
/// refuses every burst.
const REFUSED_IN_A_ROW: u32 = 3;

impl Sender {
    /// Opens a socket bound to `bind` (any local port if `None`), connected
    /// to `dest`, with its send buffer raised.
    pub fn new(dest: SocketAddr, bind: Option<SocketAddr>) -> Result<Self> {
        let bind = bind.unwrap_or_else(|| match dest {
            SocketAddr::V4(_) => SocketAddr::from(([0, 0, 0, 0], 0)),
            SocketAddr::V6(_) => SocketAddr::from(([0u16; 8], 0)),
        });
        let sock = UdpSocket::bind(bind).map_err(|e| {
            Error::io(
                format!("cannot bind the sender to {bind} (pick a free local address)"),
                e,
            )
        })?;
        sock.connect(dest).map_err(|e| {
            Error::io(
                format!("cannot address {dest} (check the destination host and port)"),
                e,
            )
        })?;
        let fd = sock.as_raw_fd();
        // Root may exceed net.core.wmem_max; others get what the cap allows.
        if setsockopt(fd, libc::SOL_SOCKET, libc::SO_SNDBUFFORCE, SNDBUF).is_err() {
            let _ = setsockopt(fd, libc::SOL_SOCKET, libc::SO_SNDBUF, SNDBUF);
        }
        Ok(Sender {
            sock,
            dest,
            gso: Gso::Untried,
            clock: Instant::now(),
            refused: 0,
            refused_in_a_row: 0,
        })
    }

    /// The destination.
    pub fn dest(&self) -> SocketAddr {
        self.dest
    }

    /// The local address the socket is bound to.
    pub fn local_addr(&self) -> Result<SocketAddr> {
        self.sock
            .local_addr()
            .map_err(|e| Error::io("cannot read the sender's local address", e))
    }

    /// Sends the receiver's host answered "port unreachable" (each sent again):
    /// each cost the packets sent while no socket held the port.
    pub fn refused(&self) -> u64 {
        self.refused
    }

    /// Whether the last send used UDP GSO.
    pub fn gso_active(&self) -> bool {
        matches!(self.gso, Gso::On(_))
    }

    /// Restarts the pacing clock that [`Sender::send_paced`] schedules against.
    pub fn restart_clock(&mut self) {
        self.clock = Instant::now();
    }

    /// Seconds since the pacing clock (re)started.
    pub fn clock_s(&self) -> f64 {
        self.clock.elapsed().as_secs_f64()
    }

    /// Sends `packets` (a whole number of `packet_len`-byte packets) at
    /// `rate_bits_per_s` payload bits per second on average; 0 = unpaced.
    /// Each call paces from its own start.
    pub fn send(
        &mut self,
        packets: &[u8],
        packet_len: usize,
        rate_bits_per_s: f64,
    ) -> Result<SendStats> {
        let pace = if rate_bits_per_s == 0.0 {
            Pace::Unpaced
        } else {
            Pace::Rate {
                bits_per_s: rate_bits_per_s,
                at_s: 0.0,
            }
        };
        // Its own origin: the shared clock of scheduled sends is left alone.
        self.send_from(packets, packet_len, pace, Instant::now())
    }

    /// Sends `packets` as [`Sender::send`] does, each packet due as `pace` says
    /// on the sender's clock, which carries across calls: a packet already
    /// overdue goes at once, so the average rate over many calls is the one
    /// asked for whenever the sender can keep up.
    pub fn send_paced(
        &mut self,
        packets: &[u8],
        packet_len: usize,
        pace: Pace<'_>,
    ) -> Result<SendStats> {
        self.send_from(packets, packet_len, pace, self.clock)
    }

    /// The send loop: packets due as `pace` says, in seconds after `origin`.
    fn send_from(
        &mut self,
        packets: &[u8],
        packet_len: usize,
        pace: Pace<'_>,
        origin: Instant,
    ) -> Result<SendStats> {
        if packet_len == 0 || packet_len > MAX_UDP {
            return Err(Error::Config(format!(
                "packet length {packet_len} is not a UDP payload size; use 1..={MAX_UDP}"
            )));
        }
        if packets.len() % packet_len != 0 {
            return Err(Error::Config(format!(
                "buffer of {} bytes is not a whole number of {packet_len}-byte packets",
                packets.len()
            )));
        }
        let n = packets.len() / packet_len;
        check_pace(pace, n)?;
        let segs = (MAX_UDP / packet_len).min(MAX_GSO_SEGS);
        let max_burst = MAX_MSGS * segs;
        let burst = match pace {
            Pace::Rate { bits_per_s, .. } => {
                let per_quantum = bits_per_s * QUANTUM_S / (8.0 * packet_len as f64);
                (per_quantum as usize).clamp(1, max_burst)
            }
            _ => max_burst,
        };
        let start = Instant::now();
        let mut late_s: f64 = 0.0;
        let mut sent = 0usize;
        while sent < n {
            let mut k = burst.min(n - sent);
            let due = match pace {
                Pace::Unpaced => None,
                Pace::Rate { bits_per_s, at_s } => {
                    Some(at_s + (sent * packet_len) as f64 * 8.0 / bits_per_s)
                }
                Pace::Times(times) => {
                    // One burst: the packets due within a quantum of the first.
                    let first = times[sent];
                    k = times[sent..sent + k]
                        .iter()
                        .position(|&t| t > first + QUANTUM_S)
                        .unwrap_or(k)
                        .max(1);
                    Some(first)
                }
            };
            if let Some(due) = due {
                late_s = late_s.max(wait_until(origin, due));
            }
            let chunk = &packets[sent * packet_len..(sent + k) * packet_len];
            let mut done = 0;
            while done < k {
                done += self.send_burst(&chunk[done * packet_len..], packet_len, segs)?;
            }
            sent += k;
        }
        let seconds = start.elapsed().as_secs_f64();
        let bytes = (n * packet_len) as u64;
        Ok(SendStats {
            packets: n as u64,
            bytes,
            seconds,
            rate_bits_per_s: if seconds > 0.0 {
                bytes as f64 * 8.0 / seconds
            } else {
                0.0
            },
            late_s,
        })
    }

    /// Tries to turn GSO on for `packet_len`; remembers a refusal.
    fn prepare_gso(&mut self, packet_len: usize, segs: usize) {
        if segs < 2 || self.gso == Gso::Off || self.gso == Gso::On(packet_len) {
            return;
        }
        let fd = self.sock.as_raw_fd();
        self.gso = match setsockopt(fd, libc::SOL_UDP, UDP_SEGMENT, packet_len as libc::c_int) {
            Ok(()) => Gso::On(packet_len),
            Err(_) => Gso::Off,
        };
    }

    fn disable_gso(&mut self) {
        let _ = setsockopt(self.sock.as_raw_fd(), libc::SOL_UDP, UDP_SEGMENT, 0);
        self.gso = Gso::Off;
    }

    /// One `sendmmsg` of the front of `data`; returns packets sent (>= 1).
    fn send_burst(&mut self, data: &[u8], packet_len: usize, segs: usize) -> Result<usize> {
        let mut refused_again = false;
        loop {
            self.prepare_gso(packet_len, segs);
            let per_msg = if matches!(self.gso, Gso::On(_)) {
                segs
            } else {
                1
            };
            let msg_bytes = per_msg * packet_len;
            // SAFETY: iovec and mmsghdr are plain C structs for which all-zero
            // bytes are a valid (empty) value.
            let mut iov: [libc::iovec; MAX_MSGS] = unsafe { std::mem::zeroed() };
            // SAFETY: as above.
            let mut msgs: [libc::mmsghdr; MAX_MSGS] = unsafe { std::mem::zeroed() };
            let mut count = 0;
            for (piece, (v, m)) in data
                .chunks(msg_bytes)
                .zip(iov.iter_mut().zip(msgs.iter_mut()))
            {
                v.iov_base = piece.as_ptr() as *mut libc::c_void;
                v.iov_len = piece.len();
                m.msg_hdr.msg_iov = v;
                m.msg_hdr.msg_iovlen = 1;
                count += 1;
            }
            // SAFETY: `msgs[..count]` each point at one iovec in `iov`, which
            // point into `data`; all outlive the call, and the kernel only
            // reads them. The socket is connected, so no msg_name is needed.
            let r = unsafe {
                libc::sendmmsg(
                    self.sock.as_raw_fd(),
                    msgs.as_mut_ptr(),
                    count as libc::c_uint,
                    0,
                )
            };
            if r > 0 {
                if !refused_again {
                    self.refused_in_a_row = 0;
                }
                let bytes: usize = iov[..r as usize].iter().map(|v| v.iov_len).sum();
                return Ok(bytes / packet_len);
            }
            let err = io::Error::last_os_error();
            match err.raw_os_error() {
                Some(libc::EINTR) | Some(libc::EAGAIN) => continue,
                Some(libc::ENOBUFS) => std::thread::sleep(Duration::from_micros(50)),
                // A GSO refusal (device without checksum offload, segment
                // size above the path MTU...): fall back to plain datagrams.
                Some(libc::EINVAL) | Some(libc::EIO) | Some(libc::EMSGSIZE) if per_msg > 1 => {
                    self.disable_gso()
                }
                Some(libc::EMSGSIZE) => {
                    return Err(Error::io(
                        format!(
                            "{packet_len}-byte packets are too large for the path to {} \
                             (use smaller packets or raise the interface MTU)",
                            self.dest
                        ),
                        err,
                    ))
                }
                // A refusal is the ICMP "port unreachable" of an earlier packet
                // that met no socket: a receiver moving between sockets (a port
                // handed over, a restart) or one that is not there. It is counted
                // and the burst sent once more; REFUSED_IN_A_ROW bursts refused in
                // a row is a receiver that is not there: an error (which a caller
                // feeding many nodes counts and goes on).
                Some(libc::ECONNREFUSED)
                    if !refused_again && self.refused_in_a_row < REFUSED_IN_A_ROW =>
                {
                    refused_again = true;
                    self.refused += 1;
                    self.refused_in_a_row += 1;
                }
                Some(libc::ECONNREFUSED) => {
                    return Err(Error::io(
                        format!(
                            "{} refused the packets (is a receiver listening on that port?)",
                            self.dest
                        ),
                        err,
                    ))
                }
                _ => {
                    return Err(Error::io(
                        format!("cannot send to {} (check the route and address)", self.dest),
                        err,
                    ))
                }
            }
        }
    }
}

/// Sets an int socket option (through the capture's `setsockopt`).
fn setsockopt(
    fd: libc::c_int,
    level: libc::c_int,
    name: libc::c_int,
    value: libc::c_int,
) -> io::Result<()> {
    crate::capture::host::setsockopt(fd, level, name, &value)
}

/// A schedule the send loop can follow: finite, non-negative times, one per
/// packet and in order.
fn check_pace(pace: Pace<'_>, n: usize) -> Result<()> {
    let bad = |why: String| Err(Error::Config(why));
    match pace {
        Pace::Unpaced => Ok(()),
        Pace::Rate { bits_per_s, at_s } => {
            if !bits_per_s.is_finite() || bits_per_s <= 0.0 {
                return bad(format!(
                    "send rate {bits_per_s} bit/s is invalid; use a rate >= 0 (0 = unpaced)"
                ));
            }
            if !at_s.is_finite() || at_s < 0.0 {
                return bad(format!("send time {at_s} s is invalid; use a time >= 0"));
            }
            Ok(())
        }
        Pace::Times(times) => {
            if times.len() != n {
                return bad(format!(
                    "{} send times for {n} packets; give one time per packet",
                    times.len()
                ));
            }
            let ordered = times.windows(2).all(|w| w[0] <= w[1]);
            if !ordered || times.iter().any(|t| !t.is_finite() || *t < 0.0) {
                return bad("send times must be finite, >= 0 and non-decreasing".into());
            }
            Ok(())
        }
    }
}

/// Waits until `due_s` seconds after `start`: sleeps most of a long wait,
/// spins the end for accuracy. Returns how late it already was (0 if not).
fn wait_until(start: Instant, due_s: f64) -> f64 {
    let late = start.elapsed().as_secs_f64() - due_s;
    if late > 0.0 {
        return late;
    }
    loop {
        let left = due_s - start.elapsed().as_secs_f64();
        if left <= 0.0 {
            return 0.0;
        }
        if left > SPIN_S {
            std::thread::sleep(Duration::from_secs_f64(left - SPIN_S / 2.0));
        } else {
            std::hint::spin_loop();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn receiver() -> UdpSocket {
        let r = UdpSocket::bind("127.0.0.1:0").unwrap();
        r.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
        let fd = r.as_raw_fd();
        let _ = setsockopt(fd, libc::SOL_SOCKET, libc::SO_RCVBUFFORCE, 32 << 20);
        r
    }

    /// The `n` packets of `len` bytes in `data` arrive twice over, in order.
    fn assert_sent_twice(rx: &UdpSocket, data: &[u8], n: usize, len: usize) {
        let mut buf = vec![0u8; 2000];
        for i in 0..2 * n {
            let got = rx.recv(&mut buf).unwrap();
            assert_eq!(
                &buf[..got],
                &data[(i % n) * len..(i % n + 1) * len],
                "packet {i}"
            );
        }
    }

    fn pattern(n: usize, len: usize) -> Vec<u8> {
        let mut s = 0x2545_f491_4f6c_dd1du64;
        (0..n * len)
            .map(|_| {
                s ^= s << 13;
                s ^= s >> 7;
                s ^= s << 17;
                s as u8
            })
            .collect()
    }

    #[test]
    fn sends_every_packet_in_order_paced() {
        let rx = receiver();
        let dest = rx.local_addr().unwrap();
        let mut tx = Sender::new(dest, None).unwrap();
        let (n, len) = (300, 1000);
        let data = pattern(n, len);
        // 300 kB at 400 Mb/s: 6 ms.
        let st = tx.send(&data, len, 400e6).unwrap();
        assert_eq!((st.packets, st.bytes), (n as u64, (n * len) as u64));
        assert!(st.seconds >= 0.9 * (n * len * 8) as f64 / 400e6, "{st:?}");
        let mut buf = vec![0u8; 2000];
        for i in 0..n {
            let got = rx.recv(&mut buf).unwrap();
            assert_eq!(&buf[..got], &data[i * len..(i + 1) * len], "packet {i}");
        }
    }

    #[test]
    fn gso_path_delivers_separate_datagrams() {
        let rx = receiver();
        let mut tx = Sender::new(rx.local_addr().unwrap(), None).unwrap();
        let (n, len) = (100, 8216);
        let data = pattern(n, len);
        let st = tx.send(&data, len, 0.0).unwrap();
        assert_eq!(st.packets, n as u64);
        let mut buf = vec![0u8; 65536];
        for i in 0..n {
            let got = rx.recv(&mut buf).unwrap();
            assert_eq!(got, len);
            assert_eq!(&buf[..got], &data[i * len..(i + 1) * len], "packet {i}");
        }
    }

    #[test]
    fn the_clock_carries_across_calls() {
        let rx = receiver();
        let mut tx = Sender::new(rx.local_addr().unwrap(), None).unwrap();
        let (n, len) = (50, 1000);
        let data = pattern(n, len);
        tx.restart_clock();
        // 50 kB at 100 Mb/s = 4 ms per call; the second call is due after the first.
        let rate = 100e6;
        let per_call = (n * len * 8) as f64 / rate;
        for call in 0..2 {
            let pace = Pace::Rate {
                bits_per_s: rate,
                at_s: call as f64 * per_call,
            };
            tx.send_paced(&data, len, pace).unwrap();
        }
        // The last packet is due at 2 * per_call less one packet's time.
        assert!(tx.clock_s() >= 2.0 * per_call - (len * 8) as f64 / rate);
        assert_sent_twice(&rx, &data, n, len);
    }

    #[test]
    fn time_stamps_pace_each_packet_and_overdue_ones_go_at_once() {
        let rx = receiver();
        let mut tx = Sender::new(rx.local_addr().unwrap(), None).unwrap();
        let (n, len) = (20, 100);
        let data = pattern(n, len);
        tx.restart_clock();
        let times: Vec<f64> = (0..n).map(|i| 0.001 * i as f64).collect();
        let st = tx.send_paced(&data, len, Pace::Times(&times)).unwrap();
        assert_eq!(st.packets, n as u64);
        assert!(tx.clock_s() >= times[n - 1], "{st:?}");
        // Due long ago: sent at once, and the lateness says so.
        let st = tx.send_paced(&data, len, Pace::Times(&[0.0; 20])).unwrap();
        assert!(st.late_s >= times[n - 1], "{st:?}");
        assert_sent_twice(&rx, &data, n, len);
    }

    #[test]
    fn bad_schedules_are_config_errors() {
        let rx = receiver();
        let mut tx = Sender::new(rx.local_addr().unwrap(), None).unwrap();
        let data = [1u8; 100];
        let bad = [
            Pace::Times(&[0.0; 3]),
            Pace::Times(&[0.0, 1.0, 0.5, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0]),
            Pace::Times(&[f64::NAN; 10]),
            Pace::Rate {
                bits_per_s: 1e6,
                at_s: -1.0,
            },
            Pace::Rate {
                bits_per_s: 0.0,
                at_s: 0.0,
            },
        ];
        for pace in bad {
            let r = tx.send_paced(&data, 10, pace);
            assert!(matches!(r, Err(Error::Config(_))), "{pace:?}: {r:?}");
        }
    }

    #[test]
    fn bad_arguments_are_config_errors() {
        let rx = receiver();
        let mut tx = Sender::new(rx.local_addr().unwrap(), None).unwrap();
        let data = [1u8; 100];
        for (len, rate) in [
            (0, 0.0),
            (30, 0.0),
            (70_000, 0.0),
            (10, -1.0),
            (10, f64::NAN),
        ] {
            assert!(matches!(tx.send(&data, len, rate), Err(Error::Config(_))));
        }
    }

    #[test]
    fn refused_destination_is_an_io_error() {
        // Bind then drop: the port is (almost surely) closed; loopback then
        // answers with ICMP port unreachable, reported on a later send.
        let port = receiver().local_addr().unwrap();
        let mut tx = Sender::new(port, None).unwrap();
        let data = [7u8; 64 * 10];
        let mut failed = false;
        for _ in 0..50 {
            if let Err(e) = tx.send(&data, 64, 0.0) {
                assert!(matches!(e, Error::Io { .. }));
                assert!(e.to_string().contains("refused"), "{e}");
                failed = true;
                break;
            }
        }
        assert!(failed);
    }

    #[test]
    fn a_receiver_rebinding_its_port_is_counted_not_fatal() {
        // The port handed from one socket to the next (a `--vdif-threads auto`
        // learning socket to the engine, a restarted receiver): a packet sent in
        // between is refused (reported on the next send), and that send goes to
        // the new socket.
        let first = receiver();
        let port = first.local_addr().unwrap();
        let mut tx = Sender::new(port, None).unwrap();
        let data = [7u8; 64];
        tx.send(&data, 64, 0.0).unwrap();
        drop(first);
        tx.send(&data, 64, 0.0).unwrap(); // into the gap: its ICMP is pending
        let second = UdpSocket::bind(port).unwrap();
        second
            .set_read_timeout(Some(Duration::from_secs(2)))
            .unwrap();
        tx.send(&data, 64, 0.0).unwrap();
        assert_eq!(tx.refused(), 1, "the pending refusal, counted once");
        let mut buf = [0u8; 128];
        assert_eq!(second.recv(&mut buf).unwrap(), 64);
    }
}
