"""The same-run ceilings of bench/e2e.py that are not network points.

- `gpu_alone`: short runs of bench/fold_gpu.py (fused engine, 8-bit from pinned
  memory, DM 26.833; packed 2-bit) and bench/fengine_gpu.py (4096 and 32768
  channels, 10-bit, both copies), read from the JSON they write to $OUT.
- `file_fold`: `voltstream fold FILE.dada --device gpu` on a DADA file (32 channels x
  2 pols, 8-bit complex, noise) read once beforehand so it is in the page cache,
  timed whole; a 0.25 GB file first gives the fixed cost (start-up, CuPy, plans), so
  `marginal_gsps` is the rate of the bytes beyond it. G samples/s = time samples x
  channels x pols.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from e2e_receivers import FOLD, VS

HERE = Path(__file__).resolve().parent


def gpu_alone(a, workdir: Path, limit: float = 600.0) -> dict:
    """Short runs of bench/fold_gpu.py and bench/fengine_gpu.py; their JSON is kept."""
    out = {
        "fold_8bit_gsps": None,
        "fold_2bit_gsps": None,
        "fengine_4096_gsps": None,
        "fengine_32768_gsps": None,
        "errors": [],
    }
    runs = [
        (
            "fold_gpu",
            [
                "--dms",
                "26.833",
                "--no-naive",
                "--sweep-chunks",
                "--workers",
                "--gpu-counts",
                "--packed-bits",
                "2",
                "--repeat",
                "2",
                "--nchunk",
                "4",
                "--passes",
                "2",
            ],
        ),
        (
            "fengine_gpu",
            ["--channels", "4096", "32768", "--bits", "10", "--repeat", "2", "--nblocks", "4"],
        ),
    ]
    for script, args in runs:
        d = Path(tempfile.mkdtemp(dir=workdir))
        cmd = [sys.executable, str(HERE / f"{script}.py"), *args]
        r = subprocess.run(
            cmd, capture_output=True, text=True, timeout=limit, env=dict(os.environ, OUT=str(d))
        )
        try:
            doc = json.loads((d / f"{script}.json").read_text())
        except OSError:
            out["errors"].append(f"{shlex.join(cmd)}: status {r.returncode}: {r.stderr[-600:]}")
            continue
        out[script] = doc
        out[f"{script}_command"] = shlex.join(cmd[1:])
        if script == "fold_gpu":
            out["fold_8bit_gsps"] = doc["rows"][0]["fused_pinned_gsps"]
            two = [p for p in doc.get("packed", []) if p["nbit"] == 2]
            out["fold_2bit_gsps"] = two[0]["fused_pinned_gsps"] if two else None
        else:
            for row in doc["rows"]:
                out[f"fengine_{row['nchan']}_gsps"] = row["engine_pinned_gsps"]
    return out


def file_fold(a, workdir: Path, limit: float = 600.0) -> dict:
    """`voltstream fold FILE.dada --device gpu` on a file in the page cache, timed whole
    (and on a small file first, whose time is the fixed cost: marginal rate)."""
    import numpy as np

    from voltstream.formats import make_format
    from voltstream.io.dada import DadaWriter

    fmt = make_format("ynao")  # 32 channels of 4 MHz, 2 pols, 8-bit complex TFP
    block = np.random.default_rng(3).normal(0, 20, 64 << 20).clip(-127, 127).astype(np.int8)
    per_sample = fmt.nchan * fmt.npol * 2
    res = {"file_gb": a.file_gb, "runs": []}
    for gb in (min(0.25, a.file_gb / 4), a.file_gb):
        path = workdir / f"e2e-{gb:g}GB.dada"
        nblocks = max(1, round(gb * 1e9 / block.nbytes))
        w = DadaWriter(path, fmt.observation(source="E2E"))
        for _ in range(nblocks):
            w.write(block.data)
        w.close()
        nsamp = nblocks * block.nbytes // per_sample
        t0 = time.monotonic()
        subprocess.run(["cat", str(path)], stdout=subprocess.DEVNULL, check=True)
        cat_s = time.monotonic() - t0
        cmd = VS + ["fold", str(path), "--device", a.device, *FOLD]
        cmd += ["-o", str(path.with_suffix(".fits"))]
        t0 = time.monotonic()
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=limit)
        wall = time.monotonic() - t0
        res["runs"].append(
            {
                "bytes": nsamp * per_sample,
                "nsamp": nsamp,
                "wall_s": wall,
                "cat_GBps": nsamp * per_sample / cat_s / 1e9,
                "status": r.returncode,
                "command": shlex.join(["voltstream", *cmd[3:]]),
                "output": (r.stdout + r.stderr).splitlines()[-6:],
            }
        )
        # The engine's own time, should the CLI print one ("... in 12.3 s").
        if m := re.search(r"\bin ([0-9.]+) s\b", r.stdout):
            res["runs"][-1]["engine_s"] = float(m.group(1))
        if m := re.search(r"([0-9.]+) once started", r.stdout):  # start-up apart
            res["runs"][-1]["steady_gsps"] = float(m.group(1))
        path.unlink()
        path.with_suffix(".fits").unlink(missing_ok=True)
        if r.returncode != 0:
            res["error"] = f"fold exited with status {r.returncode}"
            return res
    small, big = res["runs"]
    samples = lambda run: run["nsamp"] * fmt.nchan * fmt.npol  # noqa: E731
    res["gsps"] = samples(big) / big["wall_s"] / 1e9
    dt = big["wall_s"] - small["wall_s"]
    more = samples(big) - samples(small)
    res["marginal_gsps"] = more / dt / 1e9 if more > 0 and dt > 0 else None
    res["steady_gsps"] = big.get("steady_gsps")
    return res
