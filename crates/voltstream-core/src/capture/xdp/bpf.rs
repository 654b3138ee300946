//! Our XDP program as libbpf loads and attaches it, and the libbpf calls.

use std::ffi::{c_char, c_int, c_void, CStr};
use std::io;
use std::mem::size_of;
use std::os::fd::{FromRawFd, OwnedFd, RawFd};

use super::*;
use crate::capture::multicast::MAX_GROUPS;

/// The compiled program, 8-byte aligned for libelf.
#[repr(C, align(8))]
pub(super) struct Aligned<T: ?Sized>(T);
pub(super) static OBJECT: &Aligned<[u8]> = &Aligned(*include_bytes!(concat!(
    env!("OUT_DIR"),
    "/voltstream_xdp.o"
)));

/// `struct vs_config` of the program (its read-only global data).
#[repr(C)]
#[derive(Clone, Copy)]
pub(super) struct BpfConfig {
    pub(super) addr: u32,
    pub(super) port: u16,
    pub(super) pad: u16,
    pub(super) max_len: u32,
    pub(super) ngroups: u32,
    pub(super) groups: [u32; MAX_GROUPS],
    /// `VS_IPV4 | VS_IPV6`: the IP versions of our flow.
    pub(super) families: u32,
    /// The IPv6 destination; all zero: any.
    pub(super) addr6: [u8; 16],
}

pub(super) const VS_IPV4: u32 = 1;
pub(super) const VS_IPV6: u32 = 2;

pub(super) const VS_MATCHED: u32 = 0;
pub(super) const VS_NO_SOCKET: u32 = 1;
pub(super) const VS_CUT: u32 = 2;

/// Hand-written declarations of the libbpf 1.x functions we call (see
/// /usr/include/bpf/libbpf.h and bpf.h). Pointer results are NULL on error
/// with `errno` set; int results are negative error numbers.
pub(super) mod sys {
    use std::ffi::{c_char, c_int, c_void};

    #[repr(C)]
    pub struct BpfObject {
        _opaque: [u8; 0],
    }
    #[repr(C)]
    pub struct BpfMap {
        _opaque: [u8; 0],
    }
    #[repr(C)]
    pub struct BpfProgram {
        _opaque: [u8; 0],
    }

    /// The leading fields of `struct bpf_link_create_opts`; libbpf reads
    /// only the fields that `sz` covers, and checks the rest are zero.
    #[repr(C)]
    pub struct LinkCreateOpts {
        pub sz: usize,
        pub flags: u32,
        pub pad: u32,
    }

    /// `libbpf_print_fn_t`; the `va_list` is passed on as an opaque pointer.
    pub type PrintFn = unsafe extern "C" fn(c_int, *const c_char, *mut c_void) -> c_int;

    pub const BPF_XDP: u32 = 37;
    pub const BPF_F_XDP_HAS_FRAGS: u32 = 1 << 5;
    pub const XDP_FLAGS_SKB_MODE: u32 = 1 << 1;
    pub const XDP_FLAGS_DRV_MODE: u32 = 1 << 2;

    extern "C" {
        pub fn bpf_object__open_mem(
            buf: *const c_void,
            size: usize,
            opts: *const c_void,
        ) -> *mut BpfObject;
        pub fn bpf_object__load(obj: *mut BpfObject) -> c_int;
        pub fn bpf_object__close(obj: *mut BpfObject);
        pub fn bpf_object__find_map_by_name(
            obj: *const BpfObject,
            name: *const c_char,
        ) -> *mut BpfMap;
        pub fn bpf_object__find_program_by_name(
            obj: *const BpfObject,
            name: *const c_char,
        ) -> *mut BpfProgram;
        pub fn bpf_map__set_max_entries(map: *mut BpfMap, n: u32) -> c_int;
        pub fn bpf_map__value_size(map: *const BpfMap) -> u32;
        pub fn bpf_map__set_initial_value(
            map: *mut BpfMap,
            data: *const c_void,
            size: usize,
        ) -> c_int;
        pub fn bpf_map__fd(map: *const BpfMap) -> c_int;
        pub fn bpf_program__flags(prog: *const BpfProgram) -> u32;
        pub fn bpf_program__set_flags(prog: *mut BpfProgram, flags: u32) -> c_int;
        pub fn bpf_program__fd(prog: *const BpfProgram) -> c_int;
        pub fn bpf_map_update_elem(
            fd: c_int,
            key: *const c_void,
            value: *const c_void,
            flags: u64,
        ) -> c_int;
        pub fn bpf_map_lookup_elem(fd: c_int, key: *const c_void, value: *mut c_void) -> c_int;
        pub fn bpf_link_create(
            prog_fd: c_int,
            target_fd: c_int,
            attach_type: u32,
            opts: *const LinkCreateOpts,
        ) -> c_int;
        pub fn libbpf_num_possible_cpus() -> c_int;
        pub fn libbpf_set_print(f: Option<PrintFn>) -> Option<PrintFn>;
    }

