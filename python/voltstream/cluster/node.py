"""One node of a cluster observation: capture (or read) one subband, dedisperse and
fold it, and send each finished sub-integration to the merger (cluster/merger.py).

`run_node` is the long Dask task pinned to the node's worker by its resource
(cluster/driver.py submits it); it needs nothing from Dask but the merger's handle
and the stop event, so the same code folds a file on that node. A live node is the
one-host live path (`run_capture` -> `StageRunner` -> the fold engine) with a row sink:
its stage is cluster/node_stage.py `NodeStage`, the same for CPU and GPU nodes.

Time stamps, not wall clocks, line the nodes up: the observation starts at packet
index ``start_packet`` of the format's index axis, the same on every node, and the
folder's sample 0 is there (`NodeJob`). A node drops what comes before the start
(counted ``samples_before_start``) and marks what it never received as lost, so
sub-integration k is the same sample range on every node. A node that starts late (a
restart after a kill, a spare) folds from its first packet but sends rows only from
the first one it has whole (``first_row``), and says so to the merger (`hello`), which
waits for it again from there.
"""

from __future__ import annotations

import collections
import logging
import math
import threading
import time
from typing import Any

import numpy as np

from voltstream.capture.config import CaptureSettings
from voltstream.cluster.job import NodeJob
from voltstream.cluster.merge import Subband
from voltstream.errors import ConfigError
from voltstream.formats import StreamFormat
from voltstream.observation import Observation

log = logging.getLogger("voltstream.cluster.node")

#: Rows a node keeps after sending them, for a merger started again.
RESEND_ROWS = 4
#: The longest a call to the merger may take: a merger whose worker died can leave a
#: call waiting on its connection (Dask's connect timeout, 30 s by default).
ASK_TIMEOUT_S = 10.0
#: Rows a node has sent and not yet seen written (see `NodeRun._send`).
IN_FLIGHT = 2
#: MiB of capture pool a CPU node folds from, unless its job says (a GPU node's is the
#: one-host live fold's, pipeline/live.py): what the fold may lag the stream by.
CPU_POOL_MB = 64


