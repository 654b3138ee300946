"""`voltstream search --listen ... --ring-seconds T`: the live search keeps the voltage
ring beside its capture (capture/ring.py, in front of the reader's sink: the same for
``--device cpu`` and ``gpu``, whose filterbank takes the reader's blocks) and dumps
each candidate at or above ``--dump-threshold`` (record/candidate_triggers.py), with
HTTP triggers too where ``--trigger-listen`` asks. The options are capture's
(cli/dump.py); docs/search.md, "Triggered voltage dumps".
"""

from __future__ import annotations

import argparse
import logging
from typing import Any

from voltstream.cli.dump import close_servers, ring_and_dumps, serve_triggers
from voltstream.errors import ConfigError

__all__ = ["SearchDumps"]

log = logging.getLogger("voltstream.cli.search")

#: Seconds beyond a gulp and the sweep that a candidate may take to be found (the
#: capture's reorder window, the filterbank, the search): a ring shorter than a
#: window plus that may find its oldest candidates' windows gone (warned at start).
FIND_SLACK_S = 1.0


class SearchDumps:
    """The ring, its Dumps and the trigger server (where asked) of a live search, made
    before the capture opens; ``check`` them against the search, ``start(plan)`` once
    the filterbank's plan is made; then ``add`` takes each batch of candidates as they
    are written."""

    def __init__(self, args: argparse.Namespace, fmt: Any, settings: Any) -> None:
        if getattr(args, "real", False):
            raise ConfigError("--ring-seconds dumps 8-bit complex samples; a real-sampled "
                              "stream (--real) cannot be dumped yet")  # fmt: skip
        self.args = args
        self.settings, self.ring, self.dumps = ring_and_dumps(args, fmt, settings)
        self.triggers: Any = None
        self.servers: list = []

    def check(self, dm_max: float, gulp_s: float) -> None:
        """The ring against a burst's window at ``dm_max``: refused when shorter, warned
        when a candidate found a gulp and the sweep late may find its window gone.
        (Before any file of the search is opened.)"""
        from voltstream.dsp.dedisperse import dispersion_delay_s

        args, (f_lo, f_hi) = self.args, self.dumps.band
        window = float(dispersion_delay_s(dm_max, f_lo, f_hi)) + 2 * args.dump_margin
        if window > args.ring_seconds:
            raise ConfigError(
                f"--ring-seconds {args.ring_seconds:g} is shorter than a burst's window at "
                f"--dm-max {dm_max:g} (its sweep across the band and 2 x --dump-margin: "
                f"{window:.3f} s): keep at least {window:.3f} s"
            )
        found = window + gulp_s + FIND_SLACK_S
        if found > args.ring_seconds:
            log.warning("--ring-seconds %g: a candidate is found up to a gulp and the sweep "
                        "after its burst came, so the oldest part of a window may be gone "
                        "by then; keep %.1f s to dump every one whole", args.ring_seconds,
                        found)  # fmt: skip

    def start(self, plan: Any) -> None:
        """The triggers of the candidates of ``plan``'s search; the trigger server."""
        from voltstream.record.candidate_triggers import CandidateTriggers

        args = self.args
        span, first = plan.span, plan.first_input

        def position(c: Any) -> float:
            # The middle of the candidate's filterbank sample, on the reader's axis.
            return first + (c.sample_index + 0.5) * span

        top = float(plan.chan_freqs_mhz.max())  # the search's times are at its top channel
        self.triggers = CandidateTriggers(self.dumps, args.dump_threshold, top, position)
        self.servers = serve_triggers(self.dumps, args)

    def add(self, cands: list) -> None:
        if self.triggers is not None:
            self.triggers.add(cands)

    def close(self) -> None:
        """The stream ended: the waiting triggers tried, the server closed, every dump
        asked for written (before the report)."""
        try:
            if self.triggers is not None:
                self.triggers.close()
            close_servers(self.servers)
        finally:
            self.dumps.close()

    def as_dict(self) -> dict:
        """The report's ``dumps`` section: capture's, with the candidates' triggers."""
        out = self.dumps.as_dict()
        if self.triggers is not None:
            out["candidates"] = self.triggers.as_dict()
        return out

    def lines(self) -> list[str]:
        """The summary's lines: the ring and every dump (as capture's), the candidates."""
        from voltstream.capture.report import dump_lines

        d = self.as_dict()
        lines = ["search: triggered voltage dumps", *dump_lines(d)]
        c = d.get("candidates")
        if c is not None:
            lines.append(
                f"  candidates with S/N >= {c['threshold']:g}: {c['triggers']} of "
                f"{c['candidates']} triggered: dumped={c['dumped']} (waited for their "
                f"window={c['waited']}, partial: stream stalled={c['expired']}, ended="
                f"{c['at_end']})  refused: gone={c['refused_gone']} "
                f"not_yet={c['refused_not_yet']} busy={c['busy']} malformed={c['malformed']} "
                f"failed={c['failed']}"
            )
        return lines