    extern "C" {
        /// C's vsnprintf; `ap` is the caller's `va_list`, passed on unchanged.
        pub fn vsnprintf(buf: *mut c_char, n: usize, fmt: *const c_char, ap: *mut c_void) -> c_int;
    }
}

std::thread_local! {
    /// libbpf's messages during an `open` on this thread, for its errors.
    static LIBBPF_LOG: std::cell::RefCell<String> = const { std::cell::RefCell::new(String::new()) };
}

/// Collects libbpf's warnings into `LIBBPF_LOG` instead of printing them
/// (the native-to-generic fallback would otherwise print a kernel error).
pub(super) unsafe extern "C" fn libbpf_print(
    level: c_int,
    fmt: *const c_char,
    ap: *mut c_void,
) -> c_int {
    if level > 1 {
        return 0; // LIBBPF_DEBUG
    }
    let mut buf = [0 as c_char; 512];
    // SAFETY: `fmt` and `ap` come from libbpf's own call; vsnprintf writes at
    // most `buf.len()` bytes, NUL included. On Linux's 64-bit ABIs (build.rs
    // accepts no other) a `va_list` parameter is passed as one pointer.
    let n = unsafe { sys::vsnprintf(buf.as_mut_ptr(), buf.len(), fmt, ap) };
    if n > 0 {
        // SAFETY: vsnprintf NUL-terminated `buf`.
        let msg = unsafe { CStr::from_ptr(buf.as_ptr()) }.to_string_lossy();
        LIBBPF_LOG.with(|log| {
            let mut log = log.borrow_mut();
            log.push_str(msg.trim_start_matches("libbpf: "));
            if log.len() > 4096 {
                let cut = log.len() - 2048;
                let cut = (cut..log.len())
                    .find(|&i| log.is_char_boundary(i))
                    .unwrap_or(0);
                log.replace_range(..cut, "...");
            }
        });
    }
    0
}

/// Starts collecting libbpf's messages on this thread (clears the log).
pub(super) fn libbpf_log_start() {
    static HOOK: std::sync::Once = std::sync::Once::new();
    // SAFETY: installs a print function with libbpf's signature; it is the
    // only call that changes libbpf's global hook, and `Once` runs it once.
    HOOK.call_once(|| unsafe {
        sys::libbpf_set_print(Some(libbpf_print));
    });
    LIBBPF_LOG.with(|l| l.borrow_mut().clear());
}

/// libbpf's last messages on this thread, as " (libbpf: ...)" or "".
pub(super) fn libbpf_log() -> String {
    LIBBPF_LOG.with(|l| {
        let l = l.borrow();
        let t = l.trim();
        if t.is_empty() {
            String::new()
        } else {
            format!(" (libbpf: {})", t.replace('\n', "; "))
        }
    })
}

