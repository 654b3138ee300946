"""Several antennas in one F-engine process (issue 26 item 3): each antenna is one
``run_fengine`` in a thread of its own, with its own capture (its own port and
pinned capture thread), its own engine (on a shared GPU: its own CUDA streams,
buffers and pinned pools) and its own output stream.

Why threads over the one-antenna stage rather than one capture of N streams into
one batched engine: the stage already owns everything an antenna needs (pairing,
time line, restarts, katcp, output), and a batched engine would tie the antennas'
time lines together (one antenna's re-sync or gap would stall the others). The hot
work is not Python's: the capture and the SPEAD send are Rust (the GIL released
while they wait or send), the GPU engine queues kernels on its own streams, and
the Python per chunk (about 1 ms per 10 ms chunk at one antenna's 34 Gb/s) leaves
room under the GIL for four. docs/architecture.md ("Several antennas in one
F-engine process") has the reasoning and what is still to be measured.

This module splits one F-engine's settings and capture into N antennas'
(``split_settings``, ``split_capture``), runs them (``run_antennas``) and adds their
reports up (``FEngineArrayReport``: one section per antenna, then the totals).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from voltstream.capture.config import CaptureSettings
from voltstream.errors import ConfigError
from voltstream.fengine.pipeline import FEngineReport, run_fengine
from voltstream.fengine.settings import FEngineSettings

__all__ = [
    "Antenna",
    "FEngineArrayReport",
    "run_antennas",
    "split_capture",
    "split_settings",
]

log = logging.getLogger("voltstream.fengine")

#: The totals of an array report: capture counters summed over every antenna's pols.
_CAPTURE_TOTALS = ("received", "missing", "late", "duplicate", "dropped")


def _per_antenna(values: Sequence[Any], n: int, what: str, example: str) -> list[Any]:
    """One value for every antenna (given once) or one each; else a ConfigError."""
    if len(values) == 1:
        return [values[0]] * n
    if len(values) != n:
        raise ConfigError(
            f"{what}: {len(values)} given for {n} antennas; give one for all or one per "
            f"antenna, in --listen order (e.g. {example})"
        )
    return list(values)


def split_settings(
    settings: FEngineSettings,
    n: int,
    *,
    dest: Sequence[str] | None = None,
    dig_ids: Sequence[tuple[int, int]] | None = None,
    outputs: Sequence[str] | None = None,
) -> list[FEngineSettings]:
    """The settings of ``n`` antennas, in ``--listen`` order, from one F-engine's.

    ``dest``: every antenna's destinations (default ``settings.dest``; given apart,
    ``settings`` need not hold them: their count need not divide the channels), one
    per substream per antenna, antenna by antenna (antenna 0's substreams first); the
    count must be a multiple of ``n`` (an antenna's stop heap would end another's
    stream at a shared destination).
    ``dig_ids``: (pol 0, pol 1) pairs, one for every antenna or one per antenna
    (default: ``settings.dig_ids`` for every antenna). ``outputs``: one file
    per antenna, or none. Antenna k is F-engine ``feng_id + k``; ``n_fengs`` left at
    1 becomes ``feng_id + n``, a smaller one given is an error."""
    dest = list(settings.dest if dest is None else dest)
    if n == 1:
        return [dataclasses.replace(settings, dest=tuple(dest))]
    if len(dest) % n:
        raise ConfigError(
            f"--dest: {len(dest)} destinations for {n} antennas; give one per substream "
            f"per antenna, antenna by antenna (e.g. --dest 127.0.0.1:7150+{n - 1} for "
            "one substream each)"
        )
    per = len(dest) // n
    if settings.substreams is not None and dest and per != settings.substreams:
        raise ConfigError(
            f"--dest: {len(dest)} destinations for {n} antennas of --substreams "
            f"{settings.substreams}: give {n * settings.substreams}"
        )
    pairs = _per_antenna(list(dig_ids or [settings.dig_ids]), n, "--dig-ids", "0,1 or 0,1,2,3")
    files = list(outputs) if outputs else []
    if files and len(files) != n:
        raise ConfigError(
            f"--output: {len(files)} file(s) for {n} antennas; give one per antenna, "
            "comma-separated in --listen order (e.g. a0.spead,a1.spead)"
        )
    n_fengs = settings.n_fengs
    if n_fengs < settings.feng_id + n:
        if n_fengs != 1:
            raise ConfigError(
                f"--n-fengs {n_fengs}: {n} antennas are F-engines {settings.feng_id} .. "
                f"{settings.feng_id + n - 1}; give --n-fengs {settings.feng_id + n} or more"
            )
        n_fengs = settings.feng_id + n  # left at its default: just enough
    return [
        dataclasses.replace(
            settings,
            dest=tuple(dest[k * per : (k + 1) * per]),
            dig_ids=pairs[k],
            feng_id=settings.feng_id + k,
            n_fengs=n_fengs,
            output=files[k] if files else None,
        )
        for k in range(n)
    ]


def split_capture(capture: CaptureSettings, n: int, threads: int = 1) -> list[CaptureSettings]:
    """One capture per antenna from one capture of ``n`` addresses (``--listen A,B``
    or ``HOST:PORT+N``: ``network.bind`` and ``more_binds``): antenna k listens on
    address k with ``threads`` capture threads, which take turns by chunk when more
    than one (the antenna's two polarisations then share every thread), pinned to
    its ``threads`` CPUs of ``threads.cpus`` when given (antenna by antenna)."""
    binds = [capture.network.bind, *capture.network.more_binds]
    cpus = capture.threads.cpus
    if cpus is not None and len(cpus) != n * threads:
        each = f"{threads} per antenna, in --listen order" if threads > 1 else (
            "one per antenna, in --listen order")  # fmt: skip
        raise ConfigError(
            f"--cpus {','.join(map(str, cpus))}: {n} antenna(s), captured by {n * threads} "
            f"thread(s): give {n * threads} CPUs ({each}) or none"
        )
    out = []
    for k in range(n):
        data = capture.model_dump()
        data["network"] |= {"bind": binds[k], "more_binds": []}
        data["threads"] |= {
            "count": threads,
            "cpus": None if cpus is None else cpus[k * threads : (k + 1) * threads],
            "stream_threads": None,
            "spread": "chunks" if threads > 1 else data["threads"]["spread"],
        }
        out.append(type(capture).model_validate(data))
    return out


@dataclass
class Antenna:
    """One antenna's run, as ``run_fengine`` takes it."""

    capture: CaptureSettings
    settings: FEngineSettings
    engine: Any
    output: Any = None
    factory: Any = None
    control: Any = None


@dataclass
class FEngineArrayReport:
    """The reports of every antenna of one process, in ``--listen`` order, and their
    totals. A missing report is an antenna whose run failed (``errors`` says why)."""

    antennas: list[FEngineReport] = field(default_factory=list)
    interrupted: bool = False

    @property
    def silent(self) -> list[int]:
        """The antennas that received no packet."""
        return [k for k, r in enumerate(self.antennas) if not _received(r)]

    def totals(self) -> dict:
        tot: dict[str, Any] = {"antennas": len(self.antennas), "antennas_silent": len(self.silent)}
        for k in _CAPTURE_TOTALS:
            tot[k] = sum(
                int(s.get(k, 0)) for r in self.antennas for s in r.capture.get("streams", [])
            )
        tot["kernel_drops"] = sum(int(r.capture.get("kernel_drops", 0)) for r in self.antennas)
        # As a capture counts it (service/exit_status.py capture_loss, per antenna).
        tot["lost"] = sum(tot[k] for k in ("missing", "late", "dropped", "kernel_drops"))
        tot["heaps_paired"] = sum(r.heaps_paired for r in self.antennas)
        for k in ("heaps_made", "heaps_skipped"):
            tot[k] = sum(int(r.engine.get(k, 0)) for r in self.antennas)
        for k in ("heaps_sent", "bytes_sent", "send_errors"):
            tot[k] = sum(int(r.output.get(k, 0)) for r in self.antennas)
        return tot

    def as_dict(self) -> dict:
        return {
            "antennas": [r.as_dict() for r in self.antennas],
            "totals": self.totals(),
            "interrupted": self.interrupted,
        }

    def write_json(self, path: str | Path) -> None:
        Path(path).write_text(json.dumps(self.as_dict(), indent=2, default=str) + "\n")

    def summary_lines(self) -> list[str]:
        lines = []
        for k, r in enumerate(self.antennas):
            lines.append(f"antenna {k} ({r.address or r.listen}):"
                         + ("" if _received(r) else " NOTHING RECEIVED"))  # fmt: skip
            lines += ["  " + line for line in r.summary_lines()]
        t = self.totals()
        lines.append(
            f"fengine totals, {t['antennas']} antennas: received={t['received']}  "
            f"lost={t['lost']}  missing={t['missing']}  late={t['late']}  "
            f"dropped={t['dropped']}  kernel_drops={t['kernel_drops']}  "
            f"heaps_made={t['heaps_made']}  heaps_sent={t['heaps_sent']}  "
            f"send_errors={t['send_errors']}  antennas_silent={t['antennas_silent']}"
            + (" (interrupted)" if self.interrupted else "")
        )
        return lines


def _received(report: FEngineReport) -> int:
    return sum(int(s.get("received", 0)) for s in report.capture.get("streams", []))


def run_antennas(
    antennas: Sequence[Antenna],
    *,
    duration_s: float | None = None,
    idle_timeout_s: float | None = None,
    stop_event: threading.Event | None = None,
    status: bool = False,
    live_report: Callable[[Callable[[], dict]], None] | None = None,
    on_start: Callable[[int, str], None] | None = None,
) -> FEngineArrayReport:
    """Runs every antenna's ``run_fengine`` in a thread of its own until each ends
    (``duration_s``, ``idle_timeout_s`` — an antenna that receives nothing ends after
    it too, counted, never waited for —, ``stop_event``, Ctrl-C in the calling
    thread). ``on_start(k, address)`` once antenna k listens (called from its thread).
    An antenna that fails stops the others, and its error is raised once they have
    ended. ``live_report`` (the metrics board's ``watch``) gets the reports so far,
    ``{"antennas": [...]}``, then the final report's ``as_dict``."""
    n = len(antennas)
    stop = threading.Event()
    reports: list[FEngineReport | None] = [None] * n
    errors: list[BaseException | None] = [None] * n
    sources: list[Callable[[], dict] | None] = [None] * n

    def live(k: int) -> Callable[[Callable[[], dict]], None]:
        def watch(source: Callable[[], dict]) -> None:
            sources[k] = source

        return watch

    # Every antenna's capture CPUs: each antenna's Python keeps off all of them, not
    # only its own (run_fengine's), once its capture has started (the capture checks
    # its CPU against the opening thread's mask, so not before).
    capture_cpus = {c for a in antennas for c in a.capture.threads.cpus or []}

    def started(k: int, address: str) -> None:
        allowed = os.sched_getaffinity(0) - capture_cpus
        if allowed:
            os.sched_setaffinity(0, allowed)  # this thread only (Linux)
        if on_start is not None:
            on_start(k, address)

    def run(k: int) -> None:
        a = antennas[k]
        try:
            reports[k] = run_fengine(
                a.capture, a.settings, a.engine, a.output,
                duration_s=duration_s, idle_timeout_s=idle_timeout_s, control=a.control,
                engine_factory=a.factory, stop_event=stop, status=status,
                status_label=f"fengine ant{k}", live_report=live(k),
                on_start=lambda address, k=k: started(k, address),
            )  # fmt: skip
        except BaseException as e:  # raised in the caller's thread once all have ended
            errors[k] = e
            stop.set()

    def so_far() -> dict:
        ants = [s() if s is not None else {} for s in sources]
        return {"antennas": ants}

    if live_report is not None:
        live_report(so_far)
    threads = [threading.Thread(target=run, args=(k,), name=f"fengine-ant{k}") for k in range(n)]
    for t in threads:
        t.start()
    interrupted = False
    try:
        while any(t.is_alive() for t in threads):
            if stop_event is not None and stop_event.is_set():
                stop.set()
            threads[[t.is_alive() for t in threads].index(True)].join(0.1)
    except KeyboardInterrupt:  # Ctrl-C without cli.main's Shutdown: every antenna stops
        interrupted = True
        stop.set()
        for t in threads:
            t.join()
    failed = [e for e in errors if e is not None]
    if failed:
        raise failed[0]
    report = FEngineArrayReport([r for r in reports if r is not None])
    report.interrupted = interrupted or any(r.interrupted for r in report.antennas)
    for k in report.silent:
        log.warning("fengine: antenna %d (%s) received nothing", k, report.antennas[k].listen)
    if live_report is not None:
        live_report(report.as_dict)
    return report
