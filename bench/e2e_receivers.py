"""The receive side of bench/e2e.py: the real CLI as receiver processes, their CPU, their
reports.

Each receiver is `python -m voltstream.cli capture|fold|fengine ... --report FILE.json`
(or, for SPEAD capture alone while `voltstream capture` has no SPEAD format, the
stand-in in e2e_traffic.py), started with a CPU mask, watched until its port is bound
(/proc/net/udp: fold and capture print nothing at bind), and read back with
`receiver_counts`, which takes either report shape. Flags the CLI may not have yet
(`--bits` for VDIF, `--threads/--cpus` for fold) are looked up in its --help: a
configuration that needs a missing one is skipped with the reason, and capture threads
without --cpus run in the process's CPU mask (said in the point's notes).
"""

from __future__ import annotations

import functools
import os
import shlex
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from e2e_traffic import make_traffic
from voltstream.testing import free_ports  # noqa: F401 (e2e.py imports it from here)

HERE = Path(__file__).resolve().parent
VS = [sys.executable, "-m", "voltstream.cli"]
FOLD = ["--dm", "26.833", "--period", "0.0333", "--nbin", "256"]  # a 33 ms pulsar (the demo's)
# A search filterbank as a search runs it: 64 fine channels (62.5 kHz of YNAO's 4 MHz),
# 256 us samples, 8-bit, to a SIGPROC file on tmpfs (filterbank_output).
FILTERBANK = ["--fine-channels", "64", "--tsamp", "0.000256"]
COUNTERS = ("received", "missing", "late", "duplicate", "malformed", "foreign", "dropped")
ALL_COUNTERS = COUNTERS + ("kernel_drops", "chunks_dropped")


class Skip(Exception):
    """A configuration this CLI cannot run (a flag it lacks); the reason is kept."""


def receiver_counts(report: dict) -> dict:
    """Every capture counter (received, missing, ..., kernel_drops, chunks_dropped) from a
    capture/fold report (CaptureReport.as_dict: totals, engine) or an F-engine report
    (FEngineReport.as_dict: capture = the capture engine's stats()), or an F-engine of
    several antennas ({"antennas": [FEngineReport.as_dict, ...]}: summed)."""
    if isinstance(report.get("antennas"), list):
        each = [receiver_counts(r) for r in report["antennas"]]
        out = {k: sum(c[k] for c in each) for k in (*ALL_COUNTERS, "timeline_lost")}
        return out | {"engine": each[0]["engine"] if each else None}
    cap = report.get("capture")
    if isinstance(cap, dict) and ("totals" in cap or "streams" in cap):
        eng, totals = cap, cap.get("totals")
    else:
        eng = report.get("engine") if isinstance(report.get("engine"), dict) else report
        totals = report.get("totals") or eng.get("totals")
    if not totals:  # sum the streams
        totals = {k: sum(int(s.get(k, 0)) for s in eng.get("streams", [])) for k in COUNTERS}
    out = {k: int(totals.get(k) or 0) for k in COUNTERS}
    for k in ("malformed", "foreign"):
        out[k] = max(out[k], int(eng.get(k) or 0))
    out["kernel_drops"] = int(eng.get("kernel_drops") or 0)
    # A band in several streams: what the timeline lost (a silent stream, late chunks).
    out["timeline_lost"] = sum(report.get("silent_packets") or []) + int(
        report.get("late_chunk_packets") or 0
    )
    out["chunks_dropped"] = int(eng.get("chunks_dropped") or 0)
    out["engine"] = eng.get("engine")
    return out


def lossless(sent: int, c: dict) -> bool:
    """Every packet sent was received; nothing missing, late, dropped, or dropped by the kernel."""
    return c["received"] == sent and not any(
        c.get(k) for k in ("missing", "late", "dropped", "kernel_drops", "timeline_lost")
    )


