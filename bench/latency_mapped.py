"""Why is a GPU read of mapped host memory slow? (issue 14, zero-copy mode)

bench/latency.py measured the zerocopy kernel's read of a frame in GPU-mapped host
memory at about 13 µs per 4 KiB page (8 KiB: 23 µs, 64 KiB: 225 µs), whatever the load
instruction. This times one kernel that sums a frame of mapped host memory (every
thread one 16-byte load), by CUDA events, for host memory from:
  alloc      cuMemHostAlloc(PORTABLE | DEVICEMAP)                  (the session's)
  wc         cuMemHostAlloc(... | WRITECOMBINED)
  reg4k      mmap (4 KiB pages) + cuMemHostRegister(PORTABLE | DEVICEMAP)
  reg2m      mmap (2 MiB pages: MAP_HUGETLB, else THP) + cuMemHostRegister
each with the CPU writing the frame just before the kernel (dirty lines) and without,
the same 16 frame slots reused in turn as in a session.
Run: python3 bench/latency_mapped.py (GPU machine, root for MAP_HUGETLB).
"""

from __future__ import annotations

import ctypes
import json
import mmap
import os

import cupy as cp
import numpy as np

SRC = r"""
extern "C" __global__ void read_sum(const uint4* p, unsigned int nvec, unsigned long long* out) {
    unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;
    unsigned long long s = 0;
    if (i < nvec) { uint4 w = __ldcv(p + i); s = w.x + w.y + w.z + w.w; }
    atomicAdd(out, s);
}
"""
SLOTS = 16
MAP_HUGETLB = 0x40000


def region(kind: str, nbytes: int, lib: ctypes.CDLL) -> tuple[int, int, object]:
    """(host address, device address, keep-alive) of `nbytes` of mapped memory."""
    if kind in ("alloc", "wc"):
        p = ctypes.c_void_p()
        flags = 3 | (4 if kind == "wc" else 0)
        assert lib.cuMemHostAlloc(ctypes.byref(p), ctypes.c_size_t(nbytes), flags) == 0
        host = p.value
        keep: object = p
    else:
        huge = 2 << 20
        size = (nbytes + huge - 1) // huge * huge
        flags = mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS
        align = 0
        if kind == "reg2m":
            try:
                m = mmap.mmap(-1, size, flags=flags | MAP_HUGETLB)
            except OSError:  # no reserved huge pages: transparent ones, 2 MiB aligned
                m = mmap.mmap(-1, size + huge, flags=flags)
                m.madvise(mmap.MADV_HUGEPAGE)
                align = huge
        else:
            m = mmap.mmap(-1, size, flags=flags)
            m.madvise(getattr(mmap, "MADV_NOHUGEPAGE", 15))
        buf = (ctypes.c_char * (size + align)).from_buffer(m)
        host = ctypes.addressof(buf)
        if align:
            host = (host + align - 1) & ~(align - 1)
        ctypes.memset(host, 0, nbytes)
        rc = lib.cuMemHostRegister_v2(ctypes.c_void_p(host), ctypes.c_size_t(nbytes), 3)
        assert rc == 0, f"cuMemHostRegister: {rc}"
        keep = (m, buf)
    d = ctypes.c_uint64()
    assert lib.cuMemHostGetDevicePointer_v2(ctypes.byref(d), ctypes.c_void_p(host), 0) == 0
    return host, d.value, keep


def main() -> None:
    lib = ctypes.CDLL("libcuda.so.1")
    cp.zeros(1)
    try:
        with open("/proc/sys/vm/nr_hugepages", "w") as f:
            f.write("64")
    except OSError:
        pass
    k = cp.RawModule(code=SRC).get_function("read_sum")
    out = cp.zeros(1, dtype=cp.uint64)
    start, end = cp.cuda.Event(), cp.cuda.Event()
    results = {}
    for frame in (8192, 65536):
        nvec = frame // 16
        blocks = (nvec + 127) // 128
        for kind in ("alloc", "wc", "reg4k", "reg2m"):
            host, dev, keep = region(kind, frame * SLOTS, lib)
            view = np.ctypeslib.as_array((ctypes.c_uint8 * (frame * SLOTS)).from_address(host))
            src = np.random.default_rng(0).integers(0, 256, frame, dtype=np.uint8)
            for dirty in (True, False):
                times = []
                for i in range(400):
                    slot = i % SLOTS
                    if dirty:
                        view[slot * frame : (slot + 1) * frame] = src
                    start.record()
                    k((blocks,), (128,), (cp.uint64(dev + slot * frame), cp.uint32(nvec), out))
                    end.record()
                    end.synchronize()
                    times.append(cp.cuda.get_elapsed_time(start, end) * 1000)
                t = np.array(times[50:])
                results[f"{frame}/{kind}/{'dirty' if dirty else 'clean'}"] = {
                    "p50_us": round(float(np.percentile(t, 50)), 2),
                    "p99_us": round(float(np.percentile(t, 99)), 2),
                }
                print(frame, kind, "dirty" if dirty else "clean", results[list(results)[-1]])
            if kind in ("reg4k", "reg2m"):
                lib.cuMemHostUnregister(ctypes.c_void_p(host))
    with open(os.path.join(os.environ.get("OUT", "/tmp"), "latency_mapped.json"), "w") as f:
        json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
