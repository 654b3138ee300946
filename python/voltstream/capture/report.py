"""What a capture run counted (``CaptureReport``): the JSON report and the lines the
terminal shows, stream by stream, with the kernel's counters and the memory's
placement. The capture loop that fills it is pipeline/capture.py.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from voltstream.formats import StreamFormat

if TYPE_CHECKING:
    from voltstream.capture.config import CaptureFormat


COUNTER_NAMES = (
    "received", "missing", "late", "duplicate", "invalid", "malformed", "foreign", "dropped",
)  # fmt: skip
#: Counted per stream (the rest, malformed and foreign, capture-wide).
STREAM_COUNTERS = ("received", "missing", "late", "duplicate", "invalid", "dropped")


@dataclass
class CaptureReport:
    """Everything a capture run counted, for the JSON report and the terminal."""

    format: str
    bind: str
    duration_s: float = 0.0
    chunks: int = 0
    samples_written: int = 0
    bytes_written: int = 0
    engine: dict = field(default_factory=dict)
    discontinuities: int = 0  # timeline restarts (jumps beyond the resync bound)
    #: Per stream, packets of blocks that went out without a capture thread that had
    #: fallen silent (its engine counted nothing); and packets of chunks that came
    #: after their block went out (the engine counted them received). Both lost.
    silent_packets: list = field(default_factory=list)
    late_chunk_packets: int = 0
    pipeline: dict | None = None  # what the consumer (a GPU stage) counted
    stream_labels: list = field(default_factory=list)  # e.g. "VDIF thread 3" per stream
    interrupted: bool = False  # ended by a stop request (SIGINT/SIGTERM), not its duration
    samples_not_folded: int = 0  # captured, still queued for a live fold when it stopped
    #: How the run ended (CaptureRun.ended): "duration", "idle", "idle, nothing
    #: arrived", "stop"; with ``still_arriving`` when a duration cut a live stream.
    ended: str = ""
    still_arriving: bool = False
    #: Per stage, a histogram of seconds per item (stage_times.py): "consumer", the
    #: consumer's Python per chunk (the per-chunk cost the design keeps small).
    stage_seconds: dict = field(default_factory=dict)
    #: Triggered voltage dumps (record/dumps.py ``Dumps.as_dict``): the ring, every
    #: trigger, dump and refusal counted, and each dump.
    dumps: dict | None = None

    @property
    def totals(self) -> dict[str, int]:
        tot = dict.fromkeys(COUNTER_NAMES, 0)
        for s in self.engine.get("streams", []):
            for k in COUNTER_NAMES:
                tot[k] += int(s.get(k, 0))
        for k in ("malformed", "foreign"):
            tot[k] = max(tot[k], int(self.engine.get(k, 0)))
        return tot

    @property
    def lost(self) -> int:
        t = self.totals
        timeline = sum(self.silent_packets) + self.late_chunk_packets
        return (
            t["missing"] + t["late"] + t["dropped"] + int(self.engine.get("kernel_drops", 0))
            + timeline
        )  # fmt: skip

    def as_dict(self) -> dict:
        payload = self.engine.get("payload_bytes", self.bytes_written)
        return {
            "format": self.format,
            "bind": self.bind,
            "duration_s": self.duration_s,
            "chunks": self.chunks,
            "samples_written": self.samples_written,
            "bytes_written": self.bytes_written,
            "discontinuities": self.discontinuities,
            "silent_packets": list(self.silent_packets),
            "late_chunk_packets": self.late_chunk_packets,
            "rate_gbps": 8 * payload / self.duration_s / 1e9 if self.duration_s else 0.0,
            "totals": self.totals,
            "lost": self.lost,
            "engine": self.engine,
            "pipeline": self.pipeline,
            "streams": [
                dict({k: s.get(k, 0) for k in STREAM_COUNTERS}, label=label)
                for s, label in zip(self.engine.get("streams", []), self._labels(), strict=True)
            ],
            "station": self.engine.get("station"),
            "interrupted": self.interrupted,
            "samples_not_folded": self.samples_not_folded,
            "ended": self.ended,
            "still_arriving": self.still_arriving,
            "stage_seconds": self.stage_seconds,
            "dumps": self.dumps,
        }

    def write_json(self, path: str | Path) -> None:
        Path(path).write_text(json.dumps(self.as_dict(), indent=2) + "\n")

    def _labels(self) -> list[str]:
        n = len(self.engine.get("streams", []))
        labels = list(self.stream_labels)[:n]
        return labels + [f"stream {i}" for i in range(len(labels), n)]

    def summary_lines(self) -> list[str]:
        t = self.totals
        lines = [
            f"capture {self.format} on {self.bind} ({self.engine.get('engine', '?')} engine): "
            f"{counted(self.chunks, 'chunk')}, "
            f"{self.samples_written} samples, {self.bytes_written / 1e6:.1f} MB "
            f"in {self.duration_s:.2f} s",
            "  "
            + "  ".join(f"{k}={t[k]}" for k in COUNTER_NAMES)
            + f"  kernel_drops={self.engine.get('kernel_drops', 0)}",
        ]
        if (station := self.engine.get("station")) is not None:
            lines.append(f"  station {station} ({_station_text(station)}): frames of any "
                         "other are counted foreign")  # fmt: skip
        streams = self.engine.get("streams", [])
        if len(streams) > 1 or t["invalid"]:
            for s, label in zip(streams, self._labels(), strict=True):
                lines.append(
                    f"  {label}: " + "  ".join(f"{k}={s.get(k, 0)}" for k in STREAM_COUNTERS)
                )
        if p := self.pipeline:
            lines.append(
                f"  GPU stage: {p['blocks']} blocks, {p['gaps']} gaps, {p['samples_fed']} "
                f"samples ({p['lost_samples']} lost), pool {p['pool_chunks']} chunks, "
                f"at most {p['max_copies_in_flight']} copies in flight, "
                f"{(p['registered_bytes'] or 0) / 2**20:.0f} MiB page-locked, GPU busy "
                f"{p.get('gpu_busy_pct', 0):.0f}%"
            )
            if "host_ms_per_block" in p:
                lines.append(
                    f"  host cost {p['host_ms_per_block']:.2f} ms per block of "
                    f"{p['block_ms']:.1f} ms ({p['packets_per_chunk']} packets per stream)"
                )
            if p.get("registration_warning"):
                lines.append(f"  warning: {p['registration_warning']}")
        if self.dumps is not None:
            lines += dump_lines(self.dumps)
        if groups := self.engine.get("multicast"):
            lines.append("  multicast groups joined: " + ", ".join(groups))
        lines += _host_lines(self.engine.get("host"), self.engine.get("engine"))
        lines += _memory_lines(self.engine.get("memory"))
        if self.interrupted:
            lines.append("  (stopped by a signal: the chunks in hand were finished and counted)")
        if self.samples_not_folded:
            lines.append(f"  {self.samples_not_folded} samples captured after the stop were "
                         "not folded")  # fmt: skip
        if self.still_arriving:
            lines.append(
                f"  warning: the stream was still arriving when --duration "
                f"({self.duration_s:.0f} s) ran out, so this is only its first part: capture "
                "all of it with a longer --duration and --idle-timeout N (the run then ends "
                "N s after the last packet)"
            )
        threads = self.engine.get("threads", [])
        if len(threads) > 1 or any(th.get("cpu") is not None for th in threads):
            for th in threads:
                tot = th["totals"]
                lines.append(
                    f"  thread {th['thread']} (cpu {th['cpu']}, streams {th['streams']}): "
                    + "  ".join(f"{k}={tot[k]}" for k in ("received", "missing", "late"))
                    + f"  duplicate={tot['duplicate']}  malformed={th['malformed']}"
                    + f"  foreign={th['foreign']}  dropped={tot['dropped']}"
                    + f"  kernel_drops={th['kernel_drops']}"
                )
        return lines


def counted(n: int, word: str, plural: str | None = None) -> str:
    """``n word`` with the word's plural unless ``n`` is 1: "1 chunk", "3 chunks"."""
    return f"{n} {word if n == 1 else plural or word + 's'}"


