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

from voltstream.fold.gpu import STAGES, GpuFolder  # noqa: E402
from voltstream.fold.gpu_naive import NaiveGpuFolder  # noqa: E402
from voltstream.fold.reference import FoldSettings  # noqa: E402
from voltstream.io.polyco import ConstantPeriod  # noqa: E402
from voltstream.observation import Observation  # noqa: E402
from voltstream.pipeline.multi_gpu_fold import fold_file_multi_gpu  # noqa: E402

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

    s = FoldSettings(dm, pred, 1024, 10.0)
    eng = cls.from_settings(obs, s, chunk_samples=chunks[0].shape[0], **kw)
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


def copy_only(cp, chunks, passes: int) -> float:
    """Seconds for the H2D copies alone of the same chunks, back to back on one stream."""
    dev = cp.empty(chunks[0].size, dtype=chunks[0].dtype)
    s = cp.cuda.Stream(non_blocking=True)
    dev.set(chunks[0].reshape(-1), stream=s)
    s.synchronize()
    times = []
    for _ in range(3):
        t0 = time.perf_counter()
        for c in chunks * passes:
            dev[: c.size].set(c.reshape(-1), stream=s)
        s.synchronize()
        times.append(time.perf_counter() - t0)
    return float(np.median(times))


def packed_row(cp, obs, dm, pred, big, nbit: int, args) -> dict:
    """Fused engine fed VDIF-framed packed bytes (2-bit levels / 4-bit offset) from pinned
    memory; with the copy-alone limit of those bytes and of complex64 (the host-decoded path).
    """
    from voltstream.dsp.packed import PackedLayout

    enc = "vdif2" if nbit == 2 else "offset"
    layout = PackedLayout.vdif_frames(nbit, enc, obs.nchan, obs.npol, 2, spf=512)
    nb = layout.nbytes(args.chunk)
    flat = big.reshape(-1).view(np.uint8)
    chunks = [flat[i * nb : (i + 1) * nb] for i in range(min(args.nchunk, flat.size // nb))]
    n_c = args.chunk * len(chunks) * args.passes * obs.nchan * obs.npol
    ts = []
    for _ in range(args.repeat):
        s = FoldSettings(dm, pred, 1024, 10.0)
        eng = GpuFolder.from_settings(obs, s, chunk_samples=args.chunk, packed=layout)
        eng.feed_packed(chunks[0], args.chunk, pinned=True)
        eng.synchronize()
        t0 = time.perf_counter()
        for c in chunks * args.passes:
            eng.feed_packed(c, args.chunk, pinned=True)
        eng.synchronize()
        ts.append(time.perf_counter() - t0)
        del eng
        cp.get_default_memory_pool().free_all_blocks()
    c64 = 8 * obs.nchan * obs.npol  # bytes per time sample as complex64
    row = {
        "nbit": nbit,
        "bytes_per_sample": nb / (args.chunk * obs.nchan * obs.npol),
        "fused_pinned_gsps": n_c / float(np.median(ts)) / 1e9,
        "copy_only_gsps": n_c / copy_only(cp, chunks, args.passes) / 1e9,
    }
    h2d = copy_ceilings(cp, nb)["h2d_pinned_GBps"]
    row["complex64_h2d_gsps"] = h2d * 1e9 / c64 * obs.nchan * obs.npol / 1e9
    print(json.dumps(row), flush=True)
    return row


def fold_variant_row(cp, obs, dm, pred, on_dev, min_blocks: int, args) -> dict:
    """The fused engine on GPU-resident data with detect_fold built for ``min_blocks``."""
    from voltstream.fold.kernels import FoldTemplate

    old, FoldTemplate.MIN_BLOCKS = FoldTemplate.MIN_BLOCKS, min_blocks
    try:
        s = FoldSettings(dm, pred, 1024, 10.0)
        eng = GpuFolder.from_settings(obs, s, chunk_samples=args.chunk, profile=True)
        for c in on_dev:
            eng.feed_device(c)
        eng.synchronize()
        ms = eng.stage_ms["fold"] / (sum(c.shape[0] for c in on_dev) * obs.nchan * obs.npol / 1e9)
        del eng
        ts = [run_once(GpuFolder, obs, dm, pred, on_dev, True, args.passes)[0] for _ in range(3)]
    finally:
        FoldTemplate.MIN_BLOCKS = old
    n = on_dev[0].shape[0] * len(on_dev) * args.passes * obs.nchan * obs.npol
    row = {
        "min_blocks": min_blocks,
        "fold_ms_per_Gsamp": ms,
        "fold_GBps": 8.0 / (ms / 1e3),  # it reads one float2 (8 B) per complex sample
        "fused_device_gsps": n / float(np.median(ts)) / 1e9,
    }
    print(json.dumps(row), flush=True)
    return row


class LoopReader:
    """Random-access reader over a pinned buffer, repeated ``passes`` times."""

    def __init__(self, obs, buf, passes: int):
        self.obs, self.buf, self.valid = obs, buf, None
        self.nsamp = buf.shape[0] * passes

    def read_raw(self, start, n):
        L = self.buf.shape[0]
        a = start % L
        if a + n <= L:
            return self.buf[a : a + n]
        idx = (start + np.arange(n)) % L  # wraps: a pageable copy, rare
        return self.buf[idx]


def timed_multi_gpu(cp, rd, settings, repeat: int, free_pool: bool, **kw) -> list[float]:
    """Seconds of each of ``repeat`` whole fold_file_multi_gpu calls on ``rd``;
    ``free_pool`` empties CuPy's pool after each (outside the timing)."""
    ts = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fold_file_multi_gpu(rd, settings, **kw)
        ts.append(time.perf_counter() - t0)
        if free_pool:
            cp.get_default_memory_pool().free_all_blocks()
    return ts


def table(header: list[str], cells: str, rows: list[dict]) -> None:
    """A markdown table (docs/benchmarks.md pastes them), numbers right-aligned: one row
    per dict, ``cells`` the space-separated format of each cell ("_" prints a space)."""
    print("| " + " | ".join(header) + " |")
    print("|" + "---:|" * len(header))
    for r in rows:
        print("| " + " | ".join(c.format(**r).replace("_", " ") for c in cells.split()) + " |")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--chunk", type=int, default=1 << 20, help="time samples per chunk")
    ap.add_argument("--nchunk", type=int, default=6, help="chunks per timed run")
    ap.add_argument("--passes", type=int, default=4, help="times each chunk is fed per run")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--dms", type=float, nargs="*", default=list(DMS))
    ap.add_argument("--no-naive", action="store_true")
    ap.add_argument(
        "--sweep-chunks",
        type=int,
        nargs="*",
        default=[1 << 20, 1 << 21, 1 << 22],
        help="chunk sizes tried (fused + pinned) at --sweep-dm",
    )
    ap.add_argument("--sweep-dm", type=float, default=26.833)
    ap.add_argument("--workers", type=int, nargs="*", default=[1, 2], help="workers on GPU 0")
    ap.add_argument(
        "--gpu-counts",
        type=int,
        nargs="*",
        default=[1],
        help="GPU counts for fold_file_multi_gpu (one worker per GPU), e.g. 1 2 on two GPUs",
    )
    ap.add_argument(
        "--fold-min-blocks",
        type=int,
        nargs="*",
        default=[],
        help="detect_fold register caps (MIN_BLOCKS) compared at --sweep-dm, data on the GPU",
    )
    ap.add_argument(
        "--packed-bits",
        type=int,
        nargs="*",
        default=[2, 4],
        help="VDIF-framed packed inputs timed at --sweep-dm (unpack_packed.cu)",
    )
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
    # One pinned buffer; the chunks of every size tried are views of it.
    big_n = args.nchunk * max([args.chunk] + list(args.sweep_chunks))
    big = cupyx.empty_pinned((big_n,) + shape[1:], dtype=np.int8)
    flat = big.reshape(-1)
    seed = np.frombuffer(rng.bytes(min(flat.size, 1 << 28)), dtype=np.int8)
    for a in range(0, flat.size, seed.size):
        flat[a : a + seed.size] = seed[: flat.size - a]
    pinned = [big[i * args.chunk : (i + 1) * args.chunk] for i in range(args.nchunk)]
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
        s = FoldSettings(dm, pred, 1024, 10.0)
        eng = GpuFolder.from_settings(obs, s, chunk_samples=args.chunk, profile=True)
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
        nb = 1 / (
            1 / row["fused_device_gsps"] + 1 / (csamp / copy_only(cp, pinned, args.passes) / 1e9)
        )
        row["no_overlap_bound_gsps"] = nb
        rows.append(row)
        print(json.dumps(row), flush=True)

    # Chunk size and copy/compute overlap at one DM: copies alone, compute alone, both.
    sweep = []
    dm = args.sweep_dm
    for c in args.sweep_chunks:
        ch = [big[i * c : (i + 1) * c] for i in range(args.nchunk)]
        dch = [cp.asarray(x) for x in ch]
        n_c = c * args.nchunk * args.passes * obs.nchan * obs.npol
        r = {"chunk": c, "copy_only_gsps": n_c / copy_only(cp, ch, args.passes) / 1e9}
        for mode, src in (("device", dch), ("pinned", ch)):
            ts = [
                run_once(GpuFolder, obs, dm, pred, src, mode == "device", args.passes)[0]
                for _ in range(args.repeat)
            ]
            r[f"fused_{mode}_gsps"] = n_c / float(np.median(ts)) / 1e9
        r["no_overlap_bound_gsps"] = 1 / (1 / r["copy_only_gsps"] + 1 / r["fused_device_gsps"])
        del dch
        cp.get_default_memory_pool().free_all_blocks()
        sweep.append(r)
        print(json.dumps(r), flush=True)

    # Workers (pipeline/multi_gpu_fold.py) on GPU 0, reading the pinned buffer themselves.
    multi = FoldSettings(dm, pred, 1024, 10.0, block_samples=args.chunk)
    wrows = []
    for nw in args.workers:
        # The whole pinned buffer, read once: no piece wraps round (a wrapped piece
        # would be a pageable gather and time the host, not the GPU).
        rd = LoopReader(obs, big, 1)
        n_w = rd.nsamp * obs.nchan * obs.npol
        ts = timed_multi_gpu(cp, rd, multi, args.repeat, True, gpus=[0], workers_per_gpu=nw)
        w = {"workers": nw, "chunk": args.chunk, "gsps": n_w / float(np.median(ts)) / 1e9}
        w["rtf"] = rd.nsamp * obs.tsamp_s / float(np.median(ts))
        wrows.append(w)
        print(json.dumps(w), flush=True)

    # Several GPUs, one worker each, on the whole pinned buffer (read once).
    grows = []
    for ng in args.gpu_counts:
        if ng > cp.cuda.runtime.getDeviceCount():
            print(f"skipping {ng} GPUs: only {cp.cuda.runtime.getDeviceCount()} visible")
            continue
        rd = LoopReader(obs, big, 1)
        n_g = rd.nsamp * obs.nchan * obs.npol
        ts = timed_multi_gpu(cp, rd, multi, args.repeat, False, gpus=list(range(ng)))
        g = {"gpus": ng, "gsps": n_g / float(np.median(ts)) / 1e9, "times_s": ts}
        g["rtf"] = rd.nsamp * obs.tsamp_s / float(np.median(ts))
        grows.append(g)
        print(json.dumps(g), flush=True)

    prows = [packed_row(cp, obs, dm, pred, big, nbit, args) for nbit in args.packed_bits]
    frows = [fold_variant_row(cp, obs, dm, pred, on_dev, mb, args) for mb in args.fold_min_blocks]

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
    print(
        f"\nDM {dm}, fused, chunk size sweep (same data; copy alone = the chunks' H2D "
        "copies back to back; no-overlap bound = 1/(1/copy + 1/compute)):\n"
    )
    table(
        ["chunk", "copy alone", "fused on GPU", "fused + pinned H2D", "no-overlap bound"],
        "2^{log2_chunk} {copy_only_gsps:.1f} {fused_device_gsps:.1f} {fused_pinned_gsps:.1f} "
        "{no_overlap_bound_gsps:.1f}",
        [dict(r, log2_chunk=int(r["chunk"]).bit_length() - 1) for r in sweep],
    )
    print(
        f"\nfold_file_multi_gpu on GPU 0, DM {dm}, pinned reader, chunk {args.chunk}, "
        "whole call (engine set-up, fill and drain, merge) timed:\n"
    )
    table(["workers", "G samples/s", "RTF"], "{workers}_on_1_GPU {gsps:.1f} {rtf:.0f}", wrows)
    if grows:
        print(f"\nfold_file_multi_gpu, one worker per GPU, DM {dm}, whole call timed:\n")
        g0 = grows[0]["gsps"]
        speedup = [dict(g, vs1=g["gsps"] / g0) for g in grows]
        table(["GPUs", "G samples/s", "RTF", "vs 1 GPU"], "{gpus} {gsps:.1f} {rtf:.0f} {vs1:.2f}x",
              speedup)  # fmt: skip
    if frows:
        print(f"\ndetect_fold register cap (MIN_BLOCKS), DM {dm}, data on the GPU:\n")
        table(
            ["MIN_BLOCKS", "fold ms/Gs", "fold GB/s", "% of D2D", "fused on GPU"],
            "{min_blocks} {fold_ms_per_Gsamp:.2f} {fold_GBps:.0f} {d2d_pct:.0f} "
            "{fused_device_gsps:.1f}",
            [dict(r, d2d_pct=100 * r["fold_GBps"] / ceil["d2d_GBps"]) for r in frows],
        )
    if prows:
        print(f"\nPacked VDIF-framed input (32 ch x 2 pol complex), DM {dm}, from pinned bytes:\n")
        header = ["bits", "bytes/sample", "copy alone", "fused + pinned H2D"]
        table([*header, "complex64 H2D limit"], "{nbit} {bytes_per_sample:g} {copy_only_gsps:.1f} "
              "{fused_pinned_gsps:.1f} {complex64_h2d_gsps:.1f}", prows)  # fmt: skip
    print()
    table(
        ["DM", *(f"{s} ms/Gs (GB/s)" for s in STAGES)],
        "{dm} " + " ".join(f"{{ms_{i}:.1f}}_({{gbps_{i}:.0f}})" for i in range(len(STAGES))),
        [dict(r, **{f"ms_{i}": r["stage_ms_per_Gsamp"][s] for i, s in enumerate(STAGES)},
              **{f"gbps_{i}": r["stage_GBps"][s] for i, s in enumerate(STAGES)}) for r in rows],
    )  # fmt: skip
    out = os.environ.get("OUT")
    if out:
        doc = {
            "device": name,
            "ceilings": ceil,
            "chunk": args.chunk,
            "nchunk": args.nchunk,
            "passes": args.passes,
            "rows": rows,
            "chunk_sweep": sweep,
            "workers": wrows,
            "gpus": grows,
            "packed": prows,
            "fold_min_blocks": frows,
        }
        Path(out, "fold_gpu.json").write_text(json.dumps(doc, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