def product_extras(report: dict) -> dict:
    """What the product made beside the capture counters (F-engine heaps, fold chunks);
    an F-engine of several antennas: summed, and each antenna's."""
    if isinstance(report.get("antennas"), list):
        each = [product_extras(r) for r in report["antennas"]]
        total = {k: sum(e.get(k) or 0 for e in each) for k in each[0]} if each else {}
        return total | {"antennas": each}
    if "capture" in report:
        eng, out = report.get("engine") or {}, report.get("output") or {}
        got = {
            "heaps_paired": report.get("heaps_paired"),
            "heaps_absent": report.get("heaps_absent"),
            "heaps_made": eng.get("heaps_made"),
            "heaps_skipped": eng.get("heaps_skipped"),
            "flagged_spectra": eng.get("flagged_spectra"),
            "heaps_output": out.get("heaps_sent") or out.get("heaps_written"),
            "timeline_restarts": report.get("timeline_restarts"),
        }
    else:
        got = {k: report.get(k) for k in ("chunks", "samples_written", "discontinuities")}
    return {k: v for k, v in got.items() if v is not None} | consumer_stalls(report)


def consumer_stalls(report: dict) -> dict:
    """How often the consumer (the fold's or F-engine's stage) held the capture loop
    for a chunk: chunks over 10 ms and over 100 ms, and the slowest bucket's bound,
    from the report's ``stage_seconds.consumer`` histogram (wherever it is nested).
    A stall longer than the pool holds is what drops whole chunks."""
    found = [report]
    while found and "stage_seconds" not in found[0]:
        d = found.pop(0)
        found += [v for v in d.values() if isinstance(v, dict)]
    hist = (found[0]["stage_seconds"].get("consumer") if found else None) or {}
    le = hist.get("le") or []
    if not le:
        return {}
    count = int(hist.get("count") or 0)
    at = dict((float(b), int(n)) for b, n in le)
    # The slowest chunk took at most this bucket's bound (none: over the last, 1 s).
    slowest = next((float(b) for b, n in le if n == count), None)
    return {
        "consumer_chunks": count,
        "consumer_over_10ms": count - at.get(1e-2, count),
        "consumer_over_100ms": count - at.get(0.1, count),
        "consumer_slowest_at_most_s": slowest,
        "consumer_sum_s": round(float(hist.get("sum") or 0.0), 3),
    }


def fengine_sink(flags: str, opt: dict) -> list[str]:
    """--fengine-sink's flags; several antennas write one file each: an --output of
    one file is given once per antenna (e.g. /dev/null four times)."""
    argv = shlex.split(flags)
    n = opt.get("antennas", 1)
    if n > 1 and "--output" in argv[:-1]:
        i = argv.index("--output") + 1
        if "," not in argv[i]:
            argv[i] = ",".join([argv[i]] * n)
    return argv


@functools.cache
def cli_help(verb: str) -> str:
    r = subprocess.run(VS + [verb, "--help"], capture_output=True, text=True, timeout=120)
    return r.stdout


@functools.cache
def importable(module: str) -> bool:
    """Whether the receivers' Python can import `module` (same interpreter, same paths)."""
    r = subprocess.run([sys.executable, "-c", f"import {module}"], capture_output=True, timeout=120)
    return r.returncode == 0


def preflight(product: str, device: str) -> None:
    """Skip, with the reason, what would fail after a whole run: fold writes PSRFITS with
    astropy at the end (before its report); --device gpu needs CuPy."""
    if product in ("fold", "file_fold", "gpu_alone", "fengine", "filterbank") and device == "gpu":
        if not importable("cupy"):
            raise Skip("CuPy is not importable: --device gpu cannot run here")
    if product in ("fold", "file_fold") and not importable("astropy.io.fits"):
        raise Skip(
            "astropy is not importable: voltstream fold writes its PSRFITS archive (before "
            "its report) with astropy; carry astropy's wheels in .whl/"
        )


