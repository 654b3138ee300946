"""First look at the GPU machine for the low-latency mode (issue 14): facts the Rust
hand-off relies on, checked before it is run there.

Prints (and writes $OUT/latency_probe.json):
- device attributes: mapped memory, host pointer use, 64-bit stream memory operations;
- whether CuPy's handles work with direct driver calls made through ctypes on
  libcuda.so.1 (what the Rust side does through dlopen): the current context, a
  RawKernel's CUfunction launched with cuLaunchKernel, cuMemcpyHtoDAsync and
  cuStreamWriteValue64 into CuPy memory on a CuPy stream, cuMemHostAlloc mapped memory;
- round trips from Python (host hands over an 8 KiB frame, the GPU sums it and writes
  an acknowledgement to mapped memory, the host sees it): copy + launch + synchronise
  through the driver, and a one-block persistent kernel polling mapped memory.

Python adds microseconds to every number here; the Rust hot loop is what is reported
(bench/latency.py). Run: python3 bench/latency_probe.py (needs CuPy and a GPU).
"""

from __future__ import annotations

import ctypes
import json
import os
import time

import cupy as cp
import numpy as np

SOURCE = r"""
// The block sums bytes [0, n) and thread 0 acks: the sum, then seq with a release.
__device__ void sum_and_ack(const unsigned char* p, unsigned int n, unsigned long long seq,
                            unsigned long long* ack, unsigned long long* part) {
    unsigned long long s = 0;
    for (unsigned int i = threadIdx.x; i < n; i += blockDim.x) s += p[i];
    part[threadIdx.x] = s;
    __syncthreads();
    for (unsigned int w = blockDim.x / 2; w > 0; w /= 2) {
        if (threadIdx.x < w) part[threadIdx.x] += part[threadIdx.x + w];
        __syncthreads();
    }
    if (threadIdx.x == 0) {
        ack[1] = part[0];
        __threadfence_system();
        asm volatile("st.release.sys.global.u64 [%0], %1;" :: "l"(ack), "l"(seq) : "memory");
    }
}

extern "C" __global__ void probe_sum(const unsigned char* frame, unsigned int n,
                                     unsigned long long seq, unsigned long long* ack) {
    __shared__ unsigned long long part[256];
    sum_and_ack(frame, n, seq, ack, part);
}

extern "C" __global__ void probe_persistent(const unsigned char* slot, unsigned int n,
                                            unsigned long long* ack,
                                            const unsigned long long* flag,
                                            unsigned long long frames) {
    __shared__ unsigned long long part[256];
    __shared__ unsigned long long go;
    for (unsigned long long seq = 1; seq <= frames; ++seq) {
        if (threadIdx.x == 0) {
            unsigned long long v = 0;
            unsigned long long spins = 0;
            do {
                asm volatile("ld.acquire.sys.global.u64 %0, [%1];"
                             : "=l"(v) : "l"(flag) : "memory");
            } while (v < seq && ++spins < 2000000000ULL);
            go = v;
        }
        __syncthreads();
        if (go < seq) return;
        sum_and_ack(slot, n, seq, ack, part);
        __syncthreads();
    }
}
"""

ATTRS = {
    "can_map_host_memory": 19,
    "unified_addressing": 41,
    "can_use_host_pointer_for_registered_mem": 91,
    "can_use_stream_mem_ops_v1": 92,
    "can_use_64_bit_stream_mem_ops_v1": 93,
}


def pct(ns: list[int]) -> dict[str, float]:
    a = np.asarray(ns[100:], dtype=np.float64) / 1e3
    return {
        "p50_us": float(np.percentile(a, 50, method="higher")),
        "p99_us": float(np.percentile(a, 99, method="higher")),
        "max_us": float(a.max()),
        "n": int(a.size),
    }


def check(lib: ctypes.CDLL, name: str, rc: int) -> None:
    if rc != 0:
        raise RuntimeError(f"{name} returned CUresult {rc}")