class NodeFold:
    """A subband's fold placed on the observation's time axis, handing out rows.

    ``feed(samples, valid, first_sample)`` with ``first_sample`` on the observation's
    axis (0 = the start), ``feed_lost`` and ``feed_block`` (a GPU node's capture
    block) likewise, all placed by `place`; `rows()` gives the rows now whole, as (k,
    sums, hits, offered); `finish()` the rest.
    """

    def __init__(self, job: NodeJob) -> None:
        from voltstream.cluster.engines import fold_engine

        s, obs = job.settings, job.obs
        self.job, self.obs = job, obs
        self.fold = fold_engine(job)
        self.tsamp = self.obs.tsamp_s
        if not s.tsub_s:
            raise ConfigError("a cluster node sends sub-integrations: give their length (tsub)")
        self.tsub: float = s.tsub_s
        self.next_sample: int | None = None  # on the observation's axis
        self.first_row: int | None = None
        self.samples_before_start = 0
        self.samples_skipped = 0  # a late start's samples before the FFT grid
        self.samples_missing = 0  # not received between the start and the last packet
        self.rows_skipped = 0  # partial rows of a late start, never sent

    def start_at(self, first: int) -> int:
        """The first sample is ``first``: where folding starts, and the first row."""
        if first * self.tsamp < self.tsub:
            # Within the first row: the start counts as lost, as a fold of the whole
            # band would count it, so row 0 is this node's too.
            self.next_sample, self.first_row = 0, 0
            return 0
        # A late start. Folding begins on the whole band's FFT grid (multiples of the
        # overlap-save step from the start): a chirp's response outlives the overlap a
        # little, so only the same FFT blocks give the same samples as a node (or a
        # one-machine fold) that ran from the start. Its first rows are partial: row
        # k is whole once every channel's dedispersed time (sample time less the
        # channel's delay) reaches k S. (``grid``: a multiple of the step at which the
        # engine can begin inside a capture's packet, at a whole byte.)
        grid = self.fold.grid
        first = -(-first // grid) * grid
        lead = float(np.max(-self.fold.delay_s, initial=0.0))
        self.first_row = math.ceil((first * self.tsamp + lead) / self.tsub + 1e-9)
        self.fold.set_start(first)
        self.next_sample = first
        return self.first_row

    def place(self, first: int, n: int) -> tuple[int, int] | None:
        """Where ``n`` samples from ``first`` on the observation's axis go: (cut, gap),
        fold them from their ``cut``-th on, after ``gap`` samples never received; None
        when none of them is folded (before the start, before the FFT grid of a late
        start, or a rewound index: a resync). Counts what it drops and what is lost."""
        if first + n <= 0:
            self.samples_before_start += n
            return None
        cut = max(0, -first)
        self.samples_before_start += cut
        if self.next_sample is None:
            self.start_at(first + cut)
        assert self.next_sample is not None
        if first + cut < self.next_sample:
            more = min(self.next_sample - first - cut, n - cut)
            self.samples_skipped += more
            cut += more
            if cut == n:
                return None
        gap = first + cut - self.next_sample
        self.samples_missing += gap
        self.next_sample = first + n
        return cut, gap

    def feed(self, samples: np.ndarray, valid: np.ndarray, first: int) -> None:
        """Host samples (a file's, a CPU node's capture converted) from ``first`` on."""
        where = self.place(first, samples.shape[0])
        if where is None:
            return
        cut, gap = where
        if gap:  # lost before this block: zeros, marked lost, as the timeline does
            self.fold.feed_gap(gap)
        self.fold.feed(samples[cut:], valid[cut:])

    def feed_lost(self, n: int, first: int) -> None:
        """``n`` samples from ``first`` on that never arrived (a timeline's gap)."""
        where = self.place(first, n)
        if where is not None:
            cut, gap = where
            self.fold.feed_gap(gap + n - cut)

    def feed_block(self, parts: Any, n: int, first: int, first_packet: int,
                   valid: np.ndarray | None) -> Any:  # fmt: skip
        """A live GPU node's capture block as it lies in the pool (``parts``: its
        runs, its samples from packet ``first_packet`` of the chunk on), ``n``
        samples from ``first`` on: the CUDA event after which the block may go back,
        or None when none of it is folded (the caller gives it back)."""
        from voltstream.cluster.engines import GpuRows

        gpu = self.fold
        assert isinstance(gpu, GpuRows), "a CPU node's blocks become host samples first"
        where = self.place(first, n)
        if where is None:
            return None
        cut, gap = where
        if gap:
            gpu.feed_gap(gap)
        return gpu.feed_block(parts, n - cut, first_packet, cut,
                                    None if valid is None else valid[cut:])  # fmt: skip

    def rows(self) -> list[tuple[int, np.ndarray, np.ndarray, np.ndarray]]:
        """Rows every channel has passed: the next unfolded sample's dedispersed time
        (less half a sample, against rounding at a boundary) is past their end."""
        if self.next_sample is None:
            return []
        t_next = (self.fold.folded_to - 0.5) * self.tsamp - float(self.fold.delay_s.max())
        upto = math.floor(t_next / self.tsub)
        return self._sendable(self.fold.take_rows(upto))

    def finish(self) -> list[tuple[int, np.ndarray, np.ndarray, np.ndarray]]:
        return self._sendable(self.fold.take_rows(2**62))

    def _sendable(self, rows: list) -> list:
        keep = [r for r in rows if self.first_row is not None and r[0] >= self.first_row]
        self.rows_skipped += len(rows) - len(keep)
        return keep

    def counters(self) -> dict[str, int]:
        return self.fold.counters() | {
            "samples_before_start": self.samples_before_start,
            "samples_skipped": self.samples_skipped,
            "samples_missing_before_first": self.samples_missing,
            "rows_skipped": self.rows_skipped,
        }


def probe_file(path: str) -> tuple[Observation, int]:
    """What a node's file holds (run on that node by the driver): its observation,
    start time included, and its samples."""
    from voltstream.io.baseband import open_baseband

    reader = open_baseband(path)
    return reader.obs, int(reader.nsamp)


def subband_of(job: NodeJob) -> Subband:
    """The merger's view of this node's channels."""
    obs = job.obs
    return Subband(job.node, float(obs.chan_freqs_mhz[0]), obs.chan_bw_mhz, obs.nchan)


def run_node(job: NodeJob) -> dict:
    """The node's task: fold its subband, sending rows to the merger as they finish;
    returns the node's report (capture counters, fold counters, rows sent)."""
    from distributed import Event, Variable, get_worker, secede

    secede()  # a long task: the worker's thread pool is not held by it
    handle = Variable(job.merger)
    merger = handle.get(timeout=60)
    stop = threading.Event()
    dask_stop = Event(job.stop)

    def watch_stop() -> None:
        while not stop.is_set():
            if dask_stop.wait(0.5):
                stop.set()

    threading.Thread(target=watch_stop, name="voltstream-stop-watch", daemon=True).start()
    try:
        run = NodeRun(job, merger, stop, get_worker().address)
        run.refresh = lambda: handle.get(timeout=10)
        return run.run()
    finally:
        stop.set()


class NodeRun:
    """The node's work, Dask apart (a test drives it with a merger of its own)."""

    def __init__(
        self, job: NodeJob, merger: Any, stop: threading.Event, worker: str | None = None
    ) -> None:
        self.job, self.merger, self.stop, self.worker = job, merger, stop, worker
        self.fold = NodeFold(job)
        self.rows_sent = 0
        self.last_k: int | None = None
        self.send_errors = 0
        self.started = time.time()
        self._progress: Any = None  # the capture's report so far (run_capture live_report)
        #: The rows sent last, resent to a merger that was started again (its worker
        #: killed): what it had not written yet is not lost.
        self.recent: collections.deque = collections.deque(maxlen=RESEND_ROWS)
        self.refresh: Any = None  # () -> the merger's handle now (a Dask Variable's)
        self.merger_changes = 0
        self._in_flight: collections.deque = collections.deque()  # (k, the put's future)
        self._said_hello = False

    def run(self) -> dict:
        if self.job.is_file:
            capture = self._fold_file()
        else:
            capture = self._fold_live()
        for row in self.fold.finish():
            self._send(row)
        self._drain()
        if self.last_k is not None:
            self._call("bye", self.job.node, self.last_k)
        return {
            "node": self.job.node,
            "source": self.job.source,
            "device": self.fold.fold.device,
            "first_row": self.fold.first_row,
            "rows_sent": self.rows_sent,
            "send_errors": self.send_errors,
            "merger_changes": self.merger_changes,
            "fold": self.fold.counters(),
            "capture": capture,
            "seconds": time.time() - self.started,
        }

    def _fold_live(self) -> dict:
        """The one-host live path with a row sink: the capture's chunks through
        `StageRunner` to the node's stage (cluster/node_stage.py), which places them
        and hands on the rows now whole after each."""
        from voltstream.capture.run import run_capture
        from voltstream.cluster.node_stage import NodeStage
        from voltstream.pipeline.gpu import HostRegistry, StageRunner

        fmt = self.job.fmt
        if fmt is None:
            raise ConfigError(f"{self.job.node}: a live subband needs its stream format")
        stage = NodeStage(self.fold, fmt, self.job.start_packet, self._rows_out)
        runner = StageRunner(stage, fmt.payload_len, HostRegistry() if stage.pinned else None)
        report = run_capture(
            fmt, self._capture_settings(fmt), self.job.duration_s, consumer=runner,
            idle_timeout_s=self.job.idle_timeout_s, stop_event=self.stop,
            on_start=lambda: self._call_none("ready", self.job.node),
            live_report=lambda f: setattr(self, "_progress", f),
        )  # fmt: skip
        report.pipeline = runner.as_dict()
        return report.as_dict()

    def _capture_settings(self, fmt: StreamFormat) -> CaptureSettings:
        """The GPU engine's (sized with it, pipeline/live.py `live_gpu_folder`); a CPU
        node's chunks as the job says, in a pool of ``CPU_POOL_MB`` unless it says."""
        sized = getattr(self.fold.fold, "capture", None)
        if sized is not None:
            return sized
        from voltstream.pipeline.live import GpuChunking

        settings = CaptureSettings.of(self.job.source, **self.job.capture)
        if "nchunks" in self.job.capture:
            return settings
        chunking = GpuChunking(settings.chunks.packets_per_chunk, CPU_POOL_MB)
        _, nchunks = chunking.sized(fmt, settings)
        return settings.replace(nchunks=max(nchunks, settings.chunks.nchunks))

    def _fold_file(self) -> dict:
        from voltstream.io.baseband import open_baseband, reader_blocks

        reader = open_baseband(self.job.source, None, None)
        self._call("ready", self.job.node)
        first = self.job.file_offset
        for block, valid in reader_blocks(reader, 1 << 16):
            if self.stop.is_set():
                break
            v = np.ones(block.shape[0], bool) if valid is None else valid
            self._feed(block, v, first)
            first += block.shape[0]
        return {"file": self.job.source, "samples": first - self.job.file_offset}

    def _feed(self, x: np.ndarray, valid: np.ndarray, first: int) -> None:
        self.fold.feed(x, valid, first)
        self._rows_out()

    def _rows_out(self) -> None:
        """After a feed: the first row said to the merger once known, then the rows
        now whole sent."""
        if not self._said_hello and self.fold.first_row is not None:
            self._said_hello = True
            self._call("hello", self.job.node, self.fold.first_row, self.worker)
            log.info("%s: first row %d", self.job.node, self.fold.first_row)
        for row in self.fold.rows():
            self._send(row)

    def _send(self, row: tuple) -> None:
        """Sends a row without waiting for the merger to write it: up to
        ``IN_FLIGHT`` rows are on their way, so the node folds on while the merger
        appends (a node that waited for each append folded at a third of its speed
        with short sub-integrations, bench/cluster_node_alone.py)."""
        k, sums, hits, offered = row
        self.recent.append(row)
        try:
            fut = self.merger.put(self.job.node, k, sums, hits, offered, self.counters())
        except Exception:  # no merger to call: settled (reconnect, resend) below
            fut = None
        self._in_flight.append((k, fut, self.merger_changes))
        while len(self._in_flight) > IN_FLIGHT:
            self._settle(*self._in_flight.popleft())

    def _settle(self, k: int, fut: Any, merger_seen: int) -> None:
        """Waits for a row's put; a failed one goes to a new merger with the rows
        held (`_reconnect` resends them, this one among them; it has already when the
        merger changed since the put: ``merger_seen``)."""
        try:
            if fut is None:
                raise RuntimeError("the merger could not be called")
            if hasattr(fut, "result"):
                fut.result(timeout=ASK_TIMEOUT_S)
        except Exception as e:
            if self.merger_changes == merger_seen and not self._reconnect():
                self.send_errors += 1
                log.warning("%s: the merger did not take row %d: %s", self.job.node, k, e)
                return
        self.rows_sent += 1
        self.last_k = k if self.last_k is None else max(self.last_k, k)

    def _drain(self) -> None:
        while self._in_flight:
            self._settle(*self._in_flight.popleft())

    def counters(self) -> dict:
        out: dict[str, Any] = {"fold": self.fold.counters(), "rows_sent": self.rows_sent}
        if self._progress is not None:
            try:
                out["capture"] = self._progress()
            except Exception:  # a scrape racing the capture's end: skip this once
                pass
        return out

    def _call_none(self, method: str, *args: Any) -> None:
        self._call(method, *args)

    def _call(self, method: str, *args: Any) -> bool:
        """Calls the merger; a merger that is gone is counted, never fatal: the node
        goes on folding (its rows reach a restarted merger, or the report)."""
        try:
            self._ask(method, *args)
            return True
        except Exception as e:
            err: Exception = e
        if self._reconnect():
            try:
                self._ask(method, *args)
                return True
            except Exception as e:
                err = e
        self.send_errors += 1
        log.warning("%s: the merger did not take %s: %s", self.job.node, method, err)
        return False

    def _ask(self, method: str, *args: Any) -> None:
        r = getattr(self.merger, method)(*args)
        if hasattr(r, "result"):
            r.result(timeout=ASK_TIMEOUT_S)

    def _reconnect(self) -> bool:
        """A new merger (the driver started one after the old one's worker died): say
        hello again and resend the recent rows; False when there is none yet."""
        if self.refresh is None:
            return False
        try:
            merger = self.refresh()
        except Exception:
            return False
        if merger is None or getattr(merger, "key", merger) == getattr(self.merger, "key", None):
            return False
        self.merger = merger
        self.merger_changes += 1
        log.warning("%s: a new merger; resending the last %d rows", self.job.node, len(self.recent))
        try:
            self._ask("ready", self.job.node)
            if self.fold.first_row is not None:
                self._ask("hello", self.job.node, self.fold.first_row, self.worker)
            for k, sums, hits, offered in list(self.recent):
                self._ask("put", self.job.node, k, sums, hits, offered, self.counters())
        except Exception:
            return False
        return True
