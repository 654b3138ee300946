"""The single-pulse search's benchmark (issue 28 item 2; docs/search.md "GPU search").

(a) Headroom: the search of one gulp of YNAO's band as `voltstream filterbank` makes
    it for a search (32 x 4 MHz around 1420 MHz split into 4096 channels of 31.25
    kHz, 64 us: 15625 samples a second), DM 0-2000 (4152 trials), boxcars to 4096
    samples, on noise with a dispersed burst in it: the engine's time for a gulp of
    --gulp seconds of arrival times (read with the overlap: the sweep at DM 2000 and
    the widest boxcar) -> headroom = data seconds / compute seconds (target >= 4: the
    search keeps up with 4x YNAO's rate). The first gulp compiles the kernels and is
    not counted; --repeats more are timed and the median taken. The host-to-GPU copy
    of the gulp is timed apart (`h2d_s`; a live search fed by the CPU filterbank pays
    it, one fed by a GPU filterbank does not).
(b) Live latency: `voltstream simulate --signal frb` sends bursts over loopback into
    `voltstream search --listen` (capture, filterbank and search in one process);
    its report's detection latencies (the wall time each candidate line is written
    less the wall time the burst's last sample arrived, docs/search.md "Live
    search"): p50, p99 and how many of the bursts were found (target p99 < 2 s).

--device cpu and --tiny run the same logic on the NumPy reference at a toy size (CI:
tests/test_bench_search.py). Results: --json (default docs/results/search.json) is
merged into when it exists: every figure keeps the date, command and machine of the
run that measured it, a run that did not measure one (null) never replaces it, and
each run is kept whole in ``runs``.

    scripts/gpu.sh bench-search                  # both parts, on the GPU machine
    python bench/search.py --device cpu --tiny --json /tmp/s.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shlex
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT / "python"))

from voltstream.search.single_pulse import SearchSettings, delay_table, dm_trials  # noqa: E402

RESULTS = ROOT / "docs" / "results" / "search.json"
#: YNAO's search filterbank: 32 x 4 MHz channels around 1420 MHz, 128 fine each.
YNAO = {"freq_mhz": 1420.0, "bw_mhz": 128.0, "nchan": 4096, "tsamp_s": 64e-6}
TINY = {"freq_mhz": 1400.0, "bw_mhz": 16.0, "nchan": 64, "tsamp_s": 256e-6}
TARGET_HEADROOM = 4.0
TARGET_P99_S = 2.0


def band(geom: dict) -> np.ndarray:
    """Channel centres (MHz), descending as an upper sideband's .fil ascends: any order."""
    n, bw = geom["nchan"], geom["bw_mhz"]
    return geom["freq_mhz"] - bw / 2 + (np.arange(n) + 0.5) * bw / n