def main() -> None:
    out: dict[str, object] = {}
    lib = ctypes.CDLL("libcuda.so.1")
    cp.cuda.Device(0).use()
    cp.zeros(1)  # makes CuPy's (primary) context current
    props = cp.cuda.runtime.getDeviceProperties(0)
    out["gpu"] = props["name"].decode()
    out["driver"] = cp.cuda.runtime.driverGetVersion()
    out["cupy"] = cp.__version__
    for key, attr in ATTRS.items():
        v = ctypes.c_int(-1)
        rc = lib.cuDeviceGetAttribute(ctypes.byref(v), attr, 0)
        out[key] = v.value if rc == 0 else f"rc={rc}"

    ctx = ctypes.c_void_p()
    check(lib, "cuCtxGetCurrent", lib.cuCtxGetCurrent(ctypes.byref(ctx)))
    out["ctx_same_as_cupy"] = ctx.value == cp.cuda.driver.ctxGetCurrent()

    mod = cp.RawModule(code=SOURCE, options=("-std=c++17",))
    ksum = mod.get_function("probe_sum")
    kpers = mod.get_function("probe_persistent")
    out["cufunction_ptr"] = hex(ksum.kernel.ptr)

    n = 8192
    stream = cp.cuda.Stream(non_blocking=True)
    kstream = cp.cuda.Stream(non_blocking=True)
    dev = cp.zeros(n, dtype=cp.uint8)
    host = cp.cuda.alloc_pinned_memory(n)
    host_np = np.frombuffer(host, dtype=np.uint8, count=n)
    rng = np.random.default_rng(1)

    # Mapped ack memory from the driver, as the Rust side allocates it.
    hp = ctypes.c_void_p()
    check(lib, "cuMemHostAlloc", lib.cuMemHostAlloc(ctypes.byref(hp), ctypes.c_size_t(4096), 3))
    dp = ctypes.c_uint64()
    check(
        lib,
        "cuMemHostGetDevicePointer_v2",
        lib.cuMemHostGetDevicePointer_v2(ctypes.byref(dp), hp, 0),
    )
    out["mapped_dev_equals_host"] = dp.value == hp.value
    ack = np.frombuffer((ctypes.c_uint64 * 512).from_address(hp.value), dtype=np.uint64)
    ack[:] = 0

    # copy + launch + synchronise, all through the driver with CuPy's handles.
    args_seq = ctypes.c_uint64(0)
    a_frame = ctypes.c_uint64(dev.data.ptr)
    a_n = ctypes.c_uint32(n)
    a_ack = ctypes.c_uint64(dp.value)
    params = (ctypes.c_void_p * 4)(
        ctypes.cast(ctypes.byref(a_frame), ctypes.c_void_p),
        ctypes.cast(ctypes.byref(a_n), ctypes.c_void_p),
        ctypes.cast(ctypes.byref(args_seq), ctypes.c_void_p),
        ctypes.cast(ctypes.byref(a_ack), ctypes.c_void_p),
    )
    copy_ns: list[int] = []
    bad = 0
    for seq in range(1, 2001):
        host_np[:] = rng.integers(0, 256, n, dtype=np.uint8)
        want = int(host_np.sum(dtype=np.uint64))
        args_seq.value = seq
        t0 = time.perf_counter_ns()
        check(
            lib,
            "cuMemcpyHtoDAsync_v2",
            lib.cuMemcpyHtoDAsync_v2(
                ctypes.c_uint64(dev.data.ptr),
                ctypes.c_void_p(host.ptr),
                ctypes.c_size_t(n),
                ctypes.c_void_p(stream.ptr),
            ),
        )
        check(
            lib,
            "cuLaunchKernel",
            lib.cuLaunchKernel(
                ctypes.c_void_p(ksum.kernel.ptr),
                1, 1, 1, 256, 1, 1, 0,
                ctypes.c_void_p(stream.ptr),
                params,
                None,
            ),
        )  # fmt: skip
        check(lib, "cuStreamSynchronize", lib.cuStreamSynchronize(ctypes.c_void_p(stream.ptr)))
        while int(ack[0]) != seq:
            pass
        copy_ns.append(time.perf_counter_ns() - t0)
        bad += int(ack[1]) != want
    out["driver_copy_launch_sync"] = pct(copy_ns) | {"sum_mismatch": bad}

    # cuStreamWriteValue64 into CuPy device memory on a CuPy stream.
    flag_dev = cp.zeros(1, dtype=cp.uint64)
    rc = lib.cuStreamWriteValue64_v2(
        ctypes.c_void_p(stream.ptr), ctypes.c_uint64(flag_dev.data.ptr), ctypes.c_uint64(42), 0
    )
    stream.synchronize()
    out["write_value64"] = {"rc": rc, "value": int(flag_dev.get()[0])}

    # One-block persistent kernel reading mapped memory (frame + flag in mapped memory).
    sp = ctypes.c_void_p()
    check(lib, "cuMemHostAlloc", lib.cuMemHostAlloc(ctypes.byref(sp), ctypes.c_size_t(n + 64), 3))
    sdp = ctypes.c_uint64()
    lib.cuMemHostGetDevicePointer_v2(ctypes.byref(sdp), sp, 0)
    slot = np.frombuffer((ctypes.c_uint8 * (n + 64)).from_address(sp.value), dtype=np.uint8)
    flag = slot[n : n + 8].view(np.uint64)
    flag[0] = 0
    ack[:] = 0
    frames = 2000
    with kstream:
        kpers(
            (1,),
            (256,),
            (
                cp.uint64(sdp.value),
                cp.uint32(n),
                cp.uint64(dp.value),
                cp.uint64(sdp.value + n),
                cp.uint64(frames),
            ),
        )
    zc_ns: list[int] = []
    bad = 0
    for seq in range(1, frames + 1):
        slot[:n] = rng.integers(0, 256, n, dtype=np.uint8)
        want = int(slot[:n].sum(dtype=np.uint64))
        t0 = time.perf_counter_ns()
        flag[0] = seq
        deadline = t0 + 1_000_000_000
        while int(ack[0]) != seq and time.perf_counter_ns() < deadline:
            pass
        zc_ns.append(time.perf_counter_ns() - t0)
        bad += int(ack[1]) != want
    done = False
    for _ in range(200):
        if kstream.done:
            done = True
            break
        time.sleep(0.01)
    out["zerocopy_1block"] = pct(zc_ns) | {"sum_mismatch": bad, "kernel_returned": done}
    print(json.dumps(out, indent=1))
    path = os.path.join(os.environ.get("OUT", "/tmp"), "latency_probe.json")
    with open(path, "w") as f:
        json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