pub(super) fn cstr(b: &'static [u8]) -> &'static CStr {
    CStr::from_bytes_with_nul(b).expect("NUL-terminated literal")
}

pub(super) fn neg_errno(r: c_int) -> io::Error {
    io::Error::from_raw_os_error(r.checked_neg().unwrap_or(libc::EINVAL))
}

/// Our XDP program, loaded, with its link (attachment) once attached.
/// Dropping it closes the link first, which detaches the program.
pub(super) struct Program {
    pub(super) link: Option<OwnedFd>,
    pub(super) obj: *mut sys::BpfObject,
    pub(super) prog_fd: c_int,
    pub(super) xsks_fd: c_int,
    pub(super) counters_fd: c_int,
    pub(super) ncpus: usize,
}

impl Program {
    pub(super) fn load(config: BpfConfig, queue: u32, frags: bool) -> Result<Program> {
        let fail =
            |what: &str, e: io::Error| Error::io(format!("cannot {what}{}", libbpf_log()), e);
        libbpf_log_start();
        // SAFETY: OBJECT is a 'static, 8-byte aligned ELF image; libbpf
        // reads it and keeps no pointer into it past bpf_object__load.
        let obj = unsafe {
            sys::bpf_object__open_mem(OBJECT.0.as_ptr().cast(), OBJECT.0.len(), std::ptr::null())
        };
        if obj.is_null() {
            return Err(fail(
                "open the embedded XDP program",
                io::Error::last_os_error(),
            ));
        }
        let mut p = Program {
            link: None,
            obj,
            prog_fd: -1,
            xsks_fd: -1,
            counters_fd: -1,
            ncpus: 1,
        };
        let find_map = |name: &CStr| {
            // SAFETY: `obj` is a live object and `name` a C string.
            let m = unsafe { sys::bpf_object__find_map_by_name(obj, name.as_ptr()) };
            if m.is_null() {
                Err(Error::Config(format!(
                    "the embedded XDP program has no map {name:?} (build mismatch)"
                )))
            } else {
                Ok(m)
            }
        };
        let rodata = find_map(cstr(b".rodata\0"))?;
        let xsks = find_map(cstr(b"vs_xsks\0"))?;
        let counters = find_map(cstr(b"vs_counters\0"))?;
        // SAFETY: `rodata` is a map of the live object.
        let vsize = unsafe { sys::bpf_map__value_size(rodata) } as usize;
        if vsize != size_of::<BpfConfig>() {
            return Err(Error::Config(format!(
                "the embedded XDP program's configuration has {vsize} bytes, expected {} \
                 (build mismatch)",
                size_of::<BpfConfig>()
            )));
        }
        // SAFETY: `config` is a live BpfConfig of exactly the map's value
        // size; libbpf copies it.
        let r = unsafe {
            sys::bpf_map__set_initial_value(
                rodata,
                (&config as *const BpfConfig).cast(),
                size_of::<BpfConfig>(),
            )
        };
        if r != 0 {
            return Err(fail("configure the XDP program", neg_errno(r)));
        }
        // SAFETY: `xsks` is a map of the live, not yet loaded object.
        let r = unsafe { sys::bpf_map__set_max_entries(xsks, queue + 1) };
        if r != 0 {
            return Err(fail("size the XDP socket map", neg_errno(r)));
        }
        // SAFETY: `obj` is live; the name is a C string.
        let prog = unsafe {
            sys::bpf_object__find_program_by_name(obj, cstr(b"voltstream_xdp\0").as_ptr())
        };
        if prog.is_null() {
            return Err(Error::Config(
                "the embedded XDP program has no function voltstream_xdp (build mismatch)".into(),
            ));
        }
        if frags {
            // SAFETY: `prog` belongs to the live, not yet loaded object.
            let r = unsafe {
                sys::bpf_program__set_flags(
                    prog,
                    sys::bpf_program__flags(prog) | sys::BPF_F_XDP_HAS_FRAGS,
                )
            };
            if r != 0 {
                return Err(fail("mark the XDP program multi-buffer", neg_errno(r)));
            }
        }
        // SAFETY: loads the live object into the kernel.
        let r = unsafe { sys::bpf_object__load(obj) };
        if r != 0 {
            let e = neg_errno(r);
            let hint = if e.kind() == io::ErrorKind::PermissionDenied {
                " (loading BPF programs needs root, or CAP_BPF and CAP_NET_ADMIN)"
            } else {
                ""
            };
            return Err(fail(&format!("load the XDP program{hint}"), e));
        }
        // SAFETY: `prog`, `xsks` and `counters` belong to the loaded object.
        unsafe {
            p.prog_fd = sys::bpf_program__fd(prog);
            p.xsks_fd = sys::bpf_map__fd(xsks);
            p.counters_fd = sys::bpf_map__fd(counters);
            p.ncpus = usize::try_from(sys::libbpf_num_possible_cpus())
                .unwrap_or(1)
                .max(1);
        }
        Ok(p)
    }

    /// Points the queue's XSKMAP slot at the socket.
    pub(super) fn add_socket(&self, queue: u32, fd: RawFd) -> Result<()> {
        let v = fd as u32;
        // SAFETY: key and value are live u32s, the map's key and value size.
        let r = unsafe {
            sys::bpf_map_update_elem(
                self.xsks_fd,
                (&queue as *const u32).cast(),
                (&v as *const u32).cast(),
                0,
            )
        };
        if r != 0 {
            return Err(Error::io(
                format!(
                    "cannot put the AF_XDP socket into the XDP map{}",
                    libbpf_log()
                ),
                neg_errno(r),
            ));
        }
        Ok(())
    }

    /// Attaches in one mode through a BPF link.
    pub(super) fn attach(&mut self, ifindex: u32, native: bool) -> io::Result<()> {
        let opts = sys::LinkCreateOpts {
            sz: size_of::<sys::LinkCreateOpts>(),
            flags: if native {
                sys::XDP_FLAGS_DRV_MODE
            } else {
                sys::XDP_FLAGS_SKB_MODE
            },
            pad: 0,
        };
        // SAFETY: a loaded program's fd, an interface index, and options
        // whose `sz` covers exactly the fields we pass.
        let r =
            unsafe { sys::bpf_link_create(self.prog_fd, ifindex as c_int, sys::BPF_XDP, &opts) };
        if r < 0 {
            return Err(neg_errno(r));
        }
        // SAFETY: a fresh link descriptor that nothing else owns.
        self.link = Some(unsafe { OwnedFd::from_raw_fd(r) });
        Ok(())
    }

    /// The program's per-CPU counter `which`, summed.
    pub(super) fn counter(&self, which: u32) -> u64 {
        let mut v = vec![0u64; self.ncpus];
        // SAFETY: a per-CPU array lookup writes one 8-byte value per possible
        // CPU; `v` has exactly that many.
        let r = unsafe {
            sys::bpf_map_lookup_elem(
                self.counters_fd,
                (&which as *const u32).cast(),
                v.as_mut_ptr().cast(),
            )
        };
        if r == 0 {
            v.iter().sum()
        } else {
            0
        }
    }
}

impl Drop for Program {
    fn drop(&mut self) {
        drop(self.link.take()); // detaches the program
                                // SAFETY: closes the object opened in `load`, once; its map and
                                // program descriptors are not used after this.
        unsafe { sys::bpf_object__close(self.obj) };
    }
}
