"""The file source alone (pipeline/file_source.py): how fast a baseband file in the page
cache reaches the pool's host buffers, with no GPU and no consumer work (each block is
released as soon as it is handed out). This is the ceiling of ``voltstream fold FILE
--device gpu`` on the read side.

    python bench/file_source.py [--dir /dev/shm] [--size-gb 3] [--formats dada,vdif]
                                [--readers 1,2,4] [--depth 4] [--block-mb 64] [--repeat 3]
                                [--stripe-mb 8] [--alloc auto|numpy|pinned] [--direct]
                                [--json out.json]

Writes the test files (random bytes; DADA 8-bit complex, 64 channels x 2 pols; VDIF
8-bit complex, 32 channels, 2 threads of 8192-byte data arrays; ``vdif-gather`` is that
file with one frame removed, which takes the frame-by-frame path) unless they exist,
reads each once to warm the page cache, then reports per format and reader count the
best of ``--repeat`` runs: GB/s of file bytes, G samples/s (one complex value of one
channel and pol = 2 bytes), and a single-thread memcpy of the same size for scale.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

import numpy as np

FMT_FILES = {"dada": "bench_fs.dada", "vdif": "bench_fs.vdif", "vdif-gather": "bench_fs_gap.vdif"}
CHUNK = 64 << 20


def write_dada(path: Path, nbytes: int) -> None:
    from voltstream.io.dada import format_header
    from voltstream.observation import Observation

    obs = Observation(nchan=64, npol=2, freq_mhz=1400.0, bw_mhz=256.0, tsamp_s=0.25e-6,
                      start_mjd=60000, start_sec=0.0, source="B1937+21", telescope="bench",
                      nbit=8, ndim=2)  # fmt: skip
    rnd = np.random.default_rng(1).integers(0, 256, CHUNK, dtype=np.uint8)
    with open(path, "wb") as f:
        f.write(format_header(obs))
        left = nbytes
        while left > 0:
            n = min(left, CHUNK)
            f.write(rnd[:n].data)
            left -= n


def write_vdif(path: Path, nbytes: int, drop: int | None = None) -> None:
    from voltstream.io import vdif

    dlen, npol, fps = 8192, 2, 15625  # 32 ch x 8-bit complex: 128 samples per frame
    flen = dlen + vdif.HEADER_LEN
    ntime = max(1, nbytes // (npol * flen))
    batch = max(1, CHUNK // (npol * flen))
    rnd = np.random.default_rng(2).integers(0, 256, (batch * npol, flen), dtype=np.uint8)
    with open(path, "wb") as f:
        for t0 in range(0, ntime, batch):
            nt = min(batch, ntime - t0)
            absf = np.repeat(np.arange(t0, t0 + nt), npol)
            rnd[: nt * npol, : vdif.HEADER_LEN] = vdif.encode_headers(
                seconds=absf // fps, frame=absf % fps, thread=np.tile(np.arange(npol), nt),
                frame_len=flen, nchan=32, bits_per_sample=8, complex_data=True,
            )  # fmt: skip
            rows = rnd[: nt * npol]
            if drop is not None and t0 <= drop < t0 + nt:
                rows = np.delete(rows, (drop - t0) * npol + 1, axis=0)
            f.write(rows.data)
    meta = {"freq_mhz": 1400.0, "frames_per_second": fps}
    Path(str(path) + ".json").write_text(json.dumps(meta))


def warm(path: Path) -> None:
    buf = bytearray(CHUNK)
    with open(path, "rb", buffering=0) as f:
        while f.readinto(buf):
            pass


def memcpy_gbs(nbytes: int) -> float:
    a = np.ones(nbytes, np.uint8)
    b = np.ones(nbytes, np.uint8)
    best = 0.0
    for _ in range(3):
        t0 = time.perf_counter()
        np.copyto(b, a)
        best = max(best, nbytes / (time.perf_counter() - t0) / 1e9)
    return best


def block_samples_for(path, block_mb: int) -> int:
    """Samples per block of about ``block_mb`` MiB (the source rounds to whole frames)."""
    from voltstream.pipeline.file_source import open_file_source

    untouched = lambda n: np.empty(n, np.uint8)  # noqa: E731
    with open_file_source(path, readers=1, depth=1, alloc=untouched) as src:
        per = src.block_bytes / src.block_samples
    return max(1, int((block_mb << 20) / per))


class Preallocated:
    """Hands out buffers made once (so a run's time has no allocation in it): the
    source's alloc, called ``depth`` times per open."""

    def __init__(self, alloc):
        self.alloc, self.bufs, self.i = alloc, [], 0

    def __call__(self, nbytes):
        if self.i == len(self.bufs):
            self.bufs.append(self.alloc(nbytes))
        buf = self.bufs[self.i]
        if buf.size < nbytes:
            buf = self.bufs[self.i] = self.alloc(nbytes)
        self.i += 1
        return buf[:nbytes]


def read_once(path, block_samples, readers, depth, pool, direct, stripe) -> dict:
    from voltstream.io.baseband import open_baseband
    from voltstream.pipeline.file_source import FileSource

    pool.i = 0
    t_open = time.perf_counter()
    reader = open_baseband(path)  # VDIF: every header checked, once per file
    t0 = time.perf_counter()  # the readers start inside FileSource()
    src = FileSource(reader, block_samples, readers, depth, pool, direct=direct,
                     stripe_bytes=stripe)  # fmt: skip
    try:
        nbytes = nsamp = 0
        for b in src:
            nbytes += b.parts[0][1]
            nsamp += b.nsamp
            b.release()
        dt = time.perf_counter() - t0
        o = src.obs
        return {
            "kind": src.kind,
            "open_s": t0 - t_open,
            "seconds": dt,
            "GB/s": nbytes / dt / 1e9,
            "Gsamples/s": nsamp * o.nchan * o.npol / dt / 1e9,
            "block_MiB": src.block_bytes / (1 << 20),
            "read_s": src.read_s,
            "direct": src.direct,
            "notes": src.notes,
        }
    finally:
        src.close()


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--dir", default="/dev/shm")
    ap.add_argument("--size-gb", type=float, default=3.0)
    ap.add_argument("--formats", default="dada,vdif")
    ap.add_argument("--readers", default="1,2,4")
    ap.add_argument("--depth", type=int, default=4)
    ap.add_argument("--block-mb", type=int, default=64)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--stripe-mb", type=int, default=8, help="bytes of one read, MiB")
    ap.add_argument("--alloc", choices=("auto", "numpy", "pinned"), default="auto")
    ap.add_argument("--direct", action="store_true", help="O_DIRECT reads (bypass the cache)")
    ap.add_argument("--keep", action="store_true", help="leave the test files")
    ap.add_argument("--json")
    a = ap.parse_args(argv)

    from voltstream.pipeline import file_source as fs

    if a.alloc == "auto":
        alloc, note = fs._default_alloc()
        if note:
            print(note)
    else:
        alloc = {"numpy": fs.pageable_alloc, "pinned": fs.pinned_alloc}[a.alloc]
    pool = Preallocated(alloc)
    nbytes = int(a.size_gb * 1e9)
    out = {"cpus": os.cpu_count(), "size_bytes": nbytes, "memcpy_GB/s": memcpy_gbs(1 << 30)}
    print(f"{os.cpu_count()} CPUs; single-thread memcpy {out['memcpy_GB/s']:.1f} GB/s")
    made = []
    for fmt in a.formats.split(","):
        path = Path(a.dir) / FMT_FILES[fmt]
        if not path.exists():
            if fmt == "dada":
                write_dada(path, nbytes)
            else:
                write_vdif(path, nbytes, drop=10 if fmt == "vdif-gather" else None)
            made.append(path)
        warm(path)
        for r in (int(x) for x in a.readers.split(",")):
            bs = block_samples_for(path, a.block_mb)
            runs = [read_once(path, bs, r, a.depth, pool, a.direct, a.stripe_mb << 20)
                    for _ in range(a.repeat)]  # fmt: skip
            best = max(runs, key=lambda x: x["GB/s"])
            out[f"{fmt}/readers={r}"] = best
            print(f"{fmt:12s} readers {r}: {best['GB/s']:6.2f} GB/s  "
                  f"{best['Gsamples/s']:6.2f} G samples/s  ({best['kind']}, "
                  f"{best['block_MiB']:.0f} MiB blocks, depth {a.depth}"
                  f"{', O_DIRECT' if best['direct'] else ''}; opening the file took "
                  f"{best['open_s']:.3f} s)")  # fmt: skip
        notes = out[f"{fmt}/readers={r}"]["notes"]
        if notes:
            print("   notes:", "; ".join(notes))
    if not a.keep:
        for p in made:
            p.unlink()
            Path(str(p) + ".json").unlink(missing_ok=True)
    if a.json:
        Path(a.json).write_text(json.dumps(out, indent=1) + "\n")
    return out


if __name__ == "__main__":
    main()
