"""Latency statistics of a run: per stage, from the hot loop's per-frame records.

A record (one per frame handed over and acknowledged, written by the Rust hot loop,
`LatencySession.records()`) holds CLOCK_MONOTONIC nanosecond stamps:
- ``t_send``: the sender's stamp, taken just before the frame's first packet was sent
  (0 when the format carries none);
- ``t_first``: the receive call that placed the frame's first packet returned;
- ``t_done``: the receive call that placed its last packet returned (the frame was
  handed to the GPU right after);
- ``t_handed``: the hand-over calls had returned (the copy, launch or flag write was
  submitted, or the zero-copy store done);
- ``t_ack``: the host saw the GPU's acknowledgement (sums written, then the sequence
  number, stored last with release semantics).

Stages: ``send_to_received`` (t_done - t_send: the wire and the kernel's UDP path),
``received_to_ack`` (t_ack - t_done: the hand-over to the GPU, the GPU's work and the
acknowledgement's way back over PCIe; the figure the issue's targets are about) and
``end_to_end`` (t_ack - t_send). Percentiles are nearest rank (``method="higher"``:
every figure is a latency some frame really had), peak to peak is max - min.
"""

from __future__ import annotations

from typing import Any

import numpy as np

# The layout of one record as `LatencySession.records()` returns them (little-endian).
RECORD_DTYPE = np.dtype(
    [
        ("seq", "<u8"),
        ("frame", "<u8"),
        ("status", "<u4"),
        ("ok", "<u4"),
        ("t_send", "<u8"),
        ("t_first", "<u8"),
        ("t_done", "<u8"),
        ("t_handed", "<u8"),
        ("t_ack", "<u8"),
    ]
)

STAGES = {
    "send_to_received": ("t_send", "t_done"),
    "received_to_ack": ("t_done", "t_ack"),
    "end_to_end": ("t_send", "t_ack"),
    # The two parts of received_to_ack: the host's hand-over calls (copy, launch,
    # flag write, or the zero-copy store), then the GPU and the acknowledgement.
    "received_to_handed": ("t_done", "t_handed"),
    "handed_to_ack": ("t_handed", "t_ack"),
}

# Acknowledgement status of a frame the GPU processed as whole.
STATUS_OK = 1


def records_array(raw: bytes) -> np.ndarray:
    """The records `LatencySession.records()` returned, as a structured array."""
    if len(raw) % RECORD_DTYPE.itemsize:
        raise ValueError(
            f"{len(raw)} bytes of records is not a whole number of "
            f"{RECORD_DTYPE.itemsize}-byte records"
        )
    return np.frombuffer(raw, dtype=RECORD_DTYPE)


def summary_us(values_ns: np.ndarray) -> dict[str, Any]:
    """p50, p99, p99.9, max, min and peak to peak in microseconds, and the count."""
    if values_ns.size == 0:
        return {"frames": 0}
    v = values_ns.astype(np.float64) / 1e3

    def pct(q: float) -> float:
        return round(float(np.percentile(v, q, method="higher")), 3)

    return {
        "frames": int(v.size),
        "p50_us": pct(50),
        "p99_us": pct(99),
        "p999_us": pct(99.9),
        "max_us": round(float(v.max()), 3),
        "min_us": round(float(v.min()), 3),
        "ptp_us": round(float(v.max() - v.min()), 3),
    }


def stage_stats(records: np.ndarray, warmup: int = 0) -> dict[str, dict[str, Any]]:
    """Per-stage summaries of the whole frames the GPU acknowledged as processed.

    The first `warmup` such frames are left out (caches, clocks and the GPU's first
    polls); a stage that needs the sender's stamp is left out when the format has none.
    """
    whole = records[records["status"] == STATUS_OK][warmup:]
    out: dict[str, dict[str, Any]] = {}
    for stage, (a, b) in STAGES.items():
        rows = whole
        if a == "t_send":
            rows = rows[rows["t_send"] != 0]
            if rows.size == 0:
                continue
        # Stamps of one host's CLOCK_MONOTONIC never go backwards; a negative
        # difference would mean a stamp from another host and is left out.
        d = rows[b].astype(np.int64) - rows[a].astype(np.int64)
        out[stage] = summary_us(d[d >= 0])
    return out
