"""`voltstream simulate`: synthesised streams of every sample format, to UDP or a
file (commands.py dispatches here).

With ``--subbands N`` one band of N x nchan channels is synthesised (one
dispersion, one quantiser scale across it) and split into N subbands, each sent
to its own destination or written to its own file with the same packet indices
and time stamps, as a digitiser feeding N nodes does (subbands.py).

(Over 500 lines: one verb with one synthesis loop and a short branch per output
kind: YNAO and VDIF bands and subbands, digitiser heaps, real-sampled VDIF, CODIF
and described streams, to a file or the network; a new kind should move its branch
out.)
"""

from __future__ import annotations

import argparse
import logging
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, BinaryIO

import numpy as np

from voltstream.cli.common import (
    SUB_BYTE_RMS,
    _now_mjd,
    _progress,
    _send_sliced,
    _stop_event,
)
from voltstream.cli.ops import status, watcher  # noqa: F401 - status: `voltstream status`
from voltstream.errors import CaptureError, ConfigError
from voltstream.sim.pace import RateWatch

if TYPE_CHECKING:  # imported when a verb runs: `voltstream --help` stays quick
    from voltstream.formats import StreamFormat
    from voltstream.observation import Observation

log = logging.getLogger("voltstream.cli.commands")


def _destinations(dest: str, n: int) -> list[str]:
    """--dest: one HOST:PORT per subband, comma-separated, in subband order."""
    dests = [d.strip() for d in dest.split(",")]
    if len(dests) != n:
        example = ",".join(f"127.0.0.1:{7000 + i}" for i in range(min(n, 3)))
        more = ",..." if n > 3 else ""
        raise ConfigError(
            f"--dest gives {len(dests)} destination(s) for {n} subband(s): give one "
            f"HOST:PORT per subband, comma-separated in subband order (e.g. {example}{more})"
        )
    return dests


@dataclass
class _Output:
    """Where one subband goes: a sender, a DADA writer or a file of raw packets."""

    fmt: Any  # the subband's StreamFormat, or a packer of streams/packets.py
    obs: Any  # the subband's Observation (its centre, the band's start); None: no samples
    where: str  # destination or path, for messages
    index: int  # the subband's number (YNAO headers carry it)
    sender: Any = None
    sink: tuple[str, Any] | None = None
    packets: int = 0
    bytes: int = 0
    keep_going: bool = False  # several subbands: one refusing node stops nothing
    refused_blocks: int = 0  # blocks a refusing node did not get (from the first refusal)
    refused_sends: int = 0  # sends refused while the receiver rebound its port, sent again

    def put(self, q: np.ndarray, first: int, rate_gbps: float) -> None:
        """Sends or writes samples ``first ..`` of this subband (whole packets)."""
        if self.sink is not None and self.sink[0] == "dada":
            self.sink[1].write(q)
            self.bytes += q.nbytes
            return
        self.put_packets(self.fmt.packetize(q, first, self.obs, subband=self.index), rate_gbps)

    def put_packets(self, pkts: np.ndarray, rate_gbps: float) -> None:
        """Sends or writes packets made already ((n, packet_len) uint8)."""
        if self.sender is not None:
            try:
                r = _send_sliced(self.sender, pkts, self.fmt.packet_len, rate_gbps)
            except CaptureError as e:
                # A node that is down (killed, restarting) answers with ICMP "port
                # unreachable": a digitiser feeding many nodes goes on sending, and the
                # node's share of this block is counted, never silently lost.
                if not self.keep_going or "refused" not in str(e):
                    raise
                self.refused_blocks += 1
                return
            self.packets += int(r["packets"])
            self.bytes += int(r["bytes"])
            self.refused_sends = r["refused"]
        else:
            assert self.sink is not None  # --dest or --output: one of them is given
            self.sink[1].write(pkts.tobytes())
            self.packets += pkts.size // self.fmt.packet_len
            self.bytes += pkts.size

    def close(self) -> None:
        if self.sink is not None:
            self.sink[1].close()


