"""One live cluster node over loopback without Dask (cluster/node.py `NodeRun`): a
stand-in merger that keeps what the node sends and starts the sender when the node says
it is capturing; a subband in the YNAO geometry (32 x 4 MHz channels, 2 pols, 8-bit)
with a pulsar; its one-machine reference fold. Used by tests/test_cluster_live_node.py
(CPU) and tests/gpu/test_cluster_gpu.py (a GPU node against the CPU node)."""

from __future__ import annotations

import threading
from dataclasses import dataclass, replace

import numpy as np

from loopback import free_bind, send
from voltstream.cluster.job import NodeJob
from voltstream.cluster.node import NodeRun
from voltstream.dsp.dedisperse import Dedisperser
from voltstream.fold.reference import FoldSettings
from voltstream.formats import StreamFormat, make_format
from voltstream.io.polyco import ConstantPeriod
from voltstream.observation import Observation
from voltstream.sim.signal import quantize_int8, synthesize

DM, PERIOD, NBIN, TSUB = 26.833, 2e-3, 32, 0.005
#: Packets per capture chunk of the tests' nodes (the timeline's gaps are whole chunks).
PPC = 64


class Rows:
    """The merger's methods as a node calls them: the rows put, the hello's first row."""

    def __init__(self, on_ready=None) -> None:
        self.rows: dict[int, tuple] = {}
        self.first_rows: list[int] = []
        self.byes: list[int] = []
        self.on_ready = on_ready

    def ready(self, node):
        if self.on_ready is not None:
            self.on_ready()
            self.on_ready = None

    def hello(self, node, first_row, worker):
        self.first_rows.append(int(first_row))

    def put(self, node, k, sums, hits, offered, counters):
        assert k not in self.rows, f"row {k} sent twice"
        self.rows[int(k)] = (sums, hits, offered)
        return True  # taken (a Dask actor's call returns a future, None is a failure)

    def bye(self, node, k):
        self.byes.append(int(k))


@dataclass
class Subband:
    """``seconds`` of one YNAO subband: its format, observation, the fold's settings,
    the int8 samples (whole packets) and their packets, stamped from sample 0."""

    seconds: float
    seed: int = 5

    def __post_init__(self) -> None:
        self.fmt: StreamFormat = make_format("ynao", chan_bw_mhz=4.0, freq_mhz=1420.0)
        self.obs: Observation = self.fmt.observation(start_mjd=60300, start_sec=500.0,
                                                     source="PSR_LIVE")  # fmt: skip
        spp = self.fmt.samples_per_packet
        n = int(self.seconds / self.obs.tsamp_s) // spp * spp
        x = synthesize(self.obs, (n + spp) * self.obs.tsamp_s, signal="pulsar", dm=DM,
                       period_s=PERIOD, duty=0.05, pulse_phase=0.3, seed=self.seed)  # fmt: skip
        self.q, _ = quantize_int8(x[:n])
        self.packets = self.fmt.packetize(self.q, 0, self.obs)
        nfft = Dedisperser(DM, self.obs.chan_freqs_mhz, self.obs.chan_bw_mhz).nfft
        pred = ConstantPeriod(PERIOD, self.obs.start_mjd, self.obs.start_sec)
        self.settings = FoldSettings(DM, pred, NBIN, TSUB, nfft=nfft)

    def job(self, **kw) -> NodeJob:
        """This subband as a whole band's only node, capturing on a free port."""
        freqs = tuple(float(f) for f in self.obs.chan_freqs_mhz)
        job = NodeJob("node0", free_bind(), self.obs, self.settings, freqs, self.obs.freq_mhz,
                      30.0, fmt=self.fmt, idle_timeout_s=0.7,
                      capture={"packets_per_chunk": PPC})  # fmt: skip
        return replace(job, **kw)

    def samples(self, first_packet: int = 0) -> np.ndarray:
        """complex64 samples from packet ``first_packet`` on (the reference's input)."""
        spp = self.fmt.samples_per_packet
        return self.q[first_packet * spp :].astype(np.float32).view(np.complex64)[..., 0]


def run_live_node(job: NodeJob, packets: np.ndarray) -> tuple[Rows, dict]:
    """The node captures ``packets`` sent over loopback (from when it says it is ready,
    paced so that loopback's socket buffer never overflows), folds and sends its rows;
    (the rows it sent, its report)."""
    rows = Rows()
    rows.on_ready = lambda: threading.Thread(
        target=send, args=(job.source, packets, 32), daemon=True
    ).start()
    report = NodeRun(job, rows, threading.Event()).run()
    return rows, report