def dump_lines(d: dict) -> list[str]:
    """The voltage ring and its dumps: every count, then each dump."""
    ring = d["ring"]
    lines = [
        f"  voltage ring: {ring['seconds']:g} s, {ring['bytes'] / 2**20:.0f} MiB; "
        f"{counted(d['triggers'], 'trigger')}: dumps={d['dumps']} (partial={d['partial']}, "
        f"written={d['written']}, failed={d['failed']})  refused: gone={d['refused_gone']} "
        f"not_yet={d['refused_not_yet']} malformed={d['malformed']} busy={d['busy']}"
    ]
    for x in d["list"]:
        lines.append(
            f"    dump {x['id']}: {x['path']}  {x['start_s']:.6f} .. {x['end_s']:.6f} s "
            f"(MJD {x['start_mjd']}), {x['samples']} samples, {x['lost_samples']} lost"
            + (", partial" if x["partial"] else "") + f", {x['state']}"
            + (f": {x['error']}" if x["error"] else "")
        )  # fmt: skip
    return lines


def _station_text(station: int) -> str:
    """A VDIF station id as its two ASCII characters where it is printable."""
    pair = bytes([station >> 8, station & 0xFF])
    return pair.decode() if all(0x20 < b < 0x7F for b in pair) else f"0x{station:04x}"