def receiver_argv(product, traffic, opt, r, port, dur, report: Path, a, cpus) -> tuple:
    """Receiver `r`'s command line, CPU mask and a note; Skip if the CLI lacks a flag."""
    bind = f"127.0.0.1:{port}"
    # --idle-timeout also bounds the wait for a first packet (issue 30): the senders
    # start after the warm-up, so the receiver waits that long; the end of a probe is
    # its SIGINT once the senders are done (``Receivers.interrupt``), not its idle time.
    tail = ["--duration", f"{dur:g}", "--idle-timeout", f"{a.start_timeout + dur:g}"]
    tail += ["--report", str(report)]
    nthr = a.spread_threads if opt.get("threads") == "spread" else a.capture_threads
    thr = cpus["capture"][r * nthr : (r + 1) * nthr]
    mask = set(cpus["receiver"])
    fmt = make_traffic(traffic).cli_format()
    if product == "fengine":
        # --capture-threads per antenna (one by default), pinned antenna by antenna.
        nthr = opt.get("antennas", 1) * a.capture_threads
        thr = cpus["capture"][r * nthr : (r + 1) * nthr]
        argv = VS + ["fengine", "--listen", bind, "--device", a.device, "--channels"]
        argv += [str(opt["channels"]), "--taps", "16", "--sample-bits", "10"]
        argv += ["--engine", a.engine, *fengine_sink(a.fengine_sink, opt), *tail]
        argv += shlex.split(a.fengine_args)
        if a.capture_threads > 1:
            argv += ["--threads", str(nthr)]
        if len(thr) == nthr:  # a thread can pin only inside the mask
            return argv + ["--cpus", ",".join(map(str, thr))], mask | set(thr), None
        return (
            argv,
            mask | set(thr),
            (f"capture threads unpinned ({len(thr)} capture CPUs for {nthr})" if thr else None),
        )
    elif traffic == "spead" and "spead-dig" not in cli_help("capture"):
        argv = [sys.executable, str(HERE / "e2e_traffic.py"), "capture-spead", "--bind", bind]
        argv += ["--engine", a.engine, *tail]
        argv += ["--cpus", ",".join(map(str, thr))] if thr else []
        note = "stand-in receiver (voltstream capture has no spead-dig format)"
        return argv, mask | set(thr), note  # its capture thread pins inside the mask
    elif "--bits" in fmt and "--bits" not in cli_help(product):
        raise Skip(f"`voltstream {product}` has no --bits (needed for {traffic})")
    elif product == "capture":
        argv = VS + ["capture", "--listen", bind, *fmt, "--engine", a.engine, *tail]
        argv += shlex.split(a.capture_args)
    elif product == "filterbank":
        argv = VS + ["filterbank", "--listen", bind, *fmt, "--engine", a.engine]
        argv += ["--device", a.device, *FILTERBANK, "-o", str(filterbank_output(report))]
        argv += [*tail, *shlex.split(a.filterbank_args)]
    else:
        fmt = getattr(make_traffic(traffic), "fold_format", lambda: fmt)()  # real: --real
        argv = VS + ["fold", "--listen", bind, *fmt, "--engine", a.engine, "--device", a.device]
        argv += FOLD
        argv += ["-o", str(report.with_suffix(".fits")), *tail, *shlex.split(a.fold_args)]
    if a.packets_per_chunk and product != "fengine":
        if "--packets-per-chunk" not in cli_help(product):
            raise Skip(f"`voltstream {product}` has no --packets-per-chunk")
        argv += ["--packets-per-chunk", str(a.packets_per_chunk)]
    if thr and "--cpus" in cli_help(product):
        if nthr > 1:
            argv += ["--threads", str(nthr)]
        argv += ["--cpus", ",".join(map(str, thr))]
        return argv, mask | set(thr), None  # a thread can pin only inside the mask
    return argv, mask | set(thr), ("capture threads unpinned (no --cpus)" if thr else None)


def filterbank_output(report: Path) -> Path:
    """Where a filterbank receiver writes: tmpfs (/dev/shm) where there is one, so that
    the disk is not what is measured; named after its report (run_point removes it)."""
    shm = Path("/dev/shm")
    return (shm if shm.is_dir() else report.parent) / f"{report.stem}.fil"


def cpu_model() -> str | None:
    """This machine's CPU model name (/proc/cpuinfo), for the benches' results."""
    for ln in Path("/proc/cpuinfo").read_text().splitlines():
        if ln.startswith("model name"):
            return ln.split(":", 1)[1].strip()
    return None


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def udp_bound(port: int) -> bool:
    for path in ("/proc/net/udp", "/proc/net/udp6"):
        try:
            lines = Path(path).read_text().splitlines()[1:]
        except OSError:
            continue
        if any(int(ln.split()[1].rsplit(":", 1)[1], 16) == port for ln in lines):
            return True
    return False


