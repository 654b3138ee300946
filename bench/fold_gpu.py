#!/usr/bin/env python3
"""GPU fold benchmark: the coherent-dedispersion paper's configuration
(32 channels of 4 MHz, 2 polarisations, 8-bit complex; S band, 2256 MHz centre)
at the DMs of its Table 3, fused engine and naive CuPy side by side.

Reports giga complex samples per second (all channels and polarisations) and
the real-time factor, with the data already on the GPU ("device") and with the
host-to-GPU copy from pinned memory ("pinned"), the time per stage of the fused
engine (one profiled pass, stages serialised), and the copy ceilings (pinned
H2D, device-to-device). Markdown to stdout; JSON to $OUT/fold_gpu.json when
$OUT is set. Run on the GPU machine: scripts/gpu.sh bench.
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

from voltstream.dsp.gpu_fold import STAGES, GpuFolder, NaiveGpuFolder  # noqa: E402
from voltstream.io.polyco import ConstantPeriod  # noqa: E402
from voltstream.observation import Observation  # noqa: E402

DMS = (4.864, 26.833, 35.727, 67.99, 147.29, 478.8)
PAPER_NFFT = dict(zip(DMS, (64, 512, 1024, 2048, 4096, 16384), strict=True))


def copy_ceilings(cp, nbytes: int) -> dict:
    import cupyx

    host = cupyx.empty_pinned((nbytes,), dtype=np.uint8)
    host[:] = 1
    dev = cp.empty(nbytes, dtype=np.uint8)
    dev2 = cp.empty(nbytes, dtype=np.uint8)
    dev.set(host)
    cp.cuda.Device().synchronize()
    res = {}
    for name, fn, moved in (
        ("h2d_pinned_GBps", lambda: dev.set(host), nbytes),
        ("d2d_GBps", lambda: dev2.__setitem__(slice(None), dev), 2 * nbytes),
    ):
        times = []
        for _ in range(5):
            t0 = time.perf_counter()
            fn()
            cp.cuda.Device().synchronize()
            times.append(time.perf_counter() - t0)
        res[name] = moved / float(np.median(times)) / 1e9
    return res


def run_once(cls, obs, dm, pred, chunks, device: bool, passes: int, **kw):
    """Seconds to fold all ``chunks`` (after a warm-up chunk) with a fresh engine."""
    import cupy as cp

    eng = cls(obs, dm, pred, 1024, 10.0, chunk_samples=chunks[0].shape[0], **kw)
    eng.feed_device(chunks[0]) if device else eng.feed(chunks[0], pinned=True)
    eng.synchronize()
    cp.cuda.Device().synchronize()
    t0 = time.perf_counter()
    for c in chunks * passes:
        if device:
            eng.feed_device(c)
        else:
            eng.feed(c, pinned=True)
    eng.synchronize()
    dt = time.perf_counter() - t0
    return dt, eng


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--chunk", type=int, default=1 << 20, help="time samples per chunk")
    ap.add_argument("--nchunk", type=int, default=6, help="chunks per timed run")
    ap.add_argument("--passes", type=int, default=4, help="times each chunk is fed per run")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--dms", type=float, nargs="*", default=list(DMS))
    ap.add_argument("--no-naive", action="store_true")
    args = ap.parse_args(argv)

    import cupy as cp
    import cupyx

    dev = cp.cuda.Device()
    props = cp.cuda.runtime.getDeviceProperties(dev.id)
    name = props["name"].decode() if isinstance(props["name"], bytes) else props["name"]
    obs = Observation(nchan=32, npol=2, freq_mhz=2256.0, bw_mhz=128.0, tsamp_s=0.25e-6)
    pred = ConstantPeriod(0.089, obs.start_mjd, obs.start_sec)
    shape = (args.chunk, obs.nchan, obs.npol, 2)
    rng = np.random.default_rng(1)
    pinned = []
    for _ in range(args.nchunk):
        h = cupyx.empty_pinned(shape, dtype=np.int8)
        h[...] = rng.integers(-128, 128, shape, dtype=np.int8)
        pinned.append(h)
    on_dev = [cp.asarray(h) for h in pinned]
    dev.synchronize()
    nsamp = args.chunk * args.nchunk * args.passes
    csamp = nsamp * obs.nchan * obs.npol
    prof_csamp = args.chunk * args.nchunk * obs.nchan * obs.npol
    duration = nsamp * obs.tsamp_s
    ceil = copy_ceilings(cp, pinned[0].nbytes)
    print(f"# GPU fold benchmark on {name}")
    print(
        f"{obs.nchan} ch x {abs(obs.chan_bw_mhz):g} MHz x {obs.npol} pol, 8-bit complex at "
        f"{obs.freq_mhz:g} MHz; {args.nchunk} pinned chunks of {args.chunk} samples fed "
        f"{args.passes} times "
        f"({csamp / 1e9:.2f} G complex samples, {duration:.3f} s of data) per run, "
        f"median of {args.repeat}; pinned H2D {ceil['h2d_pinned_GBps']:.1f} GB/s "
        f"(= {ceil['h2d_pinned_GBps'] / 2:.1f} G samples/s), D2D {ceil['d2d_GBps']:.0f} GB/s"
    )
    rows = []
    for dm in args.dms:
        row = {"dm": dm, "paper_nfft": PAPER_NFFT.get(dm)}
        for variant, cls in (("fused", GpuFolder), ("naive", NaiveGpuFolder)):
            if variant == "naive" and args.no_naive:
                continue
            for mode in ("device", "pinned"):
                times = []
                for _ in range(args.repeat):
                    src = on_dev if mode == "device" else pinned
                    dt, eng = run_once(cls, obs, dm, pred, src, mode == "device", args.passes)
                    times.append(dt)
                    del eng
                    cp.get_default_memory_pool().free_all_blocks()
                t = float(np.median(times))
                row[f"{variant}_{mode}_gsps"] = csamp / t / 1e9
                row[f"{variant}_{mode}_rtf"] = duration / t
        # One profiled pass of the fused engine: stages serialised by events.
        eng = GpuFolder(obs, dm, pred, 1024, 10.0, chunk_samples=args.chunk, profile=True)
        for c in pinned:
            eng.feed(c, pinned=True)
        eng.synchronize()
        row["nfft"], row["step"] = eng.plan.nfft, eng.plan.step
        ratio = eng.plan.nfft / eng.plan.step
        row["stage_ms_per_Gsamp"] = {k: eng.stage_ms[k] / (prof_csamp / 1e9) for k in STAGES}
        # Bytes each stage must move per complex sample (framing inflates by nfft/step).
        bytes_per = {
            "h2d": 2.0,
            "unpack": 2.0 + 8.0 * ratio,
            "fft": 16.0 * ratio,
            "chirp": 16.0 * ratio,
            "ifft": 16.0 * ratio,
            "fold": 8.0,
        }
        row["stage_GBps"] = {
            k: (bytes_per[k] * prof_csamp / 1e9) / (eng.stage_ms[k] / 1e3) if eng.stage_ms[k] else 0
            for k in STAGES
        }
        del eng
        cp.get_default_memory_pool().free_all_blocks()
        rows.append(row)
        print(json.dumps(row), flush=True)

    print()
    print(
        "| DM | nfft (paper) | fused, on GPU | fused + pinned H2D | RTF (pinned) "
        "| naive, on GPU | naive + H2D | fused/naive (H2D) |"
    )
    print("|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        nv = r.get("naive_pinned_gsps")
        print(
            f"| {r['dm']} | {r['nfft']} ({r['paper_nfft']}) | {r['fused_device_gsps']:.1f} "
            f"| {r['fused_pinned_gsps']:.1f} | {r['fused_pinned_rtf']:.0f} "
            + (
                f"| {r['naive_device_gsps']:.1f} | {nv:.1f} | {r['fused_pinned_gsps'] / nv:.1f}x |"
                if nv
                else "| - | - | - |"
            )
        )
    print("\nG complex samples/s; RTF = seconds of data per second of wall time.")
    print("\n| DM | " + " | ".join(f"{s} ms/Gs (GB/s)" for s in STAGES) + " |")
    print("|---:|" + "---:|" * len(STAGES))
    for r in rows:
        cells = [f"{r['stage_ms_per_Gsamp'][s]:.1f} ({r['stage_GBps'][s]:.0f})" for s in STAGES]
        print(f"| {r['dm']} | " + " | ".join(cells) + " |")
    out = os.environ.get("OUT")
    if out:
        doc = {
            "device": name,
            "ceilings": ceil,
            "chunk": args.chunk,
            "nchunk": args.nchunk,
            "rows": rows,
        }
        Path(out, "fold_gpu.json").write_text(json.dumps(doc, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
