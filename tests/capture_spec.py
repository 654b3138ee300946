"""``_core.Capture`` from flat keywords, for tests that exercise the binding directly:
``capture("counter", "127.0.0.1:0", 4, payload_len=8, nchunks=64, engine="socket")``
builds the nested spec ``_core.Capture`` takes (a section per part of the core's
CaptureSpec) and nothing else, so the core's own checks and defaults are what a test
sees. Keywords not named here are the format's; an unknown one reaches the core, which
refuses it. Verbs build their spec in ``CaptureSettings.spec`` instead."""

from __future__ import annotations

from typing import Any

from voltstream import _core

# Each flat keyword that is not the format's: its section and key in the spec.
_PLACES: dict[str, tuple[str, str]] = {
    "interface": ("network", "interface"),
    "multicast": ("network", "multicast"),
    "queue_bytes": ("network", "queue_bytes"),
    "engine": ("engine", "kind"),
    **{k: ("engine", k) for k in ("batch", "ring_block_size", "xdp_queue", "xdp_mode")},
    **{k: ("engine", k) for k in ("dpdk_port", "dpdk_eal_args")},
    **{
        k: ("chunks", k)
        for k in ("nchunks", "window", "resync_chunks", "whole_packets", "flush_age_s")
    },
    "threads": ("threads", "count"),
    "cpus": ("threads", "cpus"),
    "stream_threads": ("threads", "stream_threads"),
    "spread": ("threads", "spread"),
}


def spec(format: str, bind: str, packets_per_chunk: int | None = None, **fields: Any) -> dict:
    """The nested spec: ``fields`` sorted into their sections (the rest: ``format``)."""
    out: dict[str, dict[str, Any]] = {"format": {"name": format}, "network": {"bind": bind}}
    if packets_per_chunk is not None:
        out["chunks"] = {"packets_per_chunk": packets_per_chunk}
    for key, value in fields.items():
        section, name = _PLACES.get(key, ("format", key))
        if name == "dpdk_eal_args" and isinstance(value, str):
            value = value.split()
        out.setdefault(section, {})[name] = value
    return out


def capture(format: str, bind: str, packets_per_chunk: int | None = None, **fields: Any) -> Any:
    """A ``_core.Capture`` (not started) of ``spec(...)``."""
    return _core.Capture(spec(format, bind, packets_per_chunk, **fields))
