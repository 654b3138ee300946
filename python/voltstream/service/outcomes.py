"""How a receiving run ended, in words an operator can act on: a run that received
none of its stream (exit status 3, service/exit_status.py ``NO_DATA``).

Plain data in (a capture report's ``as_dict``), one line out: the verbs (commands.py)
log it and decide what becomes of their output files.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def nothing_received(report: Mapping[str, Any], bind: str, fmt: str) -> str | None:
    """One line when the run received none of its stream (no packet counted
    ``received``), saying whether anything arrived at all; None when it did receive."""
    totals = report.get("totals", {})
    if int(totals.get("received", 0)) > 0:
        return None
    other = {k: int(totals.get(k, 0)) for k in ("malformed", "foreign", "invalid", "late")}
    seen = int(report.get("engine", {}).get("packets", 0) or 0)
    if seen or any(other.values()):
        counts = ", ".join(f"{k}={v}" for k, v in other.items() if v)
        return (
            f"packets arrived on {bind} but none was a {fmt} frame of this stream "
            f"({counts or f'{seen} packets'}): run `voltstream inspect --listen {bind}` "
            "to see what they are (format, station, threads) and give those options"
        )
    return (
        f"nothing arrived on {bind} in {float(report.get('duration_s', 0)):.0f} s: check "
        "the sender's destination (host and port) and any firewall in between"
    )