def _host_lines(host: dict | None, engine: str | None = None) -> list[str]:
    """The kernel's counters outside the capture, each with how far it reaches."""
    if not host:
        return []

    def fmt(d: dict, keys: tuple[str, ...]) -> str:
        return " ".join(f"{k}={'n/a' if d.get(k) is None else d[k]}" for k in keys)

    parts = []
    if udp := host.get("udp"):
        parts.append(
            "udp " + fmt(udp, ("rcvbuf_errors", "in_errors", "in_csum_errors", "no_ports"))
            + f" [{udp['scope']}]"
        )  # fmt: skip
    if sn := host.get("softnet"):
        parts.append("softnet " + fmt(sn, ("dropped", "time_squeeze")) + f" [{sn['scope']}]")
    if nic := host.get("interface"):
        parts.append(
            f"{nic['name']} " + fmt(nic, ("rx_dropped", "rx_missed_errors")) + " [interface]"
        )
    if not parts:
        return []
    if engine == "packet_ring":
        # The guard socket holding the port has a drop-all filter, so the stack
        # counts each datagram it also saw as a UDP InError; the ring got them.
        parts.append(
            "(udp in_errors include the datagrams the packet ring's guard socket "
            "discards by design; they reached the capture)"
        )
    return ["  kernel counters during the run (context, also counting other traffic):"] + [
        "    " + p for p in parts
    ]


def _memory_lines(mem: dict | None) -> list[str]:
    if not mem or not mem.get("bytes"):
        return []
    node = mem.get("numa_node")
    lines = [
        f"  chunk pool: {mem['bytes'] / 2**20:.1f} MiB, "
        f"huge pages {'yes' if mem.get('huge_pages') else 'no'}, "
        f"locked {'yes' if mem.get('locked') else 'no'}, "
        f"NUMA node {'-' if node is None else node}"
    ]
    lines += [f"  warning: {w}" for w in mem.get("warnings", [])]
    return lines


def stream_labels(fmt: CaptureFormat) -> list[str]:
    """What each capture stream is, for the report."""
    labels = getattr(fmt, "labels", None)
    if callable(labels):  # a stream description
        return labels()
    if isinstance(fmt, StreamFormat) and fmt.name == "vdif":
        return [f"VDIF thread {t} (pol {p})" for p, t in enumerate(fmt.thread_ids)]
    return [fmt.name.upper()]
