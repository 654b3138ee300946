"""The live fold's GPU stage alone, through the product's own host-to-GPU path.

The same objects `voltstream fold --listen --device gpu` builds (pipeline/live.py):
a GpuFolder over the format's chunk layout, a StageRunner with its Handoff and a
HostRegistry, fed by a chunk timeline; only the capture is replaced by a pool of
page-locked host chunks holding random bytes, handed over as fast as the stage takes
them. So this is the "GPU alone" ceiling of the live product (copy, kernels and the
Python per block), the same-run baseline of bench/e2e.py.

    python bench/fold_stage.py [--formats ynao,vdif8,vdif2] [--seconds 5] [--json out.json]

Prints per format: Gb/s of packet payload, G samples/s (complex samples of one
channel and pol), host ms per block against the block's duration, GPU busy %.
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np

FORMATS = {
    "ynao": dict(name="ynao"),
    "vdif8": dict(name="vdif", nchan=32, vdif_payload=8192),
    "vdif2": dict(name="vdif", nchan=32, vdif_payload=8192, bits=2),
}


class HostChunk:
    """A stand-in for `_core.Chunk` over a slice of one page-locked pool."""

    def __init__(self, pool, k, nbytes, ppc, streams):
        self.pool, self.k = pool, k
        self.address = pool.ctypes.data + k * nbytes
        self.packets_per_chunk, self.streams = ppc, list(range(streams))
        self.present_count = ppc * streams
        self.chunk_id = 0
        self.thread = 0
        self.free = True

    def release(self):
        self.free = True


def run(fmt_key: str, seconds: float, dm: float, ppc: int | None) -> dict:
    import cupy
    import cupyx

    from voltstream.capture.config import CaptureSettings
    from voltstream.capture.timeline import ChunkTimeline
    from voltstream.fold.gpu import GpuFolder
    from voltstream.fold.reference import FoldSettings
    from voltstream.formats import make_format
    from voltstream.io.polyco import ConstantPeriod
    from voltstream.pipeline.gpu import HostRegistry, gpu_stage_runner
    from voltstream.pipeline.live import GpuChunking

    kw = dict(FORMATS[fmt_key])
    fmt = make_format(kw.pop("name"), chan_bw_mhz=4.0, **kw)
    obs = fmt.observation(start_mjd=60000, start_sec=0.0)
    ppc, _ = GpuChunking(ppc, 1024).sized(fmt, CaptureSettings.of("127.0.0.1:0"))
    nsamp = ppc * fmt.samples_per_packet
    nbytes = fmt.streams * ppc * fmt.payload_len
    pred = ConstantPeriod(0.0333, obs.start_mjd, obs.start_sec)
    eng = GpuFolder.from_settings(obs, FoldSettings(dm, pred, 256, 1.0),
                                  packed=fmt.chunk_layout(ppc), chunk_samples=nsamp,
                                  raw_bytes=nbytes)  # fmt: skip
    eng.warm_up(nsamp, seconds * 4)
    nchunks = 8
    pool = cupyx.empty_pinned(nchunks * nbytes, np.uint8)  # pinned as the registry would
    pool[:] = np.random.default_rng(0).integers(0, 256, pool.size, dtype=np.uint8)
    chunks = [HostChunk(pool, k, nbytes, ppc, fmt.streams) for k in range(nchunks)]
    consumer = gpu_stage_runner(eng, fmt, HostRegistry())
    timeline = ChunkTimeline(fmt.streams, ppc, consumer.take)
    cid, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        c = chunks[cid % nchunks]
        while not c.free:
            consumer.poll()
        c.free, c.chunk_id = False, cid
        timeline.add(c)
        consumer.poll()
        cid += 1
    timeline.finish()
    consumer.finish()
    cupy.cuda.runtime.deviceSynchronize()
    wall = time.perf_counter() - t0
    samples = consumer.samples_fed
    return {
        "format": fmt_key,
        "packets_per_chunk": ppc,
        "block_mb": nbytes / 2**20,
        "blocks": consumer.blocks,
        "seconds": wall,
        "gbps": 8 * consumer.bytes_fed / wall / 1e9,
        "gsps": samples * fmt.nchan * fmt.npol / wall / 1e9,
        "host_ms_per_block": 1e3 * eng.host_busy_s / max(eng.blocks_fed, 1),
        "block_ms_at_real_time": 1e3 * nsamp * obs.tsamp_s,
        "gpu_busy_pct": 100 * eng.busy_ms() / 1e3 / wall,
        "real_time_gbps": fmt.data_rate_gbps * fmt.payload_len / fmt.packet_len,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--formats", default="ynao,vdif8,vdif2")
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--dm", type=float, default=26.833)
    ap.add_argument("--packets-per-chunk", type=int, default=None)
    ap.add_argument("--json", default=None)
    a = ap.parse_args()
    rows = [run(f, a.seconds, a.dm, a.packets_per_chunk) for f in a.formats.split(",")]
    print("| format | block MiB | Gb/s | G samples/s | host ms/block | block ms | GPU busy |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        print(f"| {r['format']} | {r['block_mb']:.0f} | {r['gbps']:.1f} | {r['gsps']:.1f} | "
              f"{r['host_ms_per_block']:.2f} | {r['block_ms_at_real_time']:.1f} | "
              f"{r['gpu_busy_pct']:.0f}% |")  # fmt: skip
    if a.json:
        with open(a.json, "w") as f:
            json.dump(rows, f, indent=2)


if __name__ == "__main__":
    main()
