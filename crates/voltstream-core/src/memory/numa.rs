//! Where receive memory lives: huge pages and the NUMA node of the NIC.
//!
//! A NIC writes packets by DMA into memory on its own NUMA node fastest, and the
//! capture thread copies them into chunks; both are cheapest when the chunk pool
//! and the rings sit on the NIC's node. The node comes from sysfs
//! (`/sys/class/net/<if>/device/numa_node`; -1 or absent, as for loopback, a
//! veth or a one-node machine: no preference). The policy is `MPOL_PREFERRED`,
//! set with the `mbind` system call before the pages are touched: the kernel
//! allocates there while it can and elsewhere rather than failing start-up (a
//! strict `MPOL_BIND` could end the process in the OOM killer while pre-faulting).
//! Where the first page actually landed is checked and reported.

use std::io;
use std::path::Path;

use super::Buffer;

/// How a buffer should be placed; the default is plain pages, no node.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Placement {
    /// Try 2 MiB huge pages (`MAP_HUGETLB`) for buffers of at least one huge page.
    pub huge_pages: bool,
    /// Prefer this NUMA node.
    pub numa_node: Option<u32>,
}

impl Placement {
    /// Huge pages, on the NUMA node of `interface` when sysfs names one.
    pub fn near(interface: Option<&str>) -> Self {
        Placement {
            huge_pages: true,
            numa_node: interface.and_then(|i| interface_numa_node(Path::new("/sys"), i)),
        }
    }
}

/// The NUMA node of a network interface's device, read under `sysfs` (normally
/// `/sys`). `None` when the file is absent (virtual interfaces), unreadable, or
/// says -1 (no affinity, or a one-node machine).
pub fn interface_numa_node(sysfs: &Path, interface: &str) -> Option<u32> {
    if interface.is_empty() || interface.contains('/') || interface.starts_with('.') {
        return None; // not a name sysfs could hold; never walk elsewhere
    }
    let path = sysfs
        .join("class/net")
        .join(interface)
        .join("device/numa_node");
    let text = std::fs::read_to_string(path).ok()?;
    let n: i64 = text.trim().parse().ok()?;
    u32::try_from(n).ok()
}

// Memory policy modes and flags (linux/mempolicy.h).
const MPOL_PREFERRED: libc::c_long = 1;
const MPOL_F_NODE: libc::c_ulong = 1;
const MPOL_F_ADDR: libc::c_ulong = 2;
/// Node mask words: room for 1024 nodes, more than any machine has.
const MASK_WORDS: usize = 16;
const MASK_BITS: usize = MASK_WORDS * 64;

/// Sets an `MPOL_PREFERRED` policy for `node` on `[addr, addr + len)`.
///
/// # Safety
/// The range must be a mapping owned by the caller (page aligned).
pub(crate) unsafe fn prefer_node(addr: *mut u8, len: usize, node: u32) -> io::Result<()> {
    let node = node as usize;
    if node >= MASK_BITS {
        return Err(io::Error::from_raw_os_error(libc::EINVAL));
    }
    let mut mask = [0 as libc::c_ulong; MASK_WORDS];
    mask[node / 64] |= 1 << (node % 64);
    // SAFETY: mbind only changes the policy of the caller's own range; the mask
    // is a live array of MASK_BITS bits (maxnode counts one more, as the kernel
    // expects).
    let r = unsafe {
        libc::syscall(
            libc::SYS_mbind,
            addr,
            len,
            MPOL_PREFERRED,
            mask.as_ptr(),
            (MASK_BITS + 1) as libc::c_ulong,
            0 as libc::c_uint,
        )
    };
    if r == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// The node the page at `addr` is allocated on.
///
/// # Safety
/// `addr` must lie in a mapping of the caller whose page has been touched.
pub(crate) unsafe fn node_of_page(addr: *mut u8) -> io::Result<u32> {
    let mut node: libc::c_int = -1;
    // SAFETY: get_mempolicy writes one int to `node`; no mask is asked for.
    let r = unsafe {
        libc::syscall(
            libc::SYS_get_mempolicy,
            &mut node as *mut libc::c_int,
            std::ptr::null_mut::<libc::c_ulong>(),
            0 as libc::c_ulong,
            addr,
            MPOL_F_NODE | MPOL_F_ADDR,
        )
    };
    if r == 0 {
        u32::try_from(node).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))
    } else {
        Err(io::Error::last_os_error())
    }
}

/// The policy mode and node mask set on the page at `addr` (for tests and checks).
#[cfg(test)]
pub(crate) fn policy_of(addr: *const u8) -> io::Result<(libc::c_long, u64)> {
    let mut mode: libc::c_int = -1;
    let mut mask = [0 as libc::c_ulong; MASK_WORDS];
    // SAFETY: writes one int and at most MASK_BITS bits into live arrays.
    let r = unsafe {
        libc::syscall(
            libc::SYS_get_mempolicy,
            &mut mode as *mut libc::c_int,
            mask.as_mut_ptr(),
            (MASK_BITS + 1) as libc::c_ulong,
            addr,
            MPOL_F_ADDR,
        )
    };
    if r == 0 {
        Ok((mode as libc::c_long, mask[0]))
    } else {
        Err(io::Error::last_os_error())
    }
}

