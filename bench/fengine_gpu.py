#!/usr/bin/env python3
"""GPU F-engine benchmark: 1024, 4096 and 32768 channels, 16 taps, 8- and 10-bit input.

For each configuration, in the same run:

- engine, both copies: ``GpuFEngine.process_packed_async`` fed from pinned host
  memory, heaps copied back to pinned memory (three streams overlap the copy
  in, the kernels and the copy out);
- engine, GPU only: the three kernels (FIR from packed samples, cuFFT R2C,
  post-process) on data already on the GPU, timed with CUDA events, and each
  kernel's bytes moved against the same-run device-to-device copy (the roofline);
- naive CuPy: the same steps as whole-array CuPy operations
  (``voltstream.fengine.gpu.naive_channelize``), GPU only and with synchronous
  copies in and out;
- ``cupyx.signal.channelize_poly`` on the same samples (FIR + FFT only, float32
  input, GPU only), when this CuPy has it.

Samples are real digitiser samples summed over both polarisations. Markdown to
stdout; JSON to $OUT/fengine_gpu.json when $OUT is set. Run on the GPU machine:
scripts/gpu.sh bench-fengine.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "python"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from fold_gpu import copy_ceilings  # noqa: E402
from voltstream.fengine.gpu import GpuFEngine, naive_channelize  # noqa: E402
from voltstream.sim.spead import pack_samples  # noqa: E402

SPH = 256  # spectra per heap, as MeerKAT


def random_packed(rng, nsamp: int, bits: int) -> np.ndarray:
    """(2, nbytes) packed samples: noise of a few steps rms, packed once (slow on the host)."""
    base = 1 << 16  # pack a small piece and tile it: the GPU work does not depend on values
    lim = (1 << (bits - 1)) - 1
    x = np.clip(np.round(rng.standard_normal((2, base)) * lim / 6), -lim, lim).astype(np.int64)
    piece = np.stack([pack_samples(x[p], bits) for p in range(2)])
    return np.tile(piece, (1, nsamp // base))


def median_time(fn, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return float(np.median(times))


def engine_pinned(cp, eng, pinned, block: int, nblocks: int) -> float:
    """Seconds for ``nblocks`` blocks through process_packed_async, both copies included."""
    t = eng.slots.end
    for i in range(4):  # warm-up: FFT plans, the three pinned output buffers
        eng.process_packed_async(pinned[i % 2], t)
        t += block
    eng.flush()
    cp.cuda.Device().synchronize()
    t0 = time.perf_counter()
    for i in range(nblocks):
        eng.process_packed_async(pinned[i % 2], t)
        t += block
    eng.flush(copy=False)
    return time.perf_counter() - t0


def copy_pair(cp, pinned, nbytes_out: int, nblocks: int) -> float:
    """Seconds for ``nblocks`` (copy in, copy out) pairs on two streams: the copy limit."""
    import cupyx

    dev_in = [cp.empty(pinned[0].shape, dtype=cp.uint8) for _ in range(2)]
    dev_out = cp.zeros(nbytes_out, dtype=cp.uint8)
    host_out = cupyx.empty_pinned(nbytes_out, dtype=np.uint8)
    s_in, s_out = cp.cuda.Stream(non_blocking=True), cp.cuda.Stream(non_blocking=True)
    cp.cuda.Device().synchronize()
    t0 = time.perf_counter()
    for i in range(nblocks):
        src = pinned[i % 2]
        dev_in[i % 2].data.copy_from_host_async(src.ctypes.data, src.nbytes, s_in)
        dev_out.data.copy_to_host_async(host_out.ctypes.data, nbytes_out, s_out)
    s_in.synchronize()
    s_out.synchronize()
    return time.perf_counter() - t0


def kernel_times(cp, eng, dev_raw, block: int, repeat: int) -> dict:
    """Milliseconds per kernel on one block already on the GPU (events, serialised)."""
    n, nspec = eng.plan.step, (block - eng.plan.window_len) // eng.plan.step + 1
    nslots = nspec // SPH
    nspec = nslots * SPH
    starts = cp.asarray(np.tile(np.arange(nspec, dtype=np.int64) * n, (2, 1)))
    fir = cp.empty((2, nspec, n), dtype=cp.float32)
    out = cp.empty((nslots, eng.nchan, SPH, 2, 2), dtype=cp.int8)
    sat = cp.zeros((nslots, 2), dtype=cp.uint64)
    rot = cp.asarray(eng.kernels.rotation(np.full((2, nspec), 1e-10), np.ones((2, nspec)), 1e6))
    gains = cp.ones((2, eng.nchan), dtype=cp.complex64)
    slots = cp.arange(nslots, dtype=cp.int32)
    ids = cp.arange(nslots, dtype=cp.int64)
    state = {}

    def run_fir():
        eng.kernels.fir(dev_raw, starts, eng._w, fir)

    def run_fft():
        state["spec"] = cp.fft.rfft(fir, axis=-1)

    def run_post():
        eng.kernels.post(state["spec"], rot, gains, slots, ids, out, sat, 12345)

    res = {}
    for name, fn in (("fir", run_fir), ("fft", run_fft), ("post", run_post)):
        fn()
        ms = []
        for _ in range(repeat):
            a, b = cp.cuda.Event(), cp.cuda.Event()
            a.record()
            fn()
            b.record()
            b.synchronize()
            ms.append(cp.cuda.get_elapsed_time(a, b))
        res[name] = float(np.median(ms))
    nsamp = 2 * nspec * n
    bits = eng.sample_bits
    # Bytes each kernel must move (read + write), per block.
    moved = {
        "fir": nsamp * bits / 8 + nsamp * 4,
        "fft": nsamp * 4 + 2 * nspec * (eng.nchan + 1) * 8,
        "post": 2 * nspec * eng.nchan * 8 + nsamp,
    }
    return {"ms": res, "bytes": moved, "nsamp": nsamp}


def naive_times(cp, eng, dev_raw, host_raw, repeat: int) -> tuple[float, float]:
    gains = cp.ones((2, eng.nchan), dtype=cp.complex64)

    def gpu_only():
        naive_channelize(cp, dev_raw, eng.sample_bits, eng._w, eng.nchan, gains, SPH)
        cp.cuda.Device().synchronize()

    def with_copies():
        d = cp.asarray(host_raw)
        q = naive_channelize(cp, d, eng.sample_bits, eng._w, eng.nchan, gains, SPH)
        cp.asnumpy(q)

    gpu_only()
    with_copies()
    return median_time(gpu_only, repeat), median_time(with_copies, repeat)


def channelize_poly_time(cp, eng, dev_raw, block: int, repeat: int):
    try:
        from cupyx.signal import channelize_poly
    except ImportError:
        return None, "cupyx.signal.channelize_poly not in this CuPy"
    x = cp.asarray(cp.random.standard_normal(block), dtype=cp.float32)
    h = eng._w

    def run():
        for _ in range(2):  # one call per polarisation
            channelize_poly(x, h, 2 * eng.nchan)
        cp.cuda.Device().synchronize()

    try:
        run()
    except Exception as exc:  # report, do not hide: the table says why it is missing
        return None, f"{type(exc).__name__}: {exc}"[:200]
    return median_time(run, repeat), ""


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--channels", type=int, nargs="*", default=[1024, 4096, 32768])
    ap.add_argument("--bits", type=int, nargs="*", default=[8, 10])
    ap.add_argument("--taps", type=int, default=16)
    ap.add_argument("--block-log2", type=int, default=26, help="samples per pol per block (2^N)")
    ap.add_argument("--nblocks", type=int, default=12, help="blocks per timed pinned run")
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args(argv)

    import cupy as cp
    import cupyx

    name = cp.cuda.runtime.getDeviceProperties(0)["name"].decode()
    block = 1 << args.block_log2
    rng = np.random.default_rng(1)
    ceil = copy_ceilings(cp, 2 * block)
    print(f"# F-engine on {name}, block {block} samples/pol, {args.taps} taps, {SPH} spectra/heap")
    print(
        f"copy ceilings: pinned H2D {ceil['h2d_pinned_GBps']:.1f} GB/s, "
        f"device-to-device {ceil['d2d_GBps']:.0f} GB/s (roofline)\n"
    )
    rows = []
    for bits in args.bits:
        host = random_packed(rng, block, bits)
        pinned = []
        for _ in range(2):
            buf = cupyx.empty_pinned(host.shape, dtype=np.uint8)
            buf[:] = host
            pinned.append(buf)
        dev_raw = cp.zeros((2, (host.shape[1] + 8 + 15) // 16 * 16), dtype=cp.uint8)
        dev_raw[:, : host.shape[1]] = cp.asarray(host)
        for nchan in args.channels:
            eng = GpuFEngine(nchan, args.taps, SPH, sample_bits=bits, sample_rate_hz=1712e6)
            gsamp = 2 * block * args.nblocks / 1e9
            t_pinned = engine_pinned(cp, eng, pinned, block, args.nblocks)
            # 8-bit output is one byte per input sample (4-bit: half a byte).
            t_copy = copy_pair(cp, pinned, 2 * block, args.nblocks)
            k = kernel_times(cp, eng, dev_raw, block, args.repeat)
            k_total = sum(k["ms"].values()) / 1e3
            t_naive, t_naive_copy = naive_times(cp, eng, dev_raw, host, args.repeat)
            t_poly, poly_note = channelize_poly_time(cp, eng, dev_raw, block, args.repeat)
            row = {
                "bits": bits,
                "nchan": nchan,
                "engine_pinned_gsps": gsamp / t_pinned,
                "copy_limit_gsps": gsamp / t_copy,
                "engine_gpu_gsps": k["nsamp"] / k_total / 1e9,
                "naive_gpu_gsps": 2 * block / t_naive / 1e9,
                "naive_copy_gsps": 2 * block / t_naive_copy / 1e9,
                "channelize_poly_gsps": None if t_poly is None else 2 * block / t_poly / 1e9,
                "channelize_poly_note": poly_note,
                "kernel_ms": k["ms"],
                "kernel_GBps": {s: k["bytes"][s] / (k["ms"][s] / 1e3) / 1e9 for s in k["ms"]},
                "heaps_made": eng.counters.heaps_made,
                "flagged": eng.counters.flagged_spectra,
            }
            row["kernel_roofline"] = {
                s: v / ceil["d2d_GBps"] for s, v in row["kernel_GBps"].items()
            }
            rows.append(row)
            del eng
            cp.get_default_memory_pool().free_all_blocks()
            print(f"done {bits}-bit {nchan} ch", file=sys.stderr)
    print(
        "| input | channels | copies alone (limit) | engine, both copies | engine, GPU only "
        "| naive CuPy, GPU only "
        "| naive, with copies | engine / naive (copies) | channelize_poly, GPU only |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        poly = (
            f"{r['channelize_poly_gsps']:.1f}"
            if r["channelize_poly_gsps"]
            else f"n/a ({r['channelize_poly_note']})"
        )
        ratio = r["engine_pinned_gsps"] / r["naive_copy_gsps"]
        print(
            f"| {r['bits']}-bit | {r['nchan']} | {r['copy_limit_gsps']:.1f} | "
            f"{r['engine_pinned_gsps']:.1f} | "
            f"{r['engine_gpu_gsps']:.1f} | {r['naive_gpu_gsps']:.1f} | "
            f"{r['naive_copy_gsps']:.1f} | {ratio:.1f}x | {poly} |"
        )
    print("\nkernel time per block, ms (GB/s moved, fraction of the d2d roofline):\n")
    print("| input | channels | FIR | FFT | post |")
    print("|---|---:|---:|---:|---:|")
    for r in rows:
        cells = [
            f"{r['kernel_ms'][s]:.2f} ({r['kernel_GBps'][s]:.0f}, {r['kernel_roofline'][s]:.0%})"
            for s in ("fir", "fft", "post")
        ]
        print(f"| {r['bits']}-bit | {r['nchan']} | " + " | ".join(cells) + " |")
    out = os.environ.get("OUT")
    if out:
        doc = {"device": name, "ceilings": ceil, "block": block, "taps": args.taps, "rows": rows}
        Path(out, "fengine_gpu.json").write_text(json.dumps(doc, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
