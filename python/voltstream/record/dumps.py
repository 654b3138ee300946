"""Triggered voltage dumps: a trigger names a time window (or a burst's DM and arrival)
and the window is written from the voltage ring (capture/ring.py) as a DADA file
(issue 28 item 3; docs/search.md, "Triggered voltage dumps").

A trigger is a JSON object, one of::

    {"start": 1.25, "end": 1.75}                 seconds since the stream's first sample
    {"start_mjd": "60123.5000001", "end_mjd": ...}  MJDs (a decimal string is exact)
    {"dm": 560.5, "time": 1.5}                   a burst: its arrival at the top of the
                                                 band ("mjd" instead of "time"; "freq":
                                                 the MHz that time is at; "margin": s)

with ``"partial": true`` to dump what the ring still (or already) holds of a window
that is not wholly in it. A burst's window runs from its arrival at the top of the
band less the margin to its arrival at the bottom plus the margin, the sweep
D x DM x (f_lo^-2 - f_hi^-2) with D the project's one dispersion constant
(dsp/dedisperse.py, the simulator's and the search's; 4.148808e3 s of the FRB
literature differs from it by 1.4e-4).

The answer (an HTTP status and a JSON object, record/trigger_http.py) is given once the
window is checked against the ring and queued. One writer thread then reads it out of
the ring a piece at a time (WRITE_PACKETS packets), oldest first, and writes it: the
window is never held whole outside the ring. A 1 s window at 30 Gb/s is 3.7 GB, and
copying it whole as the trigger came (sessions 14-15) competed with the capture's own
writes into the ring for the memory and lost 6 to 167 of the capture's chunks in 10 s
points; read piecewise, the writer moves each byte once, at the disk's pace. The ring
must hold the window until the writer reaches it: a piece the capture overwrote first
is written as zeros and counted (``overwritten_packets``; its samples in ``lost_samples``),
never mixed in. Neither the capture nor the trigger's sender waits on the disk. Every
trigger, dump and refusal is counted (``as_dict``: the capture report's ``dumps``
section).
"""

from __future__ import annotations

import json
import logging
import math
import queue
import threading
from dataclasses import asdict, dataclass
from fractions import Fraction
from pathlib import Path
from typing import Any

from voltstream.capture.ring import RingClock, VoltageRing, lost_samples
from voltstream.dsp.dedisperse import dispersion_delay_s
from voltstream.errors import VoltstreamError
from voltstream.io.dada import DadaWriter

log = logging.getLogger("voltstream.record.dumps")

#: The keys a trigger may have.
KEYS = ("start", "end", "start_mjd", "end_mjd", "dm", "time", "mjd", "freq", "margin", "partial")
#: Dumps copied out and waiting for the writer; a trigger beyond them is answered 503.
MAX_QUEUED = 4
#: No trigger number is larger (seconds, MJDs, DMs, MHz): beyond it, refused as absurd.
LARGEST = 10**12
#: Packets converted and written at a time (bounds the writer's extra memory).
WRITE_PACKETS = 1024


class TriggerError(Exception):
    """A trigger refused: the HTTP status and the reason, one line."""

    def __init__(self, status: int, reason: str) -> None:
        super().__init__(reason)
        self.status, self.reason = status, reason


def _reject_constant(name: str) -> Any:
    raise TriggerError(400, f"{name} is not a number: give finite numbers")


def _number(body: dict, key: str) -> Fraction:
    """A finite number (or a decimal string: exact MJDs) as an exact fraction."""
    v = body[key]
    if isinstance(v, bool) or not isinstance(v, int | float | str):
        raise TriggerError(400, f"{key!r} must be a number, got {json.dumps(v)}")
    try:
        # A float as the decimal it was written as (0.1, not its binary neighbour): a
        # window of "start": 0.1 begins at the sample at 0.1 s, not one after it.
        out = Fraction(str(v)) if not isinstance(v, float) or math.isfinite(v) else None
    except (ValueError, ZeroDivisionError):
        out = None
    if out is None or abs(out) > LARGEST:
        raise TriggerError(400, f"{key!r} must be a finite number, got {json.dumps(v)}")
    return out


