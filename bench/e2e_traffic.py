"""The load side of bench/e2e.py: packet formats, restamping, sender processes.

A sender holds one buffer of valid packets, made once by the project's packetizers
(`voltstream.sim.packetize`, `voltstream.sim.spead.digitiser_packets`), and
before each send rewrites only the header fields that place a packet in time,
vectorised over all rows, so it is never bound by synthesis:

- `ynao`: sequence counter, MJD / second / nanosecond (16 us per frame);
- `vdif8`, `vdif2` (and `vdif4`): seconds and frame number; two threads, one per
  polarisation, frames interleaved (frame k of thread 0, then of thread 1);
- `vdif2real`: the same frames holding real-sampled channels (2-bit, as a DBBC3 sends
  them: each 4 MHz channel real at 8 MS/s), so the same frame rate as `vdif2`; the
  fold takes them with `--real` (the capture counts frames, whatever they hold);
- `vdif2real4t`: 2-bit real VDIF of four threads of one channel each (EDV3, the common
  VLBI shape: a DBBC3's subbands), frames of threads 0..3 interleaved; the fold takes
  every thread as a subband of one polarisation (`--vdif-threads 0,1,2,3 --npol 1`);
- `spead`: MeerKAT digitiser heaps (10-bit, 4096 samples): heap counter and time
  stamp item; two digitiser ids (pols) interleaved like frames.

Indices. Each port sees one global packet sequence g = 0, 1, 2, ... (`expected(g)`
says which stream and stream index the capture must give packet g). The K senders
of a port split it by contiguous blocks of B packets: sender j sends blocks j, j+K,
j+2K, ...; one send call carries S of its blocks (`buffer_indices`). All senders
follow one absolute schedule (call i of every sender starts at t0 + i T) and pace
each call slightly above their share, so their streams interleave: the receiver
sees the sequence reordered by about K B packets, well inside its window. Unpaced
(rate 0) they send back to back and may drift apart (the e2e harness only uses
that point as the top of its bisection). Every sender makes the same number of
calls (the first to pass the deadline fixes it, under a lock), so the sequence
has no holes and the count of packets sent is exact.

`python bench/e2e_traffic.py capture-spead ...` is a stand-in receiver for SPEAD
capture alone while `voltstream capture` has no SPEAD format (same report keys).
"""

from __future__ import annotations

import resource
import time
from dataclasses import dataclass

import numpy as np

from capture_multicore import expect, pin  # the multi-core capture benchmark's helpers

VDIF_EPOCH_UNIX = 946684800  # 2000-01-01, reference epoch 0
ALIGN = 1 << 16  # first stream index: a multiple of any chunk size


def _header_view(buf: np.ndarray, fields: dict[str, tuple[int, str]]) -> np.ndarray:
    """A structured view of header fields {name: (offset, dtype)} of (rows, L) packets."""
    names = list(fields)
    dt = np.dtype(
        {
            "names": names,
            "formats": [fields[n][1] for n in names],
            "offsets": [fields[n][0] for n in names],
            "itemsize": buf.shape[1],
        }
    )
    return buf.view(dt)[:, 0]


