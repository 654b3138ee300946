"""The cluster benchmark's traffic and baseline (bench/cluster.py).

`Band`: the demo's band of N x 32 channels with its pulsar, synthesised once in
memory and split into N subbands (int8), as `voltstream simulate --subbands N` makes
it; packetised per run for that run's plan (`GEOMETRIES`: the demo's narrow channels,
or a real YNAO subband of 32 x 4 MHz per node). `send_band`: one paced `_core.Sender` per
node, every node's packet p due at the same instant ``T0 + p * dt`` (dt = one
packet's bytes at the node's share of the rate), so the time each packet was due is
known; the simulator subprocess cannot tell that. `fold_ceiling`: one node's fold
of its subband from memory, the same-run ceiling the cluster is compared with.
"""

from __future__ import annotations

import math
import threading
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from voltstream import _core
from voltstream.cli.cluster import DEMO_CHAN_BW_MHZ, DEMO_FREQ_MHZ
from voltstream.cli.commands import DEMO_PULSAR
from voltstream.cluster.job import NodeJob
from voltstream.cluster.node import NodeFold
from voltstream.dsp.dedisperse import dispersion_delay_s
from voltstream.formats import StreamFormat, make_format
from voltstream.sim import signal
from voltstream.subbands import split_subbands, whole_band_observation

#: Between starting the sender threads and the first packet's due time: every thread
#: is waiting on its sender's clock when its first packet is due.
LEAD_S = 0.3


def demo_format() -> StreamFormat:
    """One node's YNAO stream of the demo (cli/cluster.py): 32 x 62.5 kHz."""
    return make_format("ynao", chan_bw_mhz=DEMO_CHAN_BW_MHZ, freq_mhz=DEMO_FREQ_MHZ)


@dataclass(frozen=True)
class Geometry:
    """A band's shape: each node's YNAO subband (32 channels of ``chan_bw_mhz``, 2
    pols, 8 bits), its capture chunks (None: the node's own, as `voltstream fold
    --listen` sizes them), and how much of it is synthesised (``unit_s``; None: all),
    the rest repeating it (seconds of 4 MHz channels take minutes to synthesise)."""

    name: str
    chan_bw_mhz: float
    packets_per_chunk: int | None
    unit_s: float | None = None

    @property
    def fmt(self) -> StreamFormat:
        return make_format("ynao", chan_bw_mhz=self.chan_bw_mhz, freq_mhz=DEMO_FREQ_MHZ)


#: The demo's narrow channels (0.0642 Gb/s a node), and a real YNAO subband: 32 x 4 MHz,
#: 2 pols, 8-bit complex, 62 500 packets of 8216 bytes a second (4.1 Gb/s a node).
GEOMETRIES = {
    "demo": Geometry("demo", DEMO_CHAN_BW_MHZ, 32),
    "ynao": Geometry("ynao", 4.0, None, unit_s=0.05),
}