def _open_outputs(
    args: argparse.Namespace, formats: list[StreamFormat], obss: list[Observation]
) -> list[_Output]:
    """One output per subband: --dest's senders, or --output's files (FILE itself for
    one subband, FILE.sb{i}.SUFFIX for several). Closes what it opened on an error."""
    from voltstream.subbands import subband_path

    n = len(formats)
    if args.dest:
        from voltstream import _core

        dests = _destinations(args.dest, n)
        return [_Output(f, o, d, i, sender=_core.Sender(d), keep_going=n > 1)
                for i, (f, o, d) in enumerate(zip(formats, obss, dests, strict=True))]  # fmt: skip
    if args.output.endswith(".dada") and formats[0].bits < 8:
        raise ConfigError(f"{formats[0].bits}-bit samples go to VDIF (.vdif) files, not DADA")
    paths = [args.output] if n == 1 else [subband_path(args.output, i) for i in range(n)]
    outs: list[_Output] = []
    try:
        for i, (f, o, path) in enumerate(zip(formats, obss, paths, strict=True)):
            outs.append(_Output(f, o, path, i, sink=_open_sim_output(path, f, o)))
    except BaseException:
        for out in outs:
            out.close()
        raise
    return outs


def simulate(args: argparse.Namespace) -> int:
    from voltstream.cli.options import format_from
    from voltstream.sim import signal
    from voltstream.subbands import subband_formats, whole_band_observation

    nsub = getattr(args, "subbands", 1)
    if args.format == "spead-dig":
        if nsub != 1:
            raise ConfigError(
                "--subbands splits the channels of ynao and vdif streams; spead-dig heaps "
                "carry a digitiser's unchannelised samples: leave --subbands at 1"
            )
        if args.dest:
            _destinations(args.dest, 1)
        return simulate_spead_dig(args)
    desc = _described(args)
    if desc is not None and desc.format != "codif":
        return simulate_packets(args, desc)
    # --real: the complex band's format; RealVdif (streams/packets.py) makes it real.
    fmt = format_from(args, real=False) if desc is None else _codif_samples(args, desc)
    if args.dest:
        _destinations(args.dest, nsub)  # before any work: a clear error first
    if fmt.name == "vdif" and desc is None:
        fmt.capture_kwargs()  # a frame rate VDIF cannot stamp: refused before files exist
    packer = _packer(args, fmt, desc, nsub)
    mjd, sec = _now_mjd()
    start = {"start_mjd": mjd, "start_sec": sec, "source": "SIM" + args.signal.upper()}
    formats = subband_formats(fmt, nsub) if packer is None else [packer]
    obs = whole_band_observation(fmt, nsub, **start)
    obss = [f.observation(**start) for f in formats]
    # Blocks of about 65536 x nchan samples whatever the subband count: memory stays
    # bounded (the samples do not depend on the block size).
    unit = fmt.samples_per_packet if packer is None else packer.block_unit
    per_block = max(1, 65536 // nsub // unit)
    burst = _burst(args)
    blocks = signal.synthesize_blocks(
        obs, args.duration, signal=args.signal, dm=args.dm, period_s=args.period,
        duty=args.duty, pulse_phase=args.pulse_phase, tone_mhz=args.tone, seed=args.seed,
        block_samples=unit * per_block, burst=burst,
    )  # fmt: skip
    stats: dict[str, Any] = {"seconds": 0.0, "clipped": 0}
    outs = _open_outputs(args, formats, obss)
    t0 = time.monotonic()
    stop = _stop_event(args)
    if packer is not None:
        fmt = packer  # what is sent or written, from here on
    log.info("simulate: %s %s -> %s", args.signal, fmt.name, args.dest or args.output)
    total = int(round(args.duration / fmt.tsamp_s))
    bar = _progress(args, "simulate", None if args.dest else total, "samples")
    watch = RateWatch(args.rate if args.dest else None)
    try:
        with bar as update:
            first = _simulate_blocks(args, fmt, blocks, outs, stats, stop, update, watch)
    finally:
        for out in outs:
            out.close()
    if args.output and fmt.name == "vdif":
        from voltstream.io.vdif import write_sidecar

        for out in outs:
            write_sidecar(out.where, out.obs, fmt.capture_kwargs()["frames_per_second"],
                          getattr(fmt, "thread_blocks", 1))  # fmt: skip
    stats["seconds"] = time.monotonic() - t0
    print(_summary(args, fmt, outs, first, stats))
    if burst is not None:
        snr = burst.radiometer_snr(obs.npol, abs(obs.bw_mhz) * 1e6)
        print(
            f"simulate: {len(burst.times_s)} burst(s) at DM {args.dm:g}, F/SEFD "
            f"{burst.energy_s * 1e3:g} ms: matched-filter S/N {snr:.1f} each (radiometer, "
            f"total intensity over {abs(obs.bw_mhz):g} MHz, unscattered)"
        )
    watch.finish(sum(out.bytes for out in outs))
    return 0


def _burst(args: argparse.Namespace) -> Any:
    """The bursts --signal frb asks for (sim/burst.py), or None."""
    if args.signal != "frb":
        return None
    from voltstream.sim.burst import Burst

    times = args.burst_times if args.burst_times else [args.duration / 2]
    return Burst(
        times_s=tuple(times),
        width_s=args.width,
        fluence_jy_ms=args.fluence,
        sefd_jy=args.sefd,
        shape=args.burst_shape,
        scattering_s=args.scattering,
    )


def _described(args: argparse.Namespace) -> Any:
    """The stream description --stream names (codif, layout, counter), or None."""
    if not args.stream:
        if args.format in ("codif", "layout", "counter"):
            raise ConfigError(
                f"--format {args.format} needs --stream FILE.toml with its geometry "
                "(docs/examples/codif.toml, docs/examples/wfs.toml)"
            )
        return None
    from voltstream.streams import load_stream

    desc = load_stream(args.stream)
    if args.format not in ("ynao", desc.format):  # ynao: the default, not a choice
        raise ConfigError(f"--format {args.format} but {args.stream} says {desc.format}")
    if desc.format not in ("codif", "layout", "counter"):
        raise ConfigError(
            f"{args.stream} describes a {desc.format} stream: simulate makes those with "
            "--format and its options; --stream is for codif, layout and counter streams"
        )
    if args.real or getattr(args, "subbands", 1) != 1:
        raise ConfigError("--real and --subbands are for VDIF (and YNAO) streams, not --stream")
    return desc


def _codif_samples(args: argparse.Namespace, desc: Any) -> StreamFormat:
    """The sample geometry of a CODIF stream: the format options, one pol a thread."""
    from voltstream.formats import make_format

    return make_format(
        "vdif", nchan=args.nchan, chan_bw_mhz=4.0 if args.chan_bw is None else args.chan_bw,
        freq_mhz=1420.0 if args.freq is None else args.freq,
        vdif_payload=max(8, desc.frame_len - 64), npol=len(desc.threads), bits=args.bits,
    )  # fmt: skip


def _packer(args: argparse.Namespace, fmt: Any, desc: Any, nsub: int) -> Any:
    """What packs the samples when it is not ``fmt`` itself: real VDIF, CODIF; None."""
    from voltstream.streams.packets import Codif, RealVdif

    if desc is not None:
        packer: Any = Codif(desc, fmt)
    elif args.real:
        if fmt.name != "vdif" or nsub != 1:
            raise ConfigError("--real makes VDIF of real-sampled channels: --format vdif, "
                              "one band (no --subbands)")  # fmt: skip
        packer = RealVdif(fmt)
    else:
        return None
    if args.output and args.output.endswith(".dada"):
        raise ConfigError(f"{packer.name} frames go to a file of frames (e.g. .{packer.name}), "
                          "not a DADA file")  # fmt: skip
    return packer


def _summary(args: argparse.Namespace, fmt: Any, outs: list[_Output], first: int,
             stats: dict) -> str:  # fmt: skip
    """The one line simulate prints at the end (one subband: as before subbands)."""
    where = args.dest or args.output
    nbytes = sum(out.bytes for out in outs)
    tail = (
        f"{nbytes / 1e6:.1f} MB in {stats['seconds']:.2f} s, {stats['clipped']} clipped "
        "samples" + (" (stopped by a signal)" if stats.get("stopped") else "")
    )
    shape = f"{first} samples x {fmt.nchan} ch x {fmt.npol} pol"
    if len(outs) == 1:
        return (
            f"simulate: {args.signal} {fmt.name}, {shape} -> {where}: {outs[0].packets} "
            f"packets, {tail}"
        )
    per = "per destination" if args.dest else "per file"
    counts = {out.packets for out in outs}
    each = (f"{counts.pop()} packets {per}" if len(counts) == 1
            else f"packets {per} " + ",".join(str(o.packets) for o in outs))  # fmt: skip
    if args.output:
        where = ",".join(out.where for out in outs)
    if refused := [f"{o.where} ({o.refused_blocks})" for o in outs if o.refused_blocks]:
        tail += "; blocks refused by a node that was down: " + ", ".join(refused)
    if again := [f"{o.where} ({o.refused_sends})" for o in outs if o.refused_sends]:
        # ICMP "port unreachable" while the receiver moved between sockets: the send
        # refused went again; packets sent while no socket held the port were lost.
        tail += "; sends refused for a moment and sent again: " + ", ".join(again)
    return (
        f"simulate: {args.signal} {fmt.name}, {len(outs)} subbands of {shape} "
        f"({len(outs) * fmt.nchan} ch centred on {fmt.freq_mhz:g} MHz) -> {where}: {each} "
        f"({sum(out.packets for out in outs)} in all), {tail}"
    )


def _simulate_blocks(
    args: argparse.Namespace, fmt: Any, blocks: Any, outs: list[_Output], stats: dict,
    stop: threading.Event | None, update: Any, watch: RateWatch,
) -> int:  # fmt: skip
    """Quantises, splits into subbands, packetises and sends or writes each
    synthesised block, until the blocks end or a stop is asked (SIGINT/SIGTERM: what
    was written stays whole). Returns the samples sent or written per subband."""
    from voltstream.sim import signal
    from voltstream.subbands import split_subbands

    n = len(outs)
    # --rate is the total: each destination gets its share, and the senders run side
    # by side (one thread each; send releases the GIL), so the total is reached and
    # each node sees a steady stream rather than bursts at the full rate.
    rate = args.rate / n if args.rate else args.rate
    pool = ThreadPoolExecutor(n) if n > 1 and outs[0].sender is not None else None
    first = 0
    try:
        for x in blocks:
            if stop is not None and stop.is_set():
                stats["stopped"] = True
                break
            if (prepare := getattr(fmt, "prepare", None)) is not None:
                q = prepare(x, stats)  # real VDIF, CODIF (streams/packets.py)
            elif fmt.bits < 8:
                # Sub-byte VDIF: the packetizer quantises complex values itself, at
                # about the optimal rms of the narrower code (2.2 levels at 2 bits).
                q = (x * np.float32(SUB_BYTE_RMS[fmt.bits] * np.sqrt(2.0))).astype(np.complex64)
            else:
                q, clipped = signal.quantize_int8(x)
                stats["clipped"] += int(clipped)
            m = (q.shape[0] // fmt.samples_per_packet) * fmt.samples_per_packet
            if m == 0:
                continue
            parts = split_subbands(q[:m], n) if n > 1 else [q[:m]]
            pairs = list(zip(outs, parts, strict=True))
            watch.begin()
            if pool is not None:
                for done in [pool.submit(o.put, p, first, rate) for o, p in pairs]:
                    done.result()
            else:
                for o, p in pairs:
                    o.put(p, first, rate)
            first += m
            update(first)
            watch.update(sum(o.bytes for o in outs))
    finally:
        if pool is not None:
            pool.shutdown(wait=True)
    return first


def _parse_dig_ids(text: str) -> tuple[int, int]:
    try:
        ids = tuple(int(t) for t in str(text).split(","))
    except ValueError:
        ids = ()
    if len(ids) != 2 or ids[0] == ids[1] or min(ids) < 0:
        raise ConfigError(
            f"--dig-ids {text!r}: give two different digitiser ids, pol 0 then pol 1 (e.g. 0,1)"
        )
    return ids


def _parse_drops(text: str) -> set[tuple[int, int]]:
    drops = set()
    for item in filter(None, (t.strip() for t in str(text).split(","))):
        pol, sep, heap = item.partition(":")
        if not sep or pol not in ("0", "1") or not heap.isdigit():
            raise ConfigError(f"--drop {item!r}: give POL:HEAP with POL 0 or 1, e.g. 0:10,1:40")
        drops.add((int(pol), int(heap)))
    return drops


def simulate_spead_dig(args: argparse.Namespace) -> int:
    """`voltstream simulate --format spead-dig`: digitiser heaps of both pols."""
    from voltstream.digitiser import check_bits, heap_bytes

    bits, sph, fs = args.sample_bits, args.samples_per_heap, args.sample_rate_hz
    check_bits(bits, "--sample-bits")
    heap_bytes(sph, bits, "--samples-per-heap")
    ids = _parse_dig_ids(args.dig_ids)
    drops = _parse_drops(args.drop)
    n_heaps = args.heaps or max(1, int(args.duration * fs // sph))
    tone_hz = fs / 4 if args.tone is None else args.tone * 1e6
    if not 0 <= tone_hz <= fs / 2:
        raise ConfigError(f"--tone {tone_hz / 1e6} MHz is outside the band 0 .. {fs / 2e6} MHz")
    sender = None
    sink: BinaryIO | None = None
    if args.dest:
        from voltstream import _core

        sender = _core.Sender(args.dest)
    else:
        try:
            sink = open(args.output, "wb")  # noqa: SIM115 - closed below
        except OSError as e:
            raise ConfigError(f"cannot write {args.output}: {e.strerror}") from None
    stats = {"packets": 0, "bytes": 0, "dropped": 0}
    watch = RateWatch(args.rate if sender is not None else None, "simulate spead-dig")
    block = max(1, 65536 // sph)  # heaps per pol per batch
    t0 = time.monotonic()
    stop = _stop_event(args)
    log.info("simulate: spead-dig -> %s", args.dest or args.output)
    stopped = False
    try:
        bar = _progress(args, "simulate", None if args.dest else n_heaps, "heaps")
        with bar as update:
            for first in range(0, n_heaps, block):
                if stop is not None and stop.is_set():
                    stopped = True
                    break
                update(first)
                watch.begin()
                _send_dig_heaps(args, first, min(block, n_heaps - first), ids, drops,
                                sender, sink, stats)  # fmt: skip
                watch.update(stats["bytes"])
            else:
                update(n_heaps)
    finally:
        if sink is not None:
            sink.close()
    seconds = time.monotonic() - t0
    print(
        f"simulate: spead-dig, {n_heaps} heaps x {sph} samples x 2 pols ({bits}-bit, ids "
        f"{ids[0]},{ids[1]}; tone {tone_hz / 1e6:g} MHz amplitude {args.tone_amplitude:g}, "
        f"noise {args.noise:g}) -> {args.dest or args.output}: {stats['packets']} packets, "
        f"{stats['bytes'] / 1e6:.1f} MB in {seconds:.2f} s, {stats['dropped']} dropped on "
        "purpose" + (" (stopped by a signal)" if stopped else "")
    )
    watch.finish(stats["bytes"])
    return 0


def _send_dig_heaps(
    args: argparse.Namespace, first: int, n: int, ids: tuple[int, int],
    drops: set[tuple[int, int]], sender: Any, sink: BinaryIO | None, stats: dict,
) -> None:  # fmt: skip
    """Heaps ``first`` .. ``first + n`` of both pols, less the --drop ones, sent or
    written."""
    from voltstream.sim.spead import digitiser_packets, digitiser_samples

    bits, sph, fs = args.sample_bits, args.samples_per_heap, args.sample_rate_hz
    tone_hz = fs / 4 if args.tone is None else args.tone * 1e6
    x = digitiser_samples(
        first,
        n,
        samples_per_heap=sph,
        bits=bits,
        sample_rate_hz=fs,
        tone_hz=tone_hz,
        tone_amplitude=args.tone_amplitude,
        noise_rms=args.noise,
        seed=args.seed,
    )
    pkts = digitiser_packets(x, first, samples_per_heap=sph, bits=bits, dig_ids=ids)
    if drops:
        keep = [(k % 2, first + k // 2) not in drops for k in range(pkts.shape[0])]
        stats["dropped"] += len(keep) - sum(keep)
        pkts = np.ascontiguousarray(pkts[np.array(keep, dtype=bool)])
    if pkts.shape[0] == 0:
        return
    if sender is not None:
        r = _send_sliced(sender, pkts, pkts.shape[1], args.rate)
        stats["packets"] += int(r["packets"])
        stats["bytes"] += int(r["bytes"])
    else:
        assert sink is not None  # --dest or --output: one of them is given
        sink.write(pkts.tobytes())
        stats["packets"] += pkts.shape[0]
        stats["bytes"] += pkts.size


def _open_sim_output(path: str, fmt: Any, obs: Any) -> tuple[str, Any]:
    if path.endswith(".dada"):
        from voltstream.io.dada import DadaWriter

        return ("dada", DadaWriter(path, obs))
    try:
        return ("raw", open(path, "wb"))  # noqa: SIM115 - closed by the caller
    except OSError as e:
        raise ConfigError(f"cannot write {path}: {e.strerror}") from None


def simulate_packets(args: argparse.Namespace, desc: Any) -> int:
    """`voltstream simulate --stream FILE.toml` of a layout or counter stream: --packets
    indices of every stream (a counter and noise bytes), sent or written."""
    from voltstream.streams.packets import LayoutPackets

    maker = LayoutPackets(desc)
    per_stream = args.packets
    if per_stream is None:
        if not args.dest or not args.rate or args.rate <= 0:
            raise ConfigError(
                f"a {desc.format} stream has no sample clock: give --packets N (or --dest "
                "with a --rate, and --duration)"
            )
        bytes_per_index = maker.packet_len * len(maker.stream_ids)
        per_stream = max(1, int(args.duration * args.rate * 1e9 / 8 / bytes_per_index))
    fmt = _PacketsOnly(desc.format, maker.packet_len)
    obs = None  # no samples: the output has no observation
    out = _Output(fmt, obs, args.dest or args.output, 0)
    if args.dest:
        from voltstream import _core

        out.sender = _core.Sender(args.dest)
    else:
        out.sink = _open_sim_output(args.output, fmt, obs)
    rng = np.random.default_rng(args.seed)
    stop = _stop_event(args)
    watch = RateWatch(args.rate if args.dest else None)
    block = max(1, (1 << 22) // (maker.packet_len * len(maker.stream_ids)))  # ~4 MiB a batch
    t0, done, stopped = time.monotonic(), 0, False
    try:
        while done < per_stream:
            if stop is not None and stop.is_set():
                stopped = True
                break
            pkts = maker.packets(done, min(block, per_stream - done), rng)
            watch.begin()
            out.put_packets(pkts, args.rate)
            done += min(block, per_stream - done)
            watch.update(out.bytes)
    finally:
        out.close()
    seconds = time.monotonic() - t0
    print(
        f"simulate: {desc.format} packets of {maker.packet_len} bytes, {done} per stream x "
        f"{len(maker.stream_ids)} stream(s) -> {out.where}: {out.packets} packets, "
        f"{out.bytes / 1e6:.1f} MB in {seconds:.2f} s"
        + (" (stopped by a signal)" if stopped else "")
    )
    watch.finish(out.bytes)
    return 0


@dataclass
class _PacketsOnly:
    """The format of packets made whole (no samples): their name and length."""

    name: str
    packet_len: int