def _window_seconds(
    body: dict, clock: RingClock, band: tuple[float, float], margin: float
) -> tuple[Fraction, Fraction]:
    """(start, end) in seconds since the stream's first sample, as the trigger asks."""
    has = set(body)
    if {"start", "end"} <= has:
        return _number(body, "start"), _number(body, "end")
    if {"start_mjd", "end_mjd"} <= has:
        a, b = (clock.seconds_of_mjd(_number(body, k)) for k in ("start_mjd", "end_mjd"))
        return a, b
    if "dm" in has and ("time" in has) != ("mjd" in has):
        dm = _number(body, "dm")
        if dm < 0:
            raise TriggerError(400, f"'dm' must be >= 0, got {float(dm):g}")
        when = (_number(body, "time") if "time" in has
                else clock.seconds_of_mjd(_number(body, "mjd")))  # fmt: skip
        f_lo, f_hi = band
        f_ref = _number(body, "freq") if "freq" in has else Fraction(f_hi)
        if f_ref <= 0:
            raise TriggerError(400, f"'freq' must be a frequency in MHz, got {float(f_ref):g}")
        # --dump-margin as the decimal it was written as, like a trigger's numbers: its
        # binary neighbour would put a window's end one sample late (0.002 s: 501 samples).
        pad = _number(body, "margin") if "margin" in has else Fraction(str(margin))
        if pad < 0:
            raise TriggerError(400, f"'margin' must be >= 0 seconds, got {float(pad):g}")
        top = when - Fraction(float(dispersion_delay_s(float(dm), float(f_ref), f_hi)))
        sweep = Fraction(float(dispersion_delay_s(float(dm), f_lo, f_hi)))
        return top - pad, top + sweep + pad
    raise TriggerError(
        400,
        'give "start" and "end" (seconds since the stream\'s first sample), "start_mjd" '
        'and "end_mjd", or "dm" with "time" or "mjd" (a burst\'s arrival at the top of the '
        "band)",
    )


def parse_trigger(
    raw: bytes, clock: RingClock, band: tuple[float, float], margin: float
) -> tuple[int, int, bool]:
    """A trigger's body as (first sample, stop sample, partial wanted); TriggerError
    400 for anything malformed."""
    try:
        body = json.loads(raw, parse_constant=_reject_constant)
    except (ValueError, RecursionError) as exc:
        raise TriggerError(400, f"the body is not JSON ({exc}); send a JSON object") from None
    if not isinstance(body, dict):
        raise TriggerError(400, 'the body must be a JSON object, e.g. {"start": 1, "end": 2}')
    if unknown := sorted(set(body) - set(KEYS)):
        raise TriggerError(400, f"unknown key(s) {', '.join(unknown)}; use {', '.join(KEYS)}")
    partial = body.get("partial", False)
    if not isinstance(partial, bool):
        raise TriggerError(400, f"'partial' must be true or false, got {json.dumps(partial)}")
    start, end = _window_seconds(body, clock, band, margin)
    if not end > start:
        raise TriggerError(400, f"the window ends ({float(end):g} s) before it starts "
                                f"({float(start):g} s)")  # fmt: skip
    return clock.sample_at(start), clock.sample_at(end), partial


@dataclass
class Dump:
    """One dump, for the report: its file, window, samples and what was lost in it."""

    id: int
    path: str
    start_s: float  # seconds since the stream's first sample
    end_s: float
    start_mjd: str
    first_sample: int  # on the stream's sample axis (packet index x samples per packet)
    samples: int
    lost_samples: int  # at the trigger: absent then; once written: absent in the file
    partial: bool
    state: str = "queued"  # queued, written or failed
    error: str | None = None
    overwritten_packets: int = 0  # of all streams, overwritten in the ring before read