@dataclass
class Band:
    """N subbands of ``seconds`` of the demo's pulsar, whole packets only; with
    ``unit_s``, the first ``unit_s`` seconds synthesised and repeated."""

    n: int
    seconds: float
    seed: int = 1
    fmt: StreamFormat = field(default_factory=demo_format)
    unit_s: float | None = None
    parts: list[np.ndarray] = field(default_factory=list)  # per node (nsamp, 32, 2, 2) int8

    def __post_init__(self) -> None:
        # This start only anchors the synthesis; each run stamps the packets with its
        # own plan's start (`packets`), and the nodes index them by sequence number.
        obs = whole_band_observation(self.fmt, self.n, start_mjd=60000, start_sec=0.0,
                                     source="PSR_DEMO")  # fmt: skip
        spp = self.fmt.samples_per_packet
        pieces: list[list[np.ndarray]] = [[] for _ in range(self.n)]
        seconds = self.seconds if self.unit_s is None else min(self.seconds, self.unit_s)
        blocks = signal.synthesize_blocks(
            obs, seconds, signal="pulsar", dm=DEMO_PULSAR["dm"],
            period_s=DEMO_PULSAR["period"], duty=DEMO_PULSAR["duty"],
            pulse_phase=DEMO_PULSAR["pulse_phase"], seed=self.seed, block_samples=spp * 512,
        )  # fmt: skip
        for x in blocks:
            # Quantised as one band (one scale), then split: as the simulator does.
            q, _ = signal.quantize_int8(x)
            m = (q.shape[0] // spp) * spp
            for i, part in enumerate(split_subbands(q[:m], self.n)):
                pieces[i].append(part)
        self.parts = [np.concatenate(p, axis=0) for p in pieces]
        want = int(self.seconds / self.fmt.tsamp_s) // spp * spp
        if self.parts[0].shape[0] < want:  # the unit, repeated
            reps = -(-want // self.parts[0].shape[0])
            self.parts = [np.tile(p, (reps, 1, 1, 1))[:want] for p in self.parts]

    @property
    def samples(self) -> int:
        return int(self.parts[0].shape[0])

    @property
    def packets_per_node(self) -> int:
        return self.samples // self.fmt.samples_per_packet

    def packets(self, jobs: list[NodeJob]) -> list[np.ndarray]:
        """Each node's packets, stamped with its job's observation (the plan's start);
        subband ids as the simulator sets them (node i = subband i)."""
        out = []
        for i, job in enumerate(jobs):
            assert job.fmt is not None
            out.append(job.fmt.packetize(self.parts[i], 0, job.obs, subband=i))
        return out


def realtime_gbps(fmt: StreamFormat) -> float:
    """One node's stream at the telescope's own rate, whole UDP payloads (what the
    sender paces by), Gb/s."""
    return fmt.packet_len * 8 / (fmt.samples_per_packet * fmt.tsamp_s) / 1e9


def band_lead_s(job: NodeJob) -> float:
    """The most any channel of the whole band lags the band's centre (the folder's
    reference): row k of that channel ends ``lead`` after k S. Under 1 ms for the
    demo's 8 MHz at 1420 MHz (DM 26.8), but counted."""
    freqs = np.asarray(job.band_freqs_mhz)
    delays = dispersion_delay_s(job.settings.dm, freqs, job.band_centre_mhz)
    return max(0.0, float(np.max(delays)))


def last_packet_of_row(k: int, tsub_s: float, lead_s: float, fmt: StreamFormat) -> int:
    """Index of the packet holding the last sample row ``k`` needs: sample i of
    channel c is in row floor((i tsamp - delay_c) / S), so the last is
    ceil(((k + 1) S + max delay) / tsamp) - 1."""
    last = math.ceil(((k + 1) * tsub_s + lead_s) / fmt.tsamp_s - 1e-9) - 1
    return last // fmt.samples_per_packet


@dataclass
class NodeSend:
    """What one node's sender did."""

    dest: str
    packets: int = 0
    bytes: int = 0
    late_s: float = 0.0  # the most a burst started behind its due time
    ended_at: float | None = None  # Unix time the last packet left
    error: str | None = None


class BandSender:
    """N sender threads, one per node, on one schedule: packet p of every node due
    at Unix time ``t0 + p * dt``."""

    def __init__(self, dests: list[str], packets: list[np.ndarray], packet_len: int,
                 rate_gbps: float) -> None:  # fmt: skip
        self.packets, self.packet_len = packets, packet_len
        self.node_gbps = rate_gbps / len(dests)
        # The sender paces whole packets of packet_len bytes (the UDP payload: YNAO
        # header included) at bits_per_s: packet p is due p * packet_len * 8 / rate
        # after the first (crates/voltstream-core/src/send/sender.rs, Pace::Rate).
        self.dt = packet_len * 8 / (self.node_gbps * 1e9)
        self.senders = [_core.Sender(d) for d in dests]
        self.sends = [NodeSend(d) for d in dests]
        self.t0: float | None = None
        self.threads: list[threading.Thread] = []

    def start(self) -> None:
        self.t0 = time.time() + LEAD_S
        for i, sender in enumerate(self.senders):
            at = self.t0 - _clock_offset(sender)
            t = threading.Thread(target=self._send, args=(i, at), daemon=True,
                                 name=f"bench-send-{i}")  # fmt: skip
            self.threads.append(t)
            t.start()

    def done(self) -> bool:
        return bool(self.threads) and not any(t.is_alive() for t in self.threads)

    def join(self) -> None:
        for t in self.threads:
            t.join()

    def due(self, p: int) -> float:
        """Unix time packet ``p`` (of every node) was due."""
        assert self.t0 is not None
        return self.t0 + p * self.dt

    def _send(self, i: int, at: float) -> None:
        # One call: the GIL is released for the whole subband, so no other Python
        # thread of this process can make the sender late between calls; its
        # `late_s` is then the operating system's and the CPU's alone.
        rec = self.sends[i]
        try:
            r = self.senders[i].send(self.packets[i], self.packet_len, self.node_gbps, at=at)
            rec.packets, rec.bytes, rec.late_s = int(r["packets"]), int(r["bytes"]), r["late_s"]
        except Exception as e:  # a node that is down refuses: counted, not raised
            rec.error = f"{type(e).__name__}: {e}"
        rec.ended_at = time.time()


def _clock_offset(sender: Any) -> float:
    """Unix time minus the sender's pacing clock, read together (the clock read
    twice around time.time(): the mean is within a microsecond or so)."""
    c0 = sender.clock
    t = time.time()
    c1 = sender.clock
    return t - (c0 + c1) / 2


def fold_ceiling(job: NodeJob, part: np.ndarray, chunk_samples: int) -> dict:
    """One node's fold alone: ``part`` (int8 samples of the node's subband) fed to a
    `NodeFold` in the capture's chunks, as int8 samples (a GPU node: the chunk's own
    bytes, as its capture chunks hold them), rows taken as the node takes them. Samples
    per second and the same as Gb/s of this format's packets (the rate a node's fold
    could keep up with, capture aside)."""
    assert job.fmt is not None
    # A first pass over a few chunks: FFT plans and first-call costs are not the
    # rate (the nodes pay them once per observation, before their data flows).
    _fold_all(NodeFold(job), part[: 8 * chunk_samples], chunk_samples)
    t = time.perf_counter()
    rows = _fold_all(NodeFold(job), part, chunk_samples)
    seconds = time.perf_counter() - t
    sps = part.shape[0] / seconds
    fmt = job.fmt
    gbps = sps / fmt.samples_per_packet * fmt.packet_len * 8 / 1e9
    return {
        "samples": int(part.shape[0]),
        "seconds": seconds,
        "rows": rows,
        "samples_per_s": sps,
        "gbps_per_node": gbps,
        "x_realtime": gbps / realtime_gbps(fmt),
    }


def _fold_all(fold: NodeFold, part: np.ndarray, chunk_samples: int) -> int:
    rows = 0
    for a in range(0, part.shape[0], chunk_samples):
        x = part[a : a + chunk_samples]  # int8, as the capture hands them to a node
        fold.feed(x, np.ones(x.shape[0], bool), a)
        rows += len(fold.rows())
    return rows + len(fold.finish())
