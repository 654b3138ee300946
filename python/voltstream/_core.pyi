"""Type stub for the compiled extension `voltstream._core` (crates/voltstream-py).

Checked against the binary by scripts/check_stub.py (`make stubs`, part of `make test`).
"""

from collections.abc import Mapping
from types import TracebackType
from typing import Any, Literal, Required, Self, TypedDict

__version__: str
DPDK_AVAILABLE: bool

def locate(
    format: Literal["vdif", "ynao"],
    packet: bytes,
    *,
    threads: list[int] | None = None,
    frame_len: int | None = None,
    frames_per_second: int | None = None,
    station: int | None = None,
    subband: int | None = None,
) -> tuple[int, int, int]:
    """Classifies one packet as the capture would: (stream, index, payload offset).
    Raises FormatError for malformed or foreign packets."""

def parse_header(format: str, packet: bytes) -> dict[str, Any]:
    """The header fields of one packet, checked by the Rust parser."""

class Sender:
    """Paced UDP sender: sendmmsg batches, UDP GSO where the kernel has it."""

    def __init__(self, dest: str, bind: str | None = None) -> None: ...
    def send(
        self,
        buffer: Any,
        packet_len: int,
        rate_gbps: float,
        at: float | None = None,
        times: Any | None = None,
    ) -> dict[str, Any]:
        """Sends `buffer` (n * packet_len bytes) at `rate_gbps` (0 = unpaced); releases
        the GIL. With `at` the first packet is due at that time on the sender's clock
        (it carries across calls); with `times` (float64, one per packet) each packet
        is due at its own time. Returns packets, bytes, seconds, rate_gbps, gso, late_s."""
    def restart_clock(self) -> None: ...
    @property
    def clock(self) -> float: ...
    @property
    def dest(self) -> str: ...
    @property
    def local_addr(self) -> str: ...

class _LatencyFrames(TypedDict, total=False):
    packets_per_frame: Required[int]
    window: int
    timeout_us: int
    resync_frames: int
    frame_field: dict[str, Any] | None
    send_time: dict[str, Any] | None

class _LatencyHandoff(TypedDict, total=False):
    mode: Required[Literal["copy", "persistent", "persistent-flag", "zerocopy"]]
    records: Required[int]
    slots: int
    threads: int
    check_pattern: bool
    write_combined: bool
    standin: bool

class _LatencyNetwork(TypedDict, total=False):
    bind: Required[str]
    batch: int

class _LatencySpec(TypedDict, total=False):
    """`LatencySession`'s one argument (run.py's `latency_spec` builds it): `format` is a
    capture's format section, or {"name": "vlat", "payload_len": N} for FrameSender's
    frames, stamped. Absent keys keep the core's defaults; unknown ones are refused."""

    format: Required[dict[str, Any]]
    network: Required[_LatencyNetwork]
    frames: Required[_LatencyFrames]
    handoff: Required[_LatencyHandoff]

class LatencySession:
    """The low-latency mode's Rust session (voltstream/latency/run.py drives it): a
    socket bound for frames of `frames.packets_per_frame` packets of the spec's format,
    assembled and handed to the GPU as `handoff.mode` says."""

    def __init__(self, spec: _LatencySpec | Mapping[str, Any], /) -> None: ...
    @property
    def frame_bytes(self) -> int: ...
    @property
    def local_addr(self) -> str: ...
    def attach(
        self,
        blocks: int,
        threads: int | None = None,
        context: int = 0,
        sum_frame: int = 0,
        copy_stream: int = 0,
        device_slots: int = 0,
        accum: int = 0,
    ) -> None:
        """The hand-off: host memory on CuPy's context with CuPy's handles (or the
        host stand-in when made with standin=True)."""
    def pointers(self) -> dict[str, int]:
        """mapped_slots, acks, control (device addresses), slot_stride, payload_cap."""
    def start(
        self,
        cpu: int | None = None,
        frames: int | None = None,
        seconds: float | None = None,
        idle_s: float | None = None,
    ) -> None: ...
    def running(self) -> bool: ...
    def stop(self) -> None: ...
    def abort(self) -> None: ...
    def join(self, timeout_s: float) -> dict[str, Any] | None:
        """Every counter and `end` once the loop has ended; None while it runs."""
    def stats(self) -> dict[str, Any]:
        """Every counter as the loop last published it (every 0.1 s, and at its end)."""
    def records(self) -> bytes:
        """Per acknowledged frame, packed as voltstream.latency.stats.RECORD_DTYPE."""
    def close(self) -> None: ...

