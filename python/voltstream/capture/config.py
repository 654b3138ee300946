"""A capture's configuration as one validated object, section for section the core's.

The Rust core describes a capture with ``capture::CaptureSpec``: a stream format, a
network section, an engine choice with its options, the chunking and the threads. This
module is the same shape in Python (pydantic), so a TOML table maps onto it one to one
and every error names its key (``engine.kind``, ``threads.cpus.1``)::

    [stream]                      # streams.py: one description per format
    format = "vdif"
    threads = [0, 1]
    frame_len = 8032
    frames_per_second = 25600

    [network]
    bind = "0.0.0.0:7148"
    multicast = ["239.1.2.3"]
    interface = "ens1f0"
    queue_mb = 256                # kernel memory for unread packets, any engine

    [engine]
    kind = "packet_ring"          # auto | socket | packet_ring | xdp | dpdk

    [chunks]
    packets_per_chunk = 256

    [threads]
    count = 2
    cpus = [2, 3]

``CaptureSettings.spec(stream)`` gives ``_core.Capture``'s one argument, the same
sections as a dict (the stream's format as ``format``); the core validates the whole
once more (geometry, threads against streams, multicast groups) before anything opens.
The operations issue's pipeline description takes this table as its ``[capture]`` part.

Defaults: every one is the core's (``CaptureSpec::new``), read here through
``_core.capture_defaults()``, so a TOML file, a verb and a bare ``_core.Capture`` get
the same values (docs/architecture.md, "One source for a capture's defaults").
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Literal, Protocol

from pydantic import BaseModel, ConfigDict, Field

from voltstream import _core
from voltstream.capture import defaults
from voltstream.config_files import read_toml, validated
from voltstream.errors import ConfigError
from voltstream.streams import StreamDescription

__all__ = [
    "CaptureFile",
    "CaptureFormat",
    "CaptureSettings",
    "ChunkSettings",
    "EngineSettings",
    "NetworkSettings",
    "ThreadSettings",
    "load_capture_file",
]

MIB = 1 << 20

#: The core's defaults for every section but the format (``CaptureSpec::new``).
_NET, _ENGINE, _CHUNKS, _THREADS = (
    defaults.NETWORK,
    defaults.ENGINE,
    defaults.CHUNKS,
    defaults.THREADS,
)


class CaptureFormat(Protocol):
    """What a capture needs of its stream's format: ``formats.StreamFormat`` (YNAO and
    VDIF with their sample geometry) and every ``streams.py`` description have it."""

    @property
    def name(self) -> str: ...

    @property
    def streams(self) -> int: ...

    @property
    def nchan(self) -> int: ...

    @property
    def npol(self) -> int: ...

    @property
    def samples_per_packet(self) -> int: ...

    def capture_kwargs(self) -> dict[str, Any]: ...


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class NetworkSettings(_Section):
    """Where packets come from, and how much kernel memory may queue them."""

    bind: str = Field(description="host:port the traffic is sent to; port 0 picks one")
    interface: str | None = Field(
        default=None, description="capture interface (default: the bind's)"
    )
    multicast: list[str] = Field(default_factory=list, description="groups to join")
    queue_mb: float = Field(
        default=_NET["queue_bytes"] / MIB,
        gt=0,
        description="MiB for unread packets: socket buffer, ring, UMEM or queue",
    )
    more_binds: list[str] = Field(
        default_factory=list,
        description="more addresses, each a copy of the format's streams (a band in "
        "several streams), one capture thread each",
    )


class EngineSettings(_Section):
    """Which engine reads the packets, and the options only one engine reads."""

    kind: Literal["auto", "socket", "packet_ring", "xdp", "dpdk"] = _ENGINE["kind"]
    batch: int = Field(
        default=_ENGINE["batch"], ge=1, le=1024, description="socket: packets per recvmmsg"
    )
    ring_block_size: int = Field(
        default=_ENGINE["ring_block_size"], ge=4096, description="packet ring: bytes per block"
    )
    xdp_queue: int = Field(
        default=_ENGINE["xdp_queue"], ge=0, description="AF_XDP: interface queue"
    )
    xdp_mode: Literal["auto", "native", "drv", "skb", "generic"] = _ENGINE["xdp_mode"]
    dpdk_port: str | None = Field(
        default=None, description="DPDK: PCI address, vdev args or interface"
    )
    dpdk_eal_args: str | None = Field(default=None, description="DPDK: extra EAL arguments")


#: What a capture's reorder window holds when none is given (issue 26 item 5): the
#: packets of REORDER_S seconds of the stream at its nominal rate, and at least
#: REORDER_PACKETS packets (what several interleaved senders, or the queues of a
#: switch, reorder: 4 senders of 32-packet blocks reorder about 256).
REORDER_S = 0.010
REORDER_PACKETS = 4096
#: ... but the packet floor never holds more than this much of a slow stream: a chunk
#: leaves the window that late, and a live search's latency is that long. (4096 packets
#: of a 16 MHz YNAO band are 0.52 s; a packet that late is lost, not reordered.)
REORDER_PACKETS_MAX_S = 0.100
#: Beyond this many open chunks each one's bitmap costs more than it saves: use
#: larger chunks instead.
MAX_DEFAULT_WINDOW = 1024


class ChunkSettings(_Section):
    """How packets are assembled into chunks."""

    packets_per_chunk: int = Field(
        default=_CHUNKS["packets_per_chunk"], ge=1, description="packets per stream per chunk"
    )
    nchunks: int = Field(default=_CHUNKS["nchunks"], ge=2, description="chunks in the pool")
    window: int | None = Field(
        default=None,
        ge=1,
        description="chunks open for late packets (None: as many as hold 10 ms of the "
        "stream, and at least 4096 packets; see window_for)",
    )
    resync_chunks: int = Field(
        default=_CHUNKS["resync_chunks"], ge=1, description="a jump beyond this resynchronises"
    )
    whole_packets: bool = Field(
        default=_CHUNKS["whole_packets"],
        description="slots hold whole packets, headers included (recording)",
    )
    flush_age_s: float | None = Field(
        default=_CHUNKS["flush_age_s"],
        gt=0,
        allow_inf_nan=False,
        description="seconds a chunk may stay open before it goes out (none: the window "
        "alone; a recording's default is record/flush.py's FLUSH_AGE_S)",
    )

    def window_for(
        self, packets_per_chunk: int | None = None, packets_per_second: float | None = None
    ) -> int:
        """The reorder window in chunks: the one given, else enough chunks of
        ``packets_per_chunk`` (default: this section's) to hold ``REORDER_S`` of a
        stream of ``packets_per_second`` and ``REORDER_PACKETS`` packets (at most
        ``REORDER_PACKETS_MAX_S`` of it), never fewer than the core's default (4)."""
        if self.window is not None:
            return self.window
        ppc = packets_per_chunk or self.packets_per_chunk
        floor = float(REORDER_PACKETS)
        if packets_per_second:
            floor = min(floor, REORDER_PACKETS_MAX_S * packets_per_second)
        want = max(floor, REORDER_S * (packets_per_second or 0.0))
        return int(min(MAX_DEFAULT_WINDOW, max(_CHUNKS["window"], math.ceil(want / ppc))))


class ThreadSettings(_Section):
    """How the capture is spread over threads (packet ring fanout beyond one)."""

    count: int = Field(default=_THREADS["count"], ge=1, description="capture threads")
    cpus: list[int] | None = Field(default=None, description="one CPU per thread")
    stream_threads: list[int] | None = Field(default=None, description="thread owning each stream")
    spread: Literal["auto", "streams", "chunks"] = Field(
        default=_THREADS["spread"],
        description="threads own streams, or take turns by chunk id (one stream on "
        "several cores); auto: streams when there are enough with steerable ids",
    )


# Each flat setting name (a verb's option, ``of``/``replace``'s keywords): its section
# and field here.
_KEYWORDS: dict[str, tuple[str, str]] = {
    "bind": ("network", "bind"),
    "interface": ("network", "interface"),
    "multicast": ("network", "multicast"),
    "queue_bytes": ("network", "queue_mb"),
    "more_binds": ("network", "more_binds"),
    "engine": ("engine", "kind"),
    **{k: ("engine", k) for k in ("batch", "ring_block_size", "xdp_queue", "xdp_mode")},
    **{k: ("engine", k) for k in ("dpdk_port", "dpdk_eal_args")},
    **{
        k: ("chunks", k)
        for k in ("packets_per_chunk", "nchunks", "window", "resync_chunks", "whole_packets")
    },
    "flush_age": ("chunks", "flush_age_s"),
    "threads": ("threads", "count"),
    "cpus": ("threads", "cpus"),
    "stream_threads": ("threads", "stream_threads"),
    "spread": ("threads", "spread"),
}


class CaptureSettings(_Section):
    """Everything about a capture but the stream format: the core spec's other parts."""

    network: NetworkSettings
    engine: EngineSettings = EngineSettings()
    chunks: ChunkSettings = ChunkSettings()
    threads: ThreadSettings = ThreadSettings()

    @classmethod
    def of(cls, bind: str, **keywords: Any) -> CaptureSettings:
        """Settings from flat keywords (a verb's option names: ``nchunks``,
        ``engine``, ``queue_bytes``...); a keyword given as None keeps its default."""
        return cls(network=NetworkSettings(bind=bind)).replace(**keywords)

    def replace(self, **keywords: Any) -> CaptureSettings:
        """A copy with some flat keywords (as ``of`` takes them) changed (None:
        unchanged), validated again."""
        data = self.model_dump()
        for k, v in keywords.items():
            if k not in _KEYWORDS:
                raise ConfigError(f"unknown capture setting {k!r}; use one of {sorted(_KEYWORDS)}")
            if v is None:
                continue
            section, name = _KEYWORDS[k]
            data[section][name] = v / MIB if k == "queue_bytes" else v
        return validated("capture settings", type(self).model_validate, data)

    def spec(self, stream: CaptureFormat) -> dict[str, Any]:
        """``_core.Capture``'s argument: these sections, each the core spec's, and the
        stream's format (``capture_kwargs()``: a stream description or a ``formats``
        format) as the ``format`` section. Every field is given: none is left to a
        default the core would fill in differently."""
        fmt = dict(stream.capture_kwargs())
        net, eng, threads = self.network, self.engine, self.threads
        return {
            "format": {"name": fmt.pop("format"), **fmt},
            "network": {
                "bind": net.bind,
                "interface": net.interface,
                "multicast": list(net.multicast),
                "queue_bytes": int(net.queue_mb * MIB),
                "more_binds": list(net.more_binds),
            },
            "engine": {
                **eng.model_dump(exclude={"dpdk_eal_args"}),
                "dpdk_eal_args": (eng.dpdk_eal_args or "").split(),
            },
            "chunks": self._chunks_for(stream),
            "threads": threads.model_dump(),
        }

    def _chunks_for(self, stream: CaptureFormat) -> dict[str, Any]:
        """The chunks section with its window resolved for ``stream``'s rate. A window
        left to the default, or a pool left at its default size, grows the pool to at
        least twice the window and four more: as many chunks again as the window may be
        with the consumer (queued, or held by a timeline of several threads). (Before,
        `capture --window 32` met the default pool of 16 and was refused.) A pool and a
        window both given are passed as they are, for the core to check."""
        chunks = self.chunks.model_dump()
        if self.chunks.window is None or self.chunks.nchunks == _CHUNKS["nchunks"]:
            window = self.chunks.window_for(None, getattr(stream, "packets_per_second", None))
            chunks["window"] = window
            chunks["nchunks"] = max(chunks["nchunks"], 2 * window + 4)
        return chunks

    def open(self, stream: CaptureFormat) -> Any:
        """A ``_core.Capture`` (not started) of ``stream`` as ``spec`` describes it. The
        core raises ConfigError for what does not fit, CaptureError when an engine
        fails."""
        return _core.Capture(self.spec(stream))


#: Sockets that learnt a stream before its capture opened (``--vdif-threads auto``),
#: still bound: a port no socket holds answers the sender with ICMP port-unreachable,
#: which ends a sender on a connected socket. :func:`start_capture` closes them the
#: moment before the capture binds the port itself.
_PORT_HOLDS: list[Any] = []


def hold_port(sock: Any) -> None:
    """Keeps ``sock`` bound until the next capture of this process starts."""
    _PORT_HOLDS.append(sock)


def start_capture(cap: Any) -> None:
    """``cap.start()``, right after the sockets :func:`hold_port` holds are closed:
    the port is without a socket only while the engine binds it (microseconds)."""
    while _PORT_HOLDS:
        _PORT_HOLDS.pop().close()
    cap.start()


class CaptureFile(CaptureSettings):
    """A whole capture in one file: the stream description and the settings."""

    stream: StreamDescription

    def open_capture(self) -> Any:
        return self.open(self.stream)


def load_capture_file(path: str | Path) -> CaptureFile:
    """A validated capture configuration from TOML; ConfigError naming every wrong key."""
    p = Path(path)
    data = read_toml(p, "the capture configuration")
    return validated(str(p), CaptureFile.model_validate, data)