class Dumps:
    """Triggers in, dumps out: the windows checked against the ring, copied out (one at
    a time), written by a writer thread. Thread-safe: triggers come from the HTTP
    server's threads."""

    def __init__(self, ring: VoltageRing, directory: str | Path, source: str,
                 margin_s: float) -> None:  # fmt: skip
        fmt = ring.fmt
        self.ring, self.fmt, self.dir, self.source = ring, fmt, Path(directory), source
        half = abs(fmt.chan_bw_mhz * fmt.nchan) / 2
        self.band = (fmt.freq_mhz - half, fmt.freq_mhz + half)
        self.margin = margin_s
        self.counts = dict.fromkeys(
            ("triggers", "dumps", "partial", "refused_gone", "refused_not_yet", "malformed",
             "busy", "written", "failed", "samples", "lost_samples", "overwritten_packets"),
            0)  # fmt: skip
        self.dumps: list[Dump] = []
        self._count = threading.Lock()
        self._queue: queue.Queue = queue.Queue()
        self._writer = threading.Thread(target=self._write_loop, name="dump-writer", daemon=True)
        self._writer.start()

    def _add(self, key: str, n: int = 1) -> None:
        with self._count:
            self.counts[key] += n

    def trigger(self, raw: bytes) -> tuple[int, dict]:
        """One trigger: (HTTP status, JSON answer). Never raises for what a sender sent."""
        self._add("triggers")
        try:
            return 202, self._accept(raw)
        except TriggerError as exc:
            key = {400: "malformed", 410: "refused_gone", 409: "refused_not_yet"}.get(
                exc.status, "busy"
            )
            self._add(key)
            log.warning("trigger refused (%d): %s", exc.status, exc.reason)
            return exc.status, {"error": exc.reason, **self.ring_status()}

    def _accept(self, raw: bytes) -> dict:
        clock, span = self.ring.clock, self.ring.span()
        if clock is None or span is None:
            # A malformed trigger is one whatever the ring holds: checked on a stand-in.
            parse_trigger(raw, RingClock(0, 0, Fraction(0), self.fmt.tsamp_exact),
                          self.band, self.margin)  # fmt: skip
            raise TriggerError(409, "nothing has arrived yet: the ring is empty")
        first, stop, partial = parse_trigger(raw, clock, self.band, self.margin)
        first, stop, cut = self._fit(clock, span, first, stop, partial)
        if self._queue.qsize() >= MAX_QUEUED:
            raise TriggerError(503, f"{MAX_QUEUED} dumps are waiting for the disk; try again")
        p0, present = self.ring.presence(first, stop)
        lost = lost_samples(present, p0, first, stop, self.ring.spp)
        dump = self._record(clock, first, stop, lost, cut)
        self._queue.put((dump, clock))
        return asdict(dump)

    def _fit(self, clock: RingClock, span: tuple[int, int], first: int, stop: int,
             partial: bool) -> tuple[int, int, bool]:  # fmt: skip
        """The window as the ring can give it: whole, or (``partial``) the part it holds;
        else TriggerError 410 (gone) or 409 (not yet arrived)."""
        have0, have1 = span
        secs = clock.seconds
        gone, later = first < have0, stop > have1
        if not (gone or later):
            return first, stop, False
        if gone:
            why = (
                f"the window starts at {float(secs(first)):.6f} s, before the oldest sample "
                f"the ring holds ({float(secs(have0)):.6f} s; it keeps {self.ring.seconds:g} s)"
            )
        else:
            why = (
                f"the window ends at {float(secs(stop)):.6f} s, after the newest sample in "
                f"the ring ({float(secs(have1)):.6f} s): trigger again once it has arrived"
            )
        cut0, cut1 = max(first, have0), min(stop, have1)
        if partial and cut1 > cut0:
            return cut0, cut1, True
        raise TriggerError(410 if gone else 409, why + ("" if partial else
                           '; "partial": true dumps the part the ring holds'))  # fmt: skip

    def _record(self, clock: RingClock, first: int, stop: int, lost: int, cut: bool) -> Dump:
        """The dump of samples ``first`` .. ``stop``, ``lost`` of them absent from the
        ring at the trigger."""
        with self._count:
            ident = len(self.dumps) + 1
            mjd = clock.mjd_text(first, 9)
            dump = Dump(ident, str(self.dir / f"dump-{ident:04d}-mjd{mjd}.dada"),
                        float(clock.seconds(first)), float(clock.seconds(stop)),
                        clock.mjd_text(first), first, stop - first, lost,
                        cut)  # fmt: skip
            self.dumps.append(dump)
            self.counts["dumps"] += 1
            self.counts["partial"] += cut
            self.counts["samples"] += stop - first
            self.counts["lost_samples"] += lost
        log.info("dump %d: %.6f .. %.6f s (%d samples, %d lost%s) -> %s", ident,
                 dump.start_s, dump.end_s, dump.samples, lost,
                 ", partial" if cut else "", dump.path)  # fmt: skip
        return dump

    def _write_loop(self) -> None:
        while (job := self._queue.get()) is not None:
            dump, clock = job
            try:
                self._write(dump, clock)
                dump.state = "written"
                self._add("written")
            except (VoltstreamError, OSError) as exc:
                dump.state, dump.error = "failed", str(exc)
                self._add("failed")
                log.error("dump %d not written: %s", dump.id, exc)

    def _write(self, dump: Dump, clock: RingClock) -> None:
        """The DADA file: the stream's first sample as UTC_START + PICOSECONDS (exact),
        the window's first byte after it as OBS_OFFSET (as PSRDADA's event dumps do), so
        a reader places the window's first sample exactly. The window is read out of
        the ring piece by piece as it is written; the samples lost in the file (absent
        at the trigger, or overwritten before they were read) are settled at the end,
        in the report and in the header (rewritten at close)."""
        fmt, spp = self.fmt, self.ring.spp
        whole = math.floor(clock.sec)
        obs = fmt.observation(start_mjd=clock.mjd, start_sec=float(whole), source=self.source)
        bps = obs.nchan * obs.npol * obs.ndim * obs.nbit // 8
        first, stop = dump.first_sample, dump.first_sample + dump.samples
        extra = {
            "PICOSECONDS": round((clock.sec - whole) * 10**12),
            "MJD_START": clock.mjd_text(clock.first_sample),
            "OBS_OFFSET": (first - clock.first_sample) * bps,
            "DUMP_ID": dump.id,
            "DUMP_START_MJD": dump.start_mjd,
            "DUMP_FIRST_SAMPLE": first,
            "DUMP_LOST_SAMPLES": dump.lost_samples,
        }
        lost = overwritten = 0
        with DadaWriter(dump.path, obs, extra) as out:
            a = first
            while a < stop:
                b = min(stop, (a // spp + WRITE_PACKETS) * spp)
                piece = self.ring.copy(a, b)
                lost += piece.lost_samples(spp)
                overwritten += piece.overwritten_packets + piece.torn_packets
                tfp = fmt.payload_to_tfp(piece.payload, piece.present)
                skip = a - piece.first_packet * spp
                out.write(tfp[skip : skip + b - a])
                a = b
            out.amend(DUMP_LOST_SAMPLES=lost)
        self._settle(dump, lost, overwritten)

    def _settle(self, dump: Dump, lost: int, overwritten: int) -> None:
        """The dump's lost samples as written (they replace those known at the trigger)."""
        with self._count:
            self.counts["lost_samples"] += lost - dump.lost_samples
            self.counts["overwritten_packets"] += overwritten
            dump.lost_samples, dump.overwritten_packets = lost, overwritten
        if overwritten:
            log.warning(
                "dump %d: %d packets were overwritten in the ring before the writer read "
                "them (written as zeros): the disk is slower than the stream; keep more "
                "--ring-seconds or dump to a faster disk",
                dump.id,
                overwritten,
            )

    def window(self, raw: bytes) -> tuple[int, int] | None:
        """A trigger's window (first, stop samples on the ring's clock) as it would be
        taken now; None before anything has arrived; TriggerError 400 if malformed. For
        a caller that waits for its window to arrive before triggering
        (record/candidate_triggers.py)."""
        clock = self.ring.clock
        if clock is None:
            return None
        first, stop, _ = parse_trigger(raw, clock, self.band, self.margin)
        return first, stop

    def newest(self) -> int | None:
        """The sample after the newest one in the ring (None: nothing yet)."""
        span = self.ring.span()
        return None if span is None else span[1]

    def busy(self) -> bool:
        """Whether a trigger now would be answered 503 (dumps waiting for the disk)."""
        return self._queue.qsize() >= MAX_QUEUED

    def ring_status(self) -> dict:
        """What the ring holds now, in seconds since the stream's first sample."""
        clock, span = self.ring.clock, self.ring.span()
        if clock is None or span is None:
            return {"ring": None}
        return {"ring": {"start": float(clock.seconds(span[0])),
                         "end": float(clock.seconds(span[1])),
                         "first_sample_mjd": clock.mjd_text(clock.first_sample)}}  # fmt: skip

    def status(self) -> dict:
        """GET's answer: the ring and the counters so far."""
        with self._count:
            counts = dict(self.counts)
        return {**self.ring_status(), "counts": counts}

    def close(self) -> None:
        """Writes every dump still queued, then stops the writer."""
        self._queue.put(None)
        self._writer.join()

    def as_dict(self) -> dict:
        with self._count:
            return {**self.counts, "ring": self.ring.state(),
                    "list": [asdict(d) for d in self.dumps]}  # fmt: skip