class FrameSender:
    """Paced, stamped frames of P packets for the low-latency bench: 32-byte "VLAT"
    header (magic u32, k u16, P u16, index u64, t_send_ns u64, frame u64; little-endian)
    and a pattern payload (8-byte word j of the frame = frame ^ j * 0x9E3779B97F4A7C15)."""

    def __init__(
        self, dest: str, packets_per_frame: int, payload_len: int, bind: str | None = None
    ) -> None: ...
    def send_frames(
        self,
        first_frame: int,
        count: int,
        rate_hz: float,
        skip: tuple[int, int] | None = None,
        reverse: bool = False,
    ) -> dict[str, Any]:
        """Sends frames first_frame .. first_frame + count at rate_hz (0 = unpaced), each
        stamped with time.monotonic_ns() just before its first packet; releases the GIL.
        skip=(n, k) leaves out packet k of frames that are multiples of n; reverse sends
        each frame's packets last first. Returns frames, packets, bytes, seconds,
        late_max_ns, t_first_send_ns, t_last_send_ns."""
    @property
    def packets_per_frame(self) -> int: ...
    @property
    def payload_len(self) -> int: ...
    @property
    def packet_len(self) -> int: ...

class Chunk:
    """One assembled chunk; data [stream][packet][payload byte] via the buffer protocol."""

    @property
    def chunk_id(self) -> int: ...
    @property
    def first_index(self) -> int: ...
    @property
    def nstreams(self) -> int: ...
    @property
    def thread(self) -> int: ...
    @property
    def streams(self) -> list[int]: ...
    @property
    def packets_per_chunk(self) -> int: ...
    @property
    def payload_len(self) -> int: ...
    @property
    def present_count(self) -> int: ...
    @property
    def nbytes(self) -> int: ...
    @property
    def present(self) -> bytes: ...
    @property
    def address(self) -> int: ...
    @property
    def released(self) -> bool: ...
    def release(self) -> None: ...
    def __buffer__(self, flags: int, /) -> memoryview: ...
    def __enter__(self) -> Self: ...
    def __exit__(
        self, t: type[BaseException] | None, v: BaseException | None, tb: TracebackType | None
    ) -> bool: ...

class _FormatSection(TypedDict, total=False):
    """What arrives: ``name`` and that format's own keys (format_args.rs). VDIF:
    `vdif_legacy` takes frames with 16-byte legacy headers (others are malformed); with
    no `station`, the first valid frame of a listed thread fixes it. SPEAD ('spead'): a
    heap of `heap_bytes` (default samples_per_heap * sample_bits / 8) arrives as
    `packets_per_heap` packets of equal payload; packet k of heap h goes to index
    h * packets_per_heap + k (packets_per_chunk must be a multiple). h = time stamp item
    / samples_per_heap with the stream from the id item, or, given `heap_cnt_step`,
    h = heap_cnt // step with stream id heap_cnt % step. docs/formats.md, "SPEAD heaps
    of several packets"."""

    name: Required[Literal["vdif", "ynao", "spead", "codif", "counter", "layout"]]
    vdif_threads: list[int]
    vdif_frame_len: int
    frames_per_second: int
    vdif_legacy: bool
    subband: int
    station: int
    streams: int
    payload_len: int
    digitiser_ids: list[int]
    samples_per_heap: int
    sample_bits: int
    heap_address_bits: int
    timestamp_id: int
    digitiser_id_item: int
    packets_per_heap: int
    heap_bytes: int
    heap_cnt_step: int
    codif_threads: list[int]
    codif_frame_len: int
    frames_per_period: int
    group: int
    layout: dict[str, Any]

class _NetworkSection(TypedDict, total=False):
    bind: Required[str]
    interface: str | None
    multicast: list[str]
    queue_bytes: int

class _EngineSection(TypedDict, total=False):
    kind: Literal["auto", "socket", "packet_ring", "xdp", "dpdk"]
    batch: int
    ring_block_size: int
    xdp_queue: int
    xdp_mode: Literal["auto", "native", "drv", "skb", "generic"]
    dpdk_port: str | None
    dpdk_eal_args: list[str]

class _ChunkSection(TypedDict, total=False):
    packets_per_chunk: int
    nchunks: int
    window: int
    resync_chunks: int
    whole_packets: bool

class _ThreadSection(TypedDict, total=False):
    count: int
    cpus: list[int] | None
    stream_threads: list[int] | None

class _CaptureSpec(TypedDict, total=False):
    """`Capture`'s one argument, section for section the core's CaptureSpec. An absent
    section or key (or None) keeps the core's default (`capture_defaults()`); an unknown
    one is a ConfigError naming it."""

    format: Required[_FormatSection]
    network: Required[_NetworkSection]
    engine: _EngineSection
    chunks: _ChunkSection
    threads: _ThreadSection

def capture_defaults() -> dict[str, dict[str, Any]]:
    """The core's defaults of every section of a CaptureSpec but the format (and the
    bind address): the one source the Python settings read."""

