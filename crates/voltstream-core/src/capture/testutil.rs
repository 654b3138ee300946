//! Test helpers of the engines: traffic to send, and private network
//! namespaces, so that tests can make veth pairs and addresses without
//! touching the host's network.

use std::net::{SocketAddr, UdpSocket};
use std::time::Duration;

/// A socket address from its text (`"10.0.0.1:7148"`, `"[ff15::7]:7000"`).
pub(crate) fn sa(s: &str) -> SocketAddr {
    s.parse().unwrap()
}

/// Runs `f` on a thread moved into a new network namespace with `lo` up;
/// the namespace (and every link made in it) goes when the thread ends.
pub(crate) fn in_private_netns<T: Send>(f: impl FnOnce() -> T + Send) -> T {
    std::thread::scope(|s| {
        s.spawn(|| {
            // SAFETY: moves only this thread into a new network namespace.
            let r = unsafe { libc::unshare(libc::CLONE_NEWNET) };
            assert_eq!(
                r,
                0,
                "unshare(CLONE_NEWNET): {}",
                std::io::Error::last_os_error()
            );
            ip(&["link", "set", "lo", "up"]);
            f()
        })
        .join()
        .unwrap()
    })
}

/// Runs `ip ARGS` (in the calling thread's network namespace) and checks it.
pub(crate) fn ip(args: &[&str]) {
    let ok = std::process::Command::new("ip")
        .args(args)
        .status()
        .unwrap_or_else(|e| panic!("ip {args:?}: {e}"));
    assert!(ok.success(), "ip {args:?} failed");
}

/// `n` packets of 1 to 1000 bytes, every tenth (the fourth, the 14th...) of
/// 1001: one past a `max_packet` of 1000. Their bytes depend on their index,
/// so reordering shows.
pub(crate) fn varied_packets(n: u32) -> Vec<Vec<u8>> {
    (0..n)
        .map(|i| {
            let len = if i % 10 == 3 {
                1001
            } else {
                1 + (i as usize * 37) % 1000
            };
            (0..len).map(|k| (k as u32 * 13 + i) as u8).collect()
        })
        .collect()
}

/// Sends every packet from `tx` to `to`, and to each of `others` (traffic that
/// is not the capture's) after it.
pub(crate) fn send_all(tx: &UdpSocket, to: SocketAddr, others: &[SocketAddr], packets: &[Vec<u8>]) {
    for p in packets {
        tx.send_to(p, to).unwrap();
        for o in others {
            let _ = tx.send_to(p, o); // another family may be unreachable
        }
    }
}

/// Opens a first engine with `open` on a free loopback port, then a second on
/// the same port: returns the second one's error and the port's address.
pub(crate) fn second_on_same_port<E: super::Engine>(
    open: impl Fn(&str) -> crate::Result<E>,
) -> (crate::Error, String) {
    let first = open("127.0.0.1:0").unwrap();
    let addr = first.local_addr().unwrap().to_string();
    (
        open(&addr).err().expect("a second engine on one port"),
        addr,
    )
}

/// Sends `n` copies of `packet` from loopback to `e` before reading any, then
/// drains `e` (each batch waiting at most `wait`) and checks what it reports:
/// it got some (each whole) and the kernel dropped some, and as loopback loses
/// packets only at the engine's queue, the two add up to `n`.
pub(crate) fn drops_add_up<E: super::Engine>(e: &mut E, packet: &[u8], n: u64, wait: Duration) {
    let to = e.local_addr().unwrap();
    let tx = UdpSocket::bind("127.0.0.1:0").unwrap();
    for _ in 0..n {
        tx.send_to(packet, to).unwrap();
    }
    let mut got = 0u64;
    while e
        .recv_batch(wait, |r| {
            assert_eq!(r, super::Received::Packet(packet));
            got += 1;
        })
        .unwrap()
        > 0
    {}
    let drops = e.kernel_drops();
    assert!(got > 0 && drops > 0, "got {got}, drops {drops}");
    assert_eq!(got + drops, n);
}