def proc_cpu(pid: int) -> dict:
    """CPU seconds (user + system) of a process and of each of its threads (name/tid)."""
    tick = os.sysconf("SC_CLK_TCK")

    def secs(path):
        f = Path(path).read_text().rsplit(")", 1)[1].split()
        return (int(f[11]) + int(f[12])) / tick

    out = {"total": 0.0, "threads": {}}
    try:
        out["total"] = secs(f"/proc/{pid}/stat")
        for task in Path(f"/proc/{pid}/task").iterdir():
            name = (task / "comm").read_text().strip()
            out["threads"][f"{name}/{task.name}"] = secs(task / "stat")
    except OSError:
        pass  # it ended meanwhile
    return out


def cpu_share(c0: dict, c1: dict, window: float) -> tuple[float, dict]:
    """CPU over the window (1.0 = one core busy), and the threads busier than 5%."""
    busy = {t: (s - c0["threads"].get(t, 0.0)) / window for t, s in c1["threads"].items()}
    busy = {t: round(v, 3) for t, v in sorted(busy.items(), key=lambda kv: -kv[1]) if v > 0.05}
    return (c1["total"] - c0["total"]) / window, busy


def capture_started(log: str) -> bool:
    """Whether a CLI receiver's log says its capture runs ("VERB: listening on ..."). A
    capture with a voltage ring serves its triggers first ("triggers: listening on
    http://..."), before the ring's capture has opened: that line is not the start."""
    return any("listening on" in ln and not ln.startswith("triggers:") for ln in log.splitlines())


class Receivers:
    """The receiver processes of one point: started with their CPU masks, logged to files."""

    def __init__(self, argvs: list[tuple[list, set]], logs: list[Path]):
        self.logs, self.procs = logs, []
        # The CLI says "listening on" once its capture runs (ring mapped, pool placed):
        # the port is bound earlier, and packets sent in between are not captured.
        self.say_ready = [argv[: len(VS)] == VS for argv, _ in argvs]
        for (argv, mask), log in zip(argvs, logs, strict=True):
            with open(log, "w") as f:
                self.procs.append(
                    subprocess.Popen(
                        argv,
                        stdout=f,
                        stderr=subprocess.STDOUT,
                        preexec_fn=lambda m=mask: os.sched_setaffinity(0, m),
                    )
                )

    def wait_bound(self, ports: list[int], limit: float) -> None:
        deadline = time.monotonic() + limit
        while not (all(udp_bound(p) for p in ports) and self._ready()):
            if any(p.poll() is not None for p in self.procs):
                raise RuntimeError("a receiver exited before binding its port")
            if time.monotonic() > deadline:
                raise RuntimeError(f"a receiver did not bind its port within {limit:g} s")
            time.sleep(0.1)

    def _ready(self) -> bool:
        for log, says in zip(self.logs, self.say_ready, strict=True):
            if says and not capture_started(log.read_text(errors="replace")):
                return False
        return True

    def cpu(self) -> list[dict]:
        return [proc_cpu(p.pid) for p in self.procs]

    def wait(self, limit: float) -> None:
        for p in self.procs:
            p.wait(timeout=limit)

    def interrupt(self) -> None:
        """Ctrl-C, as a user ends a run: the receiver finishes what it holds, writes
        its report and exits 0 (a lossy run too: the report says what was lost)."""
        for p in self.procs:
            if p.poll() is None:
                p.send_signal(signal.SIGINT)

    def stop(self) -> None:
        for p in self.procs:
            if p.poll() is None:
                p.terminate()
                try:
                    p.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait(timeout=10)

    def status(self) -> list[int | None]:
        return [p.returncode for p in self.procs]

    def tails(self, n: int = 8) -> list[list[str]]:
        return [log.read_text(errors="replace").splitlines()[-n:] for log in self.logs]