class Capture:
    """UDP capture assembling packets into chunks; engine: 'auto' | 'socket' | 'packet_ring' |
    'xdp' (AF_XDP: our XDP program on `interface` redirects the flow on receive queue
    `xdp_queue` to an AF_XDP socket; needs root; `xdp_mode` 'native' | 'skb' | 'auto'; stats()
    then has an 'xdp' dict: mode, zero_copy, multi_buffer and the kernel's counters). 'auto'
    tries packet_ring, then socket; never xdp or dpdk. 'dpdk' (only when DPDK_AVAILABLE, i.e.
    built with `-F dpdk`): rte_eth_rx_burst on `dpdk_port`, a PCI address or EAL device
    arguments, or net_af_packet on `interface`; `dpdk_eal_args` are added to the EAL's;
    stats() then has a 'dpdk' dict. `multicast`: IPv4 groups to join (IGMP) on
    `interface`, bound to 0.0.0.0:port (or bind to GROUP:port). stats() also has 'host' (the
    kernel's drop counters outside the capture: 'udp' namespace-wide, 'softnet' host-wide,
    'interface'), 'memory' (chunk pool: huge_pages, locked, numa_node, warnings) and
    'multicast' (the groups joined).

    threads.count=N (packet_ring) runs N capture threads, each owning a disjoint block of
    streams (or those `stream_threads[s] == t` gives it), with its own ring of chunks:
    next_chunk(timeout, thread=t) serves one consumer per thread (e.g. per GPU);
    chunk.streams names a chunk's streams. cpus=[c0, ...] pins thread t to CPU ct (also
    with one thread). stats() sums the threads; stats()['threads'] has each thread's cpu,
    tid and counters.

    chunks.whole_packets keeps each packet whole in its chunk slot (the UDP payload,
    format header included; not for SPEAD), as recorders of VLBI layouts need."""

    def __init__(self, spec: _CaptureSpec | Mapping[str, Any], /) -> None: ...
    @property
    def settings(self) -> dict[str, dict[str, Any]]:
        """Every section but the format as the capture runs with it, defaults filled in."""
    def start(self, paused: bool = False) -> None: ...
    def resume(self) -> None: ...
    def next_chunk(self, timeout_s: float, thread: int | None = None) -> Chunk | None: ...
    def chunk_buffers(self) -> list[tuple[int, int]]:
        """(address, nbytes) of every pool chunk of every thread, fixed while the capture
        lives: register them once with the GPU driver for direct copies."""
    def free_chunks(self) -> int:
        """Pool chunks that are free (not being filled, queued or held by a consumer)."""
    def stop(self) -> None: ...
    def stats(self) -> dict[str, Any]: ...
    @property
    def address(self) -> str | None: ...
    @property
    def nstreams(self) -> int: ...
    @property
    def threads(self) -> int: ...
    @property
    def thread_streams(self) -> list[list[int]]: ...
    @property
    def chunk_stride(self) -> int:
        """Threads own chunk ids modulo this (1: threads own streams)."""
    @property
    def addresses(self) -> list[str]:
        """Every thread's bound address once started (several listen addresses)."""
    @property
    def payload_len(self) -> int: ...
    @property
    def slot_len(self) -> int: ...
    @property
    def whole_packets(self) -> bool: ...
    @property
    def packet_len(self) -> int: ...
    @property
    def packets_per_chunk(self) -> int: ...
    def __enter__(self) -> Self: ...
    def __exit__(
        self, t: type[BaseException] | None, v: BaseException | None, tb: TracebackType | None
    ) -> bool: ...

class Recorder:
    """Records every chunk of a started Capture to files on many disks (one writer
    thread per directory) in a layout: vbs, mark6, vdif (these need a capture with
    whole_packets=True) or dada; never holds the capture back. Call ``finish()``
    after the capture's ``stop()``. With ``forward_chunks`` > 0 every chunk written
    is passed on, in order, to ``next_chunk()`` (one more consumer of the capture)
    instead of back to the pool."""

    def __init__(
        self,
        capture: Capture,
        dirs: list[str],
        scan: str,
        layout: str = "vbs",
        queue_chunks: int = 2,
        file_chunks: int = 16,
        dada_header: str | None = None,
        frames_per_second: int | None = None,
        packet_format: int = 2,
        forward_chunks: int = 0,
        dada_headers: list[str] | None = None,
    ) -> None: ...
    # frames_per_second: a VDIF stream's; its missing frames become VDIF fill
    # frames in every layout but dada (required by the vdif layout). dada_headers:
    # one header's keys per stream (a band in several streams), else dada_header's
    # for every stream.
    def pieces(self, start: int = 0) -> list[dict[str, Any]]:
        """Finished files (Mark6: blocks) from position `start` of the log on: path,
        streams, number, first_index, packets, offset, bytes, tail_absent (per stream:
        slots at its end whose packet never arrived)."""
    def next_chunk(self, timeout_s: float) -> Chunk | None:
        """The next chunk written and passed on (forward_chunks > 0); None on timeout
        or once finish() has run and every chunk was taken."""
    def report(self) -> dict[str, Any]: ...
    def finish(self) -> dict[str, Any]: ...