/// How a set of buffers (the chunk pool, an engine's buffers) was placed, for reports.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MemoryReport {
    /// Bytes mapped in all.
    pub bytes: u64,
    /// Every buffer is on huge pages.
    pub huge_pages: bool,
    /// Every buffer is locked in RAM.
    pub locked: bool,
    /// The NUMA node the memory prefers; `None`: no preference was set.
    pub numa_node: Option<u32>,
    /// What was asked for and not had (each distinct message once).
    pub warnings: Vec<String>,
}

impl MemoryReport {
    /// Summarises `buffers` (empty: nothing mapped, nothing claimed).
    pub fn of<'a>(buffers: impl IntoIterator<Item = &'a Buffer>) -> Self {
        let mut r = MemoryReport {
            huge_pages: true,
            locked: true,
            ..Default::default()
        };
        let mut any = false;
        for b in buffers {
            any = true;
            r.bytes += b.mapped_len() as u64;
            r.huge_pages &= b.huge_pages();
            r.locked &= b.locked();
            r.numa_node = r.numa_node.or(b.numa_node());
            for w in b.warnings() {
                if !r.warnings.contains(w) {
                    r.warnings.push(w.clone());
                }
            }
        }
        if !any {
            (r.huge_pages, r.locked) = (false, false);
        }
        r
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::memory::HUGE_PAGE;

    #[test]
    fn numa_node_is_read_from_sysfs_and_minus_one_or_absent_means_none() {
        let root = std::env::temp_dir().join(format!("vs-sysfs-{}", std::process::id()));
        let dev = |name: &str, text: &str| {
            let d = root.join("class/net").join(name).join("device");
            std::fs::create_dir_all(&d).unwrap();
            std::fs::write(d.join("numa_node"), text).unwrap();
        };
        dev("eth1", "1\n");
        dev("eth0", "-1\n");
        dev("bad0", "node one\n");
        dev("empty0", "");
        std::fs::create_dir_all(root.join("class/net/veth0")).unwrap(); // no device/
        assert_eq!(interface_numa_node(&root, "eth1"), Some(1));
        assert_eq!(interface_numa_node(&root, "eth0"), None);
        assert_eq!(interface_numa_node(&root, "bad0"), None);
        assert_eq!(interface_numa_node(&root, "empty0"), None);
        assert_eq!(interface_numa_node(&root, "veth0"), None);
        assert_eq!(interface_numa_node(&root, "nonexistent"), None);
        assert_eq!(interface_numa_node(&root, "../net/eth1"), None);
        assert_eq!(interface_numa_node(&root, ""), None);
        std::fs::remove_dir_all(&root).unwrap();
        // The real sysfs: loopback has no device, hence no node.
        assert_eq!(interface_numa_node(Path::new("/sys"), "lo"), None);
    }

    #[test]
    fn preferred_node_is_set_before_faulting_and_reported() {
        let p = Placement {
            huge_pages: false,
            numa_node: Some(0), // every machine has node 0
        };
        let b = Buffer::placed(3 * 4096 + 5, &p).unwrap();
        assert_eq!(b.numa_node(), Some(0));
        let (mode, mask) = policy_of(b.as_ptr()).unwrap();
        assert_eq!((mode, mask), (MPOL_PREFERRED, 1));
        // SAFETY: the buffer's first page, touched at allocation.
        assert_eq!(unsafe { node_of_page(b.as_ptr().cast_mut()) }.unwrap(), 0);
        assert!(!b.huge_pages());
        // As root (these tests run as root) the lock succeeds and nothing is missing.
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } == 0 {
            assert!(b.locked(), "{:?}", b.warnings());
            assert!(b.warnings().is_empty(), "{:?}", b.warnings());
        }
        // A node that cannot exist is a warning, not an error.
        let far = Placement {
            huge_pages: false,
            numa_node: Some(MASK_BITS as u32 + 3),
        };
        let b = Buffer::placed(4096, &far).unwrap();
        assert_eq!(b.numa_node(), None);
        assert!(b.warnings()[0].contains("NUMA node"), "{:?}", b.warnings());
        assert_eq!(policy_of(b.as_ptr()).unwrap().0, 0); // MPOL_DEFAULT
    }

    #[test]
    fn report_summarises_buffers() {
        let plain = Buffer::new(4096).unwrap();
        let small_huge = Buffer::placed(
            HUGE_PAGE / 2,
            &Placement {
                huge_pages: true,
                numa_node: None,
            },
        )
        .unwrap();
        // Smaller than one huge page: normal pages, and no warning about it.
        assert!(!small_huge.huge_pages() && small_huge.warnings().is_empty());
        let r = MemoryReport::of([&plain, &small_huge]);
        assert_eq!(r.bytes, 4096 + (HUGE_PAGE / 2) as u64);
        assert!(!r.huge_pages);
        assert_eq!(r.numa_node, None);
        assert_eq!(MemoryReport::of([]), MemoryReport::default());
    }
}