def _tile(packets: np.ndarray, rows: int) -> np.ndarray:
    """`rows` packets repeating the given ones (the data bytes need not differ)."""
    reps = -(-rows // len(packets))
    return np.ascontiguousarray(np.tile(packets, (reps, 1))[:rows])


class Ynao:
    """YNAO frames: one stream, index = sequence counter."""

    name, streams, bits, packet_len = "ynao", 1, 8, 8216
    samples_per_packet = 64 * 32 * 2  # complex samples: 64 spectra x 32 channels x 2 pols
    sample_kind = "complex"
    FRAME_NS = 16_000  # 64 samples of 0.25 us

    def __init__(self):
        now = int(time.time())
        self.mjd0, self.ns0 = 40587 + now // 86400, (now % 86400) * 10**9

    def template(self, rows: int) -> np.ndarray:
        from voltstream.sim.packetize import packetize_ynao

        rng = np.random.default_rng(1)
        n = min(rows, 16)
        x = rng.normal(0, 20, (n * 64, 32, 2, 2)).astype(np.float32).view(np.complex64)[..., 0]
        return _tile(packetize_ynao(x, mjd=self.mjd0), rows)

    def restamp(self, buf: np.ndarray, g: np.ndarray) -> None:
        h = _header_view(
            buf, {"seq": (0, ">u8"), "mjd": (8, ">u4"), "sec": (12, ">u4"), "ns": (16, ">u4")}
        )
        ns = self.ns0 + g.astype(np.int64) * self.FRAME_NS
        day, ns = np.divmod(ns, 86400 * 10**9)
        h["seq"] = g
        h["mjd"] = self.mjd0 + day
        h["sec"], h["ns"] = np.divmod(ns, 10**9)

    def expected(self, g: int) -> tuple[int, int]:
        return 0, g

    def cli_format(self) -> list[str]:
        return ["--format", "ynao"]


class Vdif:
    """VDIF, 32 channels of 4 MHz complex, 8000-byte payloads, threads 0 and 1 (pols),
    as `voltstream capture --format vdif --bits B` expects with its defaults; with
    ``real``, each channel real-sampled at 8 MS/s instead (`fold --real`). With
    ``threads`` 4: one channel a thread (io/vdif_threads.py: four subbands of one pol),
    threads 0..3 interleaved."""

    packet_len = 8032
    PAYLOAD, CHAN_BW_HZ = 8000, 4e6

    def __init__(self, bits: int, real: bool = False, threads: int = 2):
        self.bits, self.real, self.streams = bits, real, threads
        self.NCHAN = 32 if threads == 2 else 1  # channels a thread
        self.name = f"vdif{bits}" + ("real" if real else "") + ("" if threads == 2 else "4t")
        self.sample_kind = "real" if real else "complex"
        ndim = 1 if real else 2
        self.spf = self.PAYLOAD * 8 // (ndim * self.NCHAN * bits)  # samples per frame
        # Real samples come at twice the channel width: the same frames per second.
        self.fps = int((3 - ndim) * self.CHAN_BW_HZ // self.spf)  # frames/s per thread
        self.samples_per_packet = self.spf * self.NCHAN  # one pol per frame
        first = (int(time.time()) - VDIF_EPOCH_UNIX) * self.fps
        self.f0 = -(-first // ALIGN) * ALIGN  # absolute frame count of packet 0

    def template(self, rows: int) -> np.ndarray:
        from voltstream.sim.packetize import packetize_vdif

        rng = np.random.default_rng(2)
        t = self.streams
        nframes = max(1, min(rows, 16) // t)
        scale = 20.0 if self.bits == 8 else 2.0
        x = rng.normal(0, scale, (nframes * self.spf, self.NCHAN, t, 2)).astype(np.float32)
        x = x[..., 0] if self.real else x.view(np.complex64)[..., 0]
        p = packetize_vdif(x, frames_per_second=self.fps, nbit=self.bits,
                           samples_per_frame=self.spf, complex_data=not self.real)  # fmt: skip
        return _tile(p, rows)

    def restamp(self, buf: np.ndarray, g: np.ndarray) -> None:
        # Rows cycle threads 0 .. T-1 (the template's order); blocks start on g = 0 mod T.
        h = _header_view(buf, {"w0": (0, "<u4"), "w1": (4, "<u4")})
        sec, frame = np.divmod(self.f0 + g // np.uint64(self.streams), np.uint64(self.fps))
        h["w0"] = (h["w0"] & np.uint32(0xC000_0000)) | sec.astype(np.uint32)
        h["w1"] = (h["w1"] & np.uint32(0xFF00_0000)) | frame.astype(np.uint32)

    def expected(self, g: int) -> tuple[int, int]:
        return g % self.streams, self.f0 + g // self.streams

    def locate_kwargs(self) -> dict:
        return {"threads": list(range(self.streams)), "frame_len": self.packet_len,
                "frames_per_second": self.fps}  # fmt: skip

    def cli_format(self) -> list[str]:
        fmt = ["--format", "vdif"] + ([] if self.bits == 8 else ["--bits", str(self.bits)])
        if self.streams != 2:  # one channel a thread, every thread a subband of one pol
            threads = ",".join(map(str, range(self.streams)))
            fmt += ["--nchan", str(self.NCHAN), "--vdif-threads", threads, "--npol", "1"]
        return fmt

    def fold_format(self) -> list[str]:
        """The fold's format options: the capture's, plus what the samples are."""
        return self.cli_format() + (["--real"] if self.real else [])


class Spead:
    """MeerKAT digitiser heaps, one packet each, ids 0 and 1 (pols) interleaved."""

    name, streams, bits, sample_kind = "spead", 2, 10, "real"
    SPH = 4096
    samples_per_packet = SPH
    packet_len = 72 + SPH * 10 // 8  # 8-byte header, 8 item pointers, 5120-byte heap
    CNT = (1 << 63) | (0x1 << 48)  # immediate heap counter, SPEAD-64-48
    TS = (1 << 63) | (0x1600 << 48)  # immediate time stamp

    def template(self, rows: int) -> np.ndarray:
        from voltstream.sim.spead import digitiser_packets, digitiser_samples

        n = max(1, min(rows, 16) // 2)
        x = digitiser_samples(0, n, samples_per_heap=self.SPH, bits=10, noise_rms=20.0)
        return _tile(digitiser_packets(x, 0, samples_per_heap=self.SPH, bits=10), rows)

    def restamp(self, buf: np.ndarray, g: np.ndarray) -> None:
        h = _header_view(buf, {"cnt": (8, ">u8"), "ts": (40, ">u8")})  # items 0 and 4
        heap = g >> np.uint64(1)
        h["cnt"] = np.uint64(self.CNT) | heap
        h["ts"] = np.uint64(self.TS) | (heap * np.uint64(self.SPH))

    def expected(self, g: int) -> tuple[int, int]:
        return g % 2, g // 2

    def cli_format(self) -> list[str]:
        return ["--format", "spead-dig"]


def make_traffic(name: str):
    if name == "ynao":
        return Ynao()
    if name in ("vdif2", "vdif4", "vdif8"):
        return Vdif(int(name[4:]))
    if name == "vdif2real":
        return Vdif(2, real=True)
    if name == "vdif2real4t":
        return Vdif(2, real=True, threads=4)
    if name == "spead":
        return Spead()
    raise ValueError(
        f"unknown traffic format {name!r}: ynao, vdif2, vdif4, vdif8, vdif2real, vdif2real4t, spead"
    )


def buffer_indices(i: int, j: int, k: int, block: int, blocks: int) -> np.ndarray:
    """Global packet indices of call `i` of sender `j` of `k`: its blocks
    (i*blocks + s)*k + j for s < blocks, `block` packets each, in order."""
    b = (i * blocks + np.arange(blocks, dtype=np.uint64)) * np.uint64(k) + np.uint64(j)
    return (b[:, None] * np.uint64(block) + np.arange(block, dtype=np.uint64)).reshape(-1)


# ------------------------------------------------------------------ sender processes


@dataclass
class SendPlan:
    """What one sender process does; `rate_gbps` is its own share (0 = unpaced)."""

    dest: str
    traffic: str
    sender: int  # j, among the port's senders
    senders: int  # K
    block: int  # B packets per block
    blocks: int  # S blocks per send call
    rate_gbps: float
    seconds: float
    core: int | None
    pace_margin: float = 0.03


def sender_main(plan: SendPlan, lock, progress, stop_at, conn) -> None:
    try:
        from voltstream import _core

        if plan.core is not None:
            pin(plan.core)
        traffic = make_traffic(plan.traffic)
        rows, plen = plan.block * plan.blocks, traffic.packet_len
        buf = traffic.template(rows)
        tx = _core.Sender(plan.dest)
        traffic.restamp(buf, buffer_indices(0, plan.sender, plan.senders, plan.block, plan.blocks))
        conn.send(("ready", None))
        _, t0 = conn.recv()  # go: the shared start, time.monotonic() (one clock for all)
        rate = plan.rate_gbps
        period = rows * plen * 8 / (rate * 1e9) if rate > 0 else 0.0
        pace = rate * (1 + plan.pace_margin) if rate > 0 else 0.0
        c0 = resource.getrusage(resource.RUSAGE_SELF)
        i = sent = 0
        behind = restamp_s = 0.0
        gso = None
        while True:
            with lock:
                progress[plan.sender] = i
                if 0 <= stop_at.value <= i:
                    break
                if stop_at.value < 0 and time.monotonic() >= t0 + plan.seconds:
                    stop_at.value = max(progress[:]) + 1  # every sender makes this many calls
            r0 = time.perf_counter()
            if i:
                idx = buffer_indices(i, plan.sender, plan.senders, plan.block, plan.blocks)
                traffic.restamp(buf, idx)
            restamp_s += time.perf_counter() - r0
            if rate > 0:
                late = time.monotonic() - (t0 + i * period)
                if late < 0:
                    time.sleep(-late)
                behind = max(behind, late)
            r = tx.send(buf, plen, pace)
            sent, gso, i = sent + r["packets"], r["gso"], i + 1
        end = time.monotonic()
        c1 = resource.getrusage(resource.RUSAGE_SELF)
        cpu = c1.ru_utime + c1.ru_stime - c0.ru_utime - c0.ru_stime
        conn.send(
            (
                "done",
                {
                    "sender": plan.sender,
                    "core": plan.core,
                    "calls": i,
                    "sent": sent,
                    "end": end,
                    "seconds": end - t0,
                    "behind_s": behind,
                    "gso": gso,
                    "cpu_s": cpu,
                    "restamp_s": restamp_s,
                },
            )
        )
    except BaseException as e:  # noqa: BLE001 - the parent reports it
        conn.send(("error", f"sender {plan.sender} to {plan.dest}: {type(e).__name__}: {e}"))


class SenderGroup:
    """K senders per destination, each on its own core; the total rate is shared evenly."""

    def __init__(
        self,
        ctx,
        dests,
        traffic,
        per_port,
        cores,
        total_gbps,
        seconds,
        block,
        blocks,
        pace_margin=0.03,
    ):
        self.dests, self.per_port = list(dests), per_port
        self.procs, self.conns, self.port_of = [], [], []
        self.shared = []  # kept alive until the children have them
        streams = getattr(make_traffic(traffic), "streams", 1)
        if block % max(2, streams):  # a block's rows cycle the streams from the first
            raise ValueError(f"--block-packets must be a multiple of {max(2, streams)} "
                             f"({traffic}: {streams} streams)")  # fmt: skip
        rate = total_gbps / (len(self.dests) * per_port)
        n = 0
        for port, dest in enumerate(self.dests):
            lock, stop_at = ctx.Lock(), ctx.Value("q", -1, lock=False)
            progress = ctx.Array("q", [-1] * per_port, lock=False)
            self.shared.append((lock, progress, stop_at))
            for j in range(per_port):
                core = cores[n % len(cores)] if cores else None
                plan = SendPlan(
                    dest, traffic, j, per_port, block, blocks, rate, seconds, core, pace_margin
                )
                a, b = ctx.Pipe()
                p = ctx.Process(
                    target=sender_main, args=(plan, lock, progress, stop_at, b), daemon=True
                )
                p.start()
                self.procs.append(p)
                self.conns.append(a)
                self.port_of.append(port)
                n += 1

    def wait_ready(self, limit: float = 60.0) -> None:
        for c in self.conns:
            expect(c, "ready", limit)

    def go(self, t0: float) -> None:
        for c in self.conns:
            c.send(("go", t0))

    def results(self, limit: float) -> dict:
        rs = [expect(c, "done", limit) for c in self.conns]
        sent = [0] * len(self.dests)
        for port, r in zip(self.port_of, rs, strict=True):
            sent[port] += r["sent"]
            r["port"] = port
        calls = {(p, r["calls"]) for p, r in zip(self.port_of, rs, strict=True)}
        if len(calls) != len(self.dests):  # every sender of a port must make the same calls
            raise RuntimeError(f"senders of one port made different numbers of calls: {calls}")
        return {"sent": sent, "senders": rs, "end": max(r["end"] for r in rs)}

    def close(self) -> None:
        for p in self.procs:
            p.join(timeout=5)
            if p.is_alive():
                p.kill()
                p.join(timeout=5)


# ----------------------------------------------- stand-in receiver: SPEAD capture alone


def capture_spead(argv=None) -> int:
    """Captures digitiser heaps into chunks and releases them unread; writes a report
    shaped like `voltstream capture --report` (totals, engine)."""
    import argparse
    import json

    from voltstream import _core

    ap = argparse.ArgumentParser(prog="e2e_traffic.py capture-spead")
    ap.add_argument("--bind", required=True)
    ap.add_argument("--duration", type=float, required=True)
    ap.add_argument("--idle-timeout", type=float, default=2.0)
    ap.add_argument("--report", required=True)
    ap.add_argument("--engine", default="auto")
    ap.add_argument("--chunk-heaps", type=int, default=2048)
    ap.add_argument("--cpus", default=None)
    a = ap.parse_args(argv)
    cpus = [int(c) for c in a.cpus.split(",")] if a.cpus else None
    cap = _core.Capture(
        {
            "format": {
                "name": "spead",
                "digitiser_ids": [0, 1],
                "samples_per_heap": 4096,
                "sample_bits": 10,
            },
            "network": {"bind": a.bind},
            "engine": {"kind": a.engine},
            "chunks": {"packets_per_chunk": a.chunk_heaps, "nchunks": 16, "window": 4},
            "threads": {"cpus": cpus},
        }
    )
    cap.start()
    t0 = time.monotonic()
    last, seen = None, 0
    while time.monotonic() - t0 < a.duration:
        if last is not None and time.monotonic() - last > a.idle_timeout:
            break
        chunk = cap.next_chunk(0.05)
        if chunk is not None:
            chunk.release()
            last = time.monotonic()
        elif (packets := cap.stats()["packets"]) != seen:  # packets still in open chunks
            seen, last = packets, time.monotonic()
    cap.stop()
    while (chunk := cap.next_chunk(0.0)) is not None:
        chunk.release()
    st = cap.stats()
    rep = {
        "format": "spead",
        "bind": a.bind,
        "duration_s": time.monotonic() - t0,
        "totals": st["totals"],
        "engine": st,
    }
    with open(a.report, "w") as f:
        json.dump(rep, f, indent=2)
    print(f"capture-spead: {st['totals']} kernel_drops={st['kernel_drops']}")
    return 0


if __name__ == "__main__":
    import sys

    if sys.argv[1:2] != ["capture-spead"]:
        sys.exit("usage: python bench/e2e_traffic.py capture-spead --bind H:P --duration S ...")
    sys.exit(capture_spead(sys.argv[2:]))