def gulp_data(geom: dict, settings: SearchSettings, gulp_s: float, seed: int = 0) -> tuple:
    """(intensities float32 (nsamp, nchan), freqs, own samples, burst sample, DM): noise
    of chi-square 4 degrees of freedom (two polarisations' power) with a burst at DM
    settings.dm_max / 2 in the middle of the gulp's own part."""
    freqs, tsamp = band(geom), geom["tsamp_s"]
    dms = dm_trials(settings.dm_min, settings.dm_max, freqs, tsamp, settings.dm_tol)
    sweep = int(delay_table(dms[-1:], freqs, tsamp, freqs.max()).max())
    own = int(round(gulp_s / tsamp))
    boxcar = 1 << int(np.log2(min(settings.boxcar_max, own // 64)))
    nsamp = own + 2 * (boxcar // 2 + 1) + sweep
    rng = np.random.default_rng(seed)
    data = rng.standard_normal((nsamp, len(freqs)), dtype=np.float32) ** 2
    data += rng.standard_normal((nsamp, len(freqs)), dtype=np.float32) ** 2
    dm = 0.5 * (settings.dm_min + settings.dm_max)
    at = nsamp // 2 - sweep // 2
    delay = delay_table(np.array([dm]), freqs, tsamp, freqs.max())[0]
    width = 4
    for k in range(width):
        data[at + delay + k, np.arange(len(freqs))] += 1.5
    return data, freqs, own, at + width // 2, dm


def headroom(device: str, geom: dict, settings: SearchSettings, gulp_s: float,
             repeats: int) -> dict:  # fmt: skip
    """Part (a): the engine's seconds per gulp and the headroom (module docstring)."""
    from voltstream.pipeline.search import search_engine

    data, freqs, own, burst_at, dm = gulp_data(geom, settings, gulp_s)
    tsamp = geom["tsamp_s"]
    boxcar = 1 << int(np.log2(min(settings.boxcar_max, own // 64)))
    st = SearchSettings(**{**settings.__dict__, "boxcar_max": boxcar})
    eng = search_engine(device, freqs, tsamp, st)
    h2d_s = None
    sync = lambda: None  # noqa: E731
    block = data
    if device == "gpu":
        import cupy as cp

        t0 = time.perf_counter()
        block = cp.asarray(data)
        cp.cuda.Device().synchronize()
        h2d_s = time.perf_counter() - t0
        sync = cp.cuda.Device().synchronize
    times = []
    res = None
    for k in range(repeats + 1):
        sync()
        t0 = time.perf_counter()
        res = eng.search(block)
        sync()
        if k:  # the first compiles the kernels
            times.append(time.perf_counter() - t0)
    assert res is not None
    best = res.candidates[0] if res.candidates else None
    secs = statistics.median(times)
    data_s = own * tsamp
    return {
        "device": device,
        "nchan": len(freqs),
        "tsamp_s": tsamp,
        "dm_trials": len(res.dms),
        "dm_max": float(res.dms[-1]),
        "boxcar_max": int(res.widths[-1]),
        "gulp_samples": int(data.shape[0]),
        "own_samples": own,
        "data_seconds": data_s,
        "compute_seconds": secs,
        "compute_seconds_all": times,
        "h2d_s": h2d_s,
        "headroom": data_s / secs,
        "headroom_with_copy": data_s / (secs + (h2d_s or 0.0)),
        "channel_sample_additions_per_s": len(res.dms) * len(freqs) * res.nout / secs,
        "target_headroom": TARGET_HEADROOM,
        "burst_found": bool(best is not None and abs(best.dm - dm) < 0.01 * dm
                            and abs(best.sample_index - burst_at) <= 4),
        "burst_snr": None if best is None else best.snr,
    }  # fmt: skip


def live_latency(device: str, tiny: bool, bursts: int, workdir: Path) -> dict:
    """Part (b): bursts over loopback into `voltstream search --listen` (module
    docstring); the search's report's latencies."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    # Bursts a period apart, then enough stream for the last one's gulp, the sweep and
    # the capture's reorder window to pass while data still flows (the stream's end
    # waits for the idle timeout, which is no part of a search's latency).
    period = 1.0
    times = ",".join(f"{1.0 + k * period:g}" for k in range(bursts))
    duration = 1.0 + (bursts - 1) * period + 3.0
    report = workdir / "live.json"
    cands = workdir / "live.cand"
    # The checkout's package first, then whatever this process was given (the GPU
    # machine's carried wheels: pydantic and the compiled extension live there).
    given = os.environ.get("PYTHONPATH")
    env = dict(
        os.environ, PYTHONPATH=os.pathsep.join([str(ROOT / "python")] + ([given] if given else []))
    )
    py = [sys.executable, "-m", "voltstream.cli"]
    # The stream: tiny, 8 x 2 MHz VDIF at 600 MHz in 128 channels of 256 us; else YNAO
    # packets of 32 x 0.5 MHz at 1420 MHz (16 MHz: the CPU filterbank keeps up with it
    # in real time; YNAO's 128 MHz waits on a GPU filterbank engine) in 512 channels
    # of 32 us, searched to DM 2000 in gulps of 0.5 s.
    if tiny:
        fmt = ["--format", "vdif", "--nchan", "8", "--chan-bw", "2", "--freq", "600"]
        fb = ["--fine-channels", "16", "--tsamp", "256e-6"]
        sim_fmt = fmt + ["--bits", "8"]
        dm, width, fluence = 100.0, 0.001, 10.0
        search = ["--dm-max", "200", "--gulp", "1.0"]
    else:
        fmt = ["--format", "ynao", "--chan-bw", "0.5", "--freq", "1420"]
        fb = ["--fine-channels", "16", "--tsamp", "32e-6"]
        sim_fmt = fmt
        dm, width, fluence = 500.0, 0.001, 3.0
        search = ["--dm-max", "2000", "--gulp", "0.5"]
    listen = [*py, "search", "--listen", f"127.0.0.1:{port}", *fmt, *fb, *search,
              "--device", device, "--duration", "600", "--idle-timeout", "2",
              "--candidates", str(cands), "--report", str(report), "--no-status"]  # fmt: skip
    send = [*py, "simulate", "--signal", "frb", "--dm", f"{dm:g}", "--width", f"{width:g}",
            "--fluence", f"{fluence:g}", "--burst-times", times, "--duration", f"{duration:g}",
            *sim_fmt, "--dest", f"127.0.0.1:{port}", "--seed", "3"]  # fmt: skip
    rx = subprocess.Popen(listen, env=env, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120  # the engine made (GPU: kernels), then the bind
        while rx.poll() is None and time.monotonic() < deadline:
            with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
                try:
                    s.bind(("127.0.0.1", port))
                except OSError:
                    break  # bound by the search
            time.sleep(0.2)
        sent = subprocess.run(send, env=env, capture_output=True, text=True, timeout=600)
        _, err = rx.communicate(timeout=120)
    finally:
        if rx.poll() is None:
            rx.kill()
    if rx.returncode != 0 or sent.returncode != 0:
        raise SystemExit(f"live search failed ({rx.returncode}, {sent.returncode}): "
                         f"{err[-2000:]} {sent.stderr[-2000:]}")  # fmt: skip
    doc = json.loads(report.read_text())
    rep, cap = doc["search"], doc.get("capture") or {}
    found = [c for c in rep["latencies"] if abs(c["dm"] - dm) < 0.05 * dm]
    lat = [c["latency_s"] for c in found if c["latency_s"] is not None]
    return {
        "device": device,
        "bursts": bursts,
        "found": len({round(c["time_s"]) for c in found}),
        "candidates": rep["n_candidates"],
        "latency_p50_s": float(np.percentile(lat, 50)) if lat else None,
        "latency_p99_s": float(np.percentile(lat, 99)) if lat else None,
        "latency_max_s": max(lat) if lat else None,
        "target_p99_s": TARGET_P99_S,
        "search": {k: rep.get(k) for k in ("gulps", "gulp_samples", "dm_trials", "nchans",
                                             "tsamp_s", "seconds_behind_max", "samples",
                                             "search_seconds")},
        # The stream as it came: samples of the stream against the capture's seconds
        # (below 1: the simulator sent slower than real time, and waits count in).
        "capture_seconds": cap.get("duration_s"),
        "stream_seconds": rep["samples"] * rep["tsamp_s"],
    }  # fmt: skip


def machine() -> dict:
    out = {"host": platform.node(), "cores": os.cpu_count(), "gpu": None}
    try:
        r = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"],
                           capture_output=True, text=True, timeout=10)  # fmt: skip
        out["gpu"] = r.stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        pass
    return out


def figures(run: dict) -> dict:
    """The run's headline figures (None where it did not measure one)."""
    h, live = run.get("headroom") or {}, run.get("live") or {}
    dev = h.get("device") or live.get("device") or "cpu"
    size = "tiny" if run.get("tiny") else "ynao"
    return {
        f"headroom_{size}_{dev}": h.get("headroom"),
        f"headroom_with_copy_{size}_{dev}": h.get("headroom_with_copy"),
        f"gulp_seconds_{size}_{dev}": h.get("compute_seconds"),
        f"live_latency_p50_s_{size}_{dev}": live.get("latency_p50_s"),
        f"live_latency_p99_s_{size}_{dev}": live.get("latency_p99_s"),
        f"live_bursts_found_{size}_{dev}": (
            None if not live else f"{live.get('found')}/{live.get('bursts')}"),
    }  # fmt: skip


def merge(old: dict | None, run: dict, found: dict | None = None) -> dict:
    """``run`` into the results document ``old``: each non-null figure (``found``, by
    default this bench's `figures` of the run; bench/e2e_dump.py gives its own)
    replaces the one before it, with its date, command and machine; nulls replace
    nothing."""
    doc = dict(old or {})
    figs = dict(doc.get("figures") or {})
    for name, value in (figures(run) if found is None else found).items():
        if value is not None:
            figs[name] = {"value": value, "date": run["date"], "command": run["command"],
                          "machine": run["machine"]}  # fmt: skip
    doc["figures"] = figs
    doc["runs"] = [*(doc.get("runs") or []), run]
    return doc


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add = ap.add_argument
    add("--device", choices=("gpu", "cpu"), default="gpu")
    add("--tiny", action="store_true", help="a toy band (64 channels, 256 us, DM 0-200)")
    add("--only", choices=("headroom", "live"), default=None, help="one part only")
    add("--gulp", type=float, default=None, help="seconds of arrival times a gulp owns "
        "(default: 4 for YNAO, 2 tiny)")  # fmt: skip
    add("--dm-max", type=float, default=None, help="default: 2000 (YNAO), 200 (tiny)")
    add("--repeats", type=int, default=3, help="timed gulps after the first. Default: 3")
    add("--bursts", type=int, default=8, help="bursts sent to the live search. Default: 8")
    add("--json", default=str(RESULTS), help="results file, merged into when it exists")
    add("--replace", action="store_true", help="overwrite --json instead of merging")
    add("--workdir", default=None)
    return ap.parse_args(argv)


def main(argv: list[str] | None = None) -> dict:
    a = parse_args(argv)
    geom = TINY if a.tiny else YNAO
    st = SearchSettings(dm_min=0.0, dm_max=a.dm_max or (200.0 if a.tiny else 2000.0))
    gulp_s = a.gulp or (2.0 if a.tiny else 4.0)
    workdir = Path(a.workdir or tempfile.mkdtemp(prefix="voltstream-search-bench-"))
    workdir.mkdir(parents=True, exist_ok=True)
    run: dict = {
        "date": time.strftime("%Y-%m-%d %H:%M:%S %z"),
        "command": shlex.join(["bench/search.py", *(argv if argv is not None else sys.argv[1:])]),
        "machine": machine(),
        "tiny": a.tiny,
        "headroom": None,
        "live": None,
    }
    if a.only in (None, "headroom"):
        h = run["headroom"] = headroom(a.device, geom, st, gulp_s, a.repeats)
        print(f"search headroom ({a.device}): {h['nchan']} channels x {h['dm_trials']} DM "
              f"trials to {h['dm_max']:.0f}, gulp of {h['data_seconds']:g} s in "
              f"{h['compute_seconds']:.3f} s -> headroom {h['headroom']:.1f} (target "
              f"{TARGET_HEADROOM:g}); burst found: {h['burst_found']}", flush=True)  # fmt: skip
    if a.only in (None, "live"):
        lv = run["live"] = live_latency(a.device, a.tiny, a.bursts, workdir)
        print(f"live search ({a.device}): {lv['found']}/{lv['bursts']} bursts found, latency "
              f"p50 {lv['latency_p50_s']} s, p99 {lv['latency_p99_s']} s (target < "
              f"{TARGET_P99_S:g} s)", flush=True)  # fmt: skip
    path = Path(a.json)
    old = None if a.replace or not path.exists() else json.loads(path.read_text())
    doc = merge(old, run)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc, indent=2, default=float) + "\n")
    return doc


if __name__ == "__main__":
    main()
