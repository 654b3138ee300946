//! The host side of a capture: the addresses it binds, the interfaces they
//! live on, socket options, and the *guard* socket that holds the port for
//! engines reading below the IP layer (packet ring, AF_XDP, DPDK on a kernel
//! interface): no other capture can take the port, and the kernel never
//! answers our flow with ICMP port-unreachable.

use std::io;
use std::mem::size_of;
use std::net::{IpAddr, Ipv4Addr, SocketAddr, ToSocketAddrs, UdpSocket};
use std::os::fd::AsRawFd;

use super::cbpf::attach_drop_all;
use crate::{Error, Result};

/// Binds the capture's UDP port (no SO_REUSEADDR, so a second capture on the
/// same port fails) with an error that says what to do about the usual causes.
pub(crate) fn bind_udp(addr: SocketAddr) -> Result<UdpSocket> {
    use std::io::ErrorKind;
    UdpSocket::bind(addr).map_err(|e| {
        let hint = match e.kind() {
            ErrorKind::AddrInUse => " (is another capture running? stop it or choose another port)",
            ErrorKind::AddrNotAvailable => " (the host is not an address of this machine)",
            ErrorKind::PermissionDenied => " (ports below 1024 need root)",
            _ => "",
        };
        Error::io(format!("cannot bind {addr}{hint}"), e)
    })
}

/// Binds the guard socket with a drop-all filter (every datagram the stack
/// would queue on it is dropped before it is: no second copy, no draining
/// thread; the kernel counts them as UDP `InErrors`). Returns it and the
/// address it holds (port 0 resolved).
pub(crate) fn guard(addr: SocketAddr) -> Result<(UdpSocket, SocketAddr)> {
    let guard = bind_udp(addr)?;
    attach_drop_all(guard.as_raw_fd())
        .map_err(|e| Error::io("cannot attach the drop-all filter to the guard socket", e))?;
    let local = guard
        .local_addr()
        .map_err(|e| Error::io("cannot read the guard socket address", e))?;
    Ok((guard, local))
}

/// The bind address, IPv4 or IPv6 (`[::1]:7000`), as given.
pub(crate) fn resolve_ip(bind: &str) -> Result<SocketAddr> {
    let bad = || {
        Error::Config(format!(
            "bind address '{bind}' is not host:port (for example 127.0.0.1:7000, 0.0.0.0:7000 \
             or [::1]:7000)"
        ))
    };
    bind.to_socket_addrs()
        .map_err(|_| bad())?
        .next()
        .ok_or_else(bad)
}

pub(crate) fn if_index(name: &str) -> Result<libc::c_int> {
    let c = std::ffi::CString::new(name)
        .map_err(|_| Error::Config(format!("interface name {name:?} contains a NUL byte")))?;
    // SAFETY: `c` is a valid NUL-terminated string for the duration of the call.
    let i = unsafe { libc::if_nametoindex(c.as_ptr()) };
    if i == 0 {
        return Err(Error::Config(format!(
            "no network interface named '{name}' (see `ip link`)"
        )));
    }
    Ok(i as libc::c_int)
}

/// The interface that owns `ip` (`lo` for 127.0.0.0/8), if any.
pub fn interface_of(ip: Ipv4Addr) -> Result<Option<String>> {
    interface_of_ip(ip.into())
}

/// The interface that owns `ip`, IPv4 or IPv6 (`lo` for 127.0.0.0/8 and ::1).
pub(crate) fn interface_of_ip(ip: IpAddr) -> Result<Option<String>> {
    if ip.is_loopback() {
        return Ok(Some("lo".into()));
    }
    let mut head: *mut libc::ifaddrs = std::ptr::null_mut();
    // SAFETY: getifaddrs fills `head` with a list we free below.
    if unsafe { libc::getifaddrs(&mut head) } != 0 {
        return Err(Error::io(
            "cannot list network interfaces",
            io::Error::last_os_error(),
        ));
    }
    let mut found = None;
    let mut cur = head;
    while !cur.is_null() {
        // SAFETY: `cur` is a node of the list getifaddrs returned, not yet freed;
        // ifa_addr, when non-null, points to a sockaddr of its family
        // (sockaddr_in for AF_INET, sockaddr_in6 for AF_INET6), and ifa_name
        // to a NUL-terminated string.
        unsafe {
            let a = (*cur).ifa_addr;
            let have = match (a.is_null(), ip) {
                (true, _) => None,
                (false, IpAddr::V4(_)) if (*a).sa_family as libc::c_int == libc::AF_INET => {
                    let sin = &*(a as *const libc::sockaddr_in);
                    Some(IpAddr::V4(Ipv4Addr::from(u32::from_be(
                        sin.sin_addr.s_addr,
                    ))))
                }
                (false, IpAddr::V6(_)) if (*a).sa_family as libc::c_int == libc::AF_INET6 => {
                    let sin6 = &*(a as *const libc::sockaddr_in6);
                    Some(IpAddr::V6(sin6.sin6_addr.s6_addr.into()))
                }
                _ => None,
            };
            if have == Some(ip) {
                let name = std::ffi::CStr::from_ptr((*cur).ifa_name);
                found = Some(name.to_string_lossy().into_owned());
                break;
            }
            cur = (*cur).ifa_next;
        }
    }
    // SAFETY: frees the list getifaddrs allocated, once.
    unsafe { libc::freeifaddrs(head) };
    Ok(found)
}

/// The interface that owns `ip`, for an engine told no interface: when none
/// does, an error that says what to pass instead (`pass`).
pub(crate) fn interface_owning(ip: IpAddr, pass: &str) -> Result<String> {
    interface_of_ip(ip)?
        .ok_or_else(|| Error::Config(format!("no interface has the address {ip}; pass {pass}")))
}

pub(crate) fn setsockopt<T>(
    fd: libc::c_int,
    level: libc::c_int,
    opt: libc::c_int,
    v: &T,
) -> io::Result<()> {
    // SAFETY: passes a pointer to a live `T` and its exact size; the kernel
    // copies it before returning.
    let r = unsafe {
        libc::setsockopt(
            fd,
            level,
            opt,
            (v as *const T).cast(),
            size_of::<T>() as libc::socklen_t,
        )
    };
    if r == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Maps `len` bytes of a ring the kernel allocated for socket `fd`, at byte
/// offset `offset` (a page multiple the socket's API documents), shared and
/// pre-faulted; `locked` adds `MAP_LOCKED`.
pub(crate) fn map_ring(
    fd: libc::c_int,
    len: usize,
    offset: u64,
    locked: bool,
) -> io::Result<*mut u8> {
    let lock = if locked { libc::MAP_LOCKED } else { 0 };
    // SAFETY: asks for a new shared mapping of the socket's ring (no existing
    // memory is touched); the result is checked against MAP_FAILED. Callers run
    // on 64-bit targets, where off_t holds the offset.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED | libc::MAP_POPULATE | lock,
            fd,
            offset as libc::off_t,
        )
    };
    if p == libc::MAP_FAILED {
        Err(io::Error::last_os_error())
    } else {
        Ok(p.cast())
    }
}
