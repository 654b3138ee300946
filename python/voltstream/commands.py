"""The work behind each CLI verb. Each function takes the parsed argparse
namespace and returns an exit status, or the run's Loss (service/exit_status.py)
for cli.main to judge against --max-loss; library errors propagate to cli.main.

A long-running verb polls the stop event (``_stop_event``): the first SIGINT or
SIGTERM ends its run as its duration would, and the report is written."""

from __future__ import annotations

import argparse
import json
import logging
import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO

import numpy as np

from voltstream.device import resolve_device
from voltstream.errors import ConfigError
from voltstream.ops.cli import status, watcher  # noqa: F401 - status: `voltstream status`
from voltstream.service.exit_status import Loss, capture_loss, record_loss
from voltstream.service.progress import progress_bar, wanted

if TYPE_CHECKING:  # imported by the verbs that need them, to keep start-up short
    from voltstream.fold.reference import FoldSettings
    from voltstream.observation import FoldedArchive


log = logging.getLogger("voltstream.commands")


def _stop_event(args: argparse.Namespace) -> threading.Event | None:
    """The event the verb's run loop polls to stop on SIGINT/SIGTERM (cli.main's
    Shutdown); None when the verb is called without cli.main."""
    shutdown = getattr(args, "shutdown", None)
    return shutdown.watch() if shutdown is not None else None


def _progress(args: argparse.Namespace, description: str, total: int | None, unit: str) -> Any:
    """The offline verbs' progress bar (service/progress.py): at a terminal, unless
    --no-progress."""
    return progress_bar(description, total, unit, wanted(getattr(args, "no_progress", True)))


def _status_line(args: argparse.Namespace) -> bool:
    """The live verbs' once-a-second status line on stderr: plain text, so not with
    --log-format json (whose readers want one JSON object a line), nor --no-status."""
    return not args.no_status and getattr(args, "log_format", "text") == "text"


#: Longest a paced send call of `simulate --dest` may take: the stop request is seen
#: between calls, so this bounds how long a SIGTERM waits on the sender.
SEND_SLICE_S = 0.1


def _send_sliced(sender: Any, pkts: np.ndarray, packet_len: int, rate_gbps: float) -> dict:
    """``sender.send`` in slices of at most SEND_SLICE_S at ``rate_gbps`` (a block of
    65536 samples at 0.01 Gb/s would otherwise hold the process for seconds); the
    summed counters."""
    pkts = pkts.reshape(-1, packet_len)
    per_slice = pkts.shape[0]
    if rate_gbps > 0:
        per_slice = max(1, int(rate_gbps * 1e9 / 8 * SEND_SLICE_S // packet_len))
    sent = {"packets": 0, "bytes": 0}
    for a in range(0, pkts.shape[0], per_slice):
        r = sender.send(np.ascontiguousarray(pkts[a : a + per_slice]), packet_len, rate_gbps)
        sent["packets"] += int(r["packets"])
        sent["bytes"] += int(r["bytes"])
    return sent


def _now_mjd() -> tuple[int, float]:
    t = time.time()
    days, sec = divmod(t, 86400.0)
    return 40587 + int(days), float(int(sec))  # whole seconds: packet time stamps start there


#: Standard deviation (in codes) of re and im that simulated sub-byte VDIF gets.
SUB_BYTE_RMS = {2: 2.2, 4: 3.0}


def simulate(args: argparse.Namespace) -> int:
    from voltstream.cli_options import format_from
    from voltstream.sim import signal

    if args.format == "spead-dig":
        return simulate_spead_dig(args)
    fmt = format_from(args)
    mjd, sec = _now_mjd()
    obs = fmt.observation(start_mjd=mjd, start_sec=sec, source="SIM" + args.signal.upper())
    block = fmt.samples_per_packet * max(1, 65536 // fmt.samples_per_packet)
    blocks = signal.synthesize_blocks(
        obs,
        args.duration,
        signal=args.signal,
        dm=args.dm,
        period_s=args.period,
        duty=args.duty,
        pulse_phase=args.pulse_phase,
        tone_mhz=args.tone,
        seed=args.seed,
        block_samples=block,
    )
    stats = {"packets": 0, "bytes": 0, "seconds": 0.0, "clipped": 0}
    if args.dest:
        from voltstream import _core

        sender = _core.Sender(args.dest)
        sink: tuple[str, Any] | None = None
    else:
        sender = None
        sink = _open_sim_output(args.output, fmt, obs)
        if sink[0] == "dada" and fmt.bits < 8:
            sink[1].close()
            raise ConfigError(f"{fmt.bits}-bit samples go to VDIF (.vdif) files, not DADA")
    t0 = time.monotonic()
    stop = _stop_event(args)
    log.info("simulate: %s %s -> %s", args.signal, fmt.name, args.dest or args.output)
    total = int(round(args.duration / obs.tsamp_s))
    bar = _progress(args, "simulate", None if args.dest else total, "samples")
    try:
        with bar as update:
            _simulate_blocks(args, fmt, obs, blocks, sender, sink, stats, stop, update)
            first = stats.pop("samples_sent")
    finally:
        if sink is not None:
            sink[1].close()
    if args.output and fmt.name == "vdif":
        from voltstream.io.vdif import write_sidecar

        write_sidecar(args.output, obs, fmt.capture_kwargs()["frames_per_second"])
    stats["seconds"] = time.monotonic() - t0
    stats["samples"] = first
    where = args.dest or args.output
    print(
        f"simulate: {args.signal} {fmt.name}, {first} samples x {fmt.nchan} ch x {fmt.npol} pol "
        f"-> {where}: {stats['packets']} packets, {stats['bytes'] / 1e6:.1f} MB in "
        f"{stats['seconds']:.2f} s, {stats['clipped']} clipped samples"
        + (" (stopped by a signal)" if stats.get("stopped") else "")
    )
    return 0


def _simulate_blocks(
    args: argparse.Namespace, fmt: Any, obs: Any, blocks: Any, sender: Any, sink: Any,
    stats: dict, stop: threading.Event | None, update: Any,
) -> None:  # fmt: skip
    """Quantises, packetises and sends or writes each synthesised block, until the
    blocks end or a stop is asked (SIGINT/SIGTERM: what was written stays whole)."""
    from voltstream.sim import signal

    first = stats["samples_sent"] = 0
    for x in blocks:
        if stop is not None and stop.is_set():
            stats["stopped"] = True
            return
        if fmt.bits < 8:
            # Sub-byte VDIF: the packetizer quantises complex values itself, at
            # about the optimal rms of the narrower code (2.2 levels at 2 bits).
            q = (x * np.float32(SUB_BYTE_RMS[fmt.bits] * np.sqrt(2.0))).astype(np.complex64)
        else:
            q, clipped = signal.quantize_int8(x)
            stats["clipped"] += int(clipped)
        n = (q.shape[0] // fmt.samples_per_packet) * fmt.samples_per_packet
        if n == 0:
            continue
        q = q[:n]
        if sink is not None and sink[0] == "dada":
            sink[1].write(q)
            stats["bytes"] += q.nbytes
        else:
            pkts = fmt.packetize(q, first, obs)
            if sender is not None:
                r = _send_sliced(sender, pkts, fmt.packet_len, args.rate)
                stats["packets"] += int(r["packets"])
                stats["bytes"] += int(r["bytes"])
            else:
                assert sink is not None  # --dest or --output: one of them is given
                sink[1].write(pkts.tobytes())
                stats["packets"] += pkts.size // fmt.packet_len
                stats["bytes"] += pkts.size
        first += n
        stats["samples_sent"] = first
        update(first)


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
                _send_dig_heaps(args, first, min(block, n_heaps - first), ids, drops,
                                sender, sink, stats)  # fmt: skip
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


def _by_name(args: argparse.Namespace, *names: str) -> dict[str, Any]:
    """The options that go to a keyword of their own name, each name written once."""
    return {name: getattr(args, name) for name in names}


#: The capture options a verb may have, each a ``_core.Capture`` keyword of its name.
_CAPTURE_OPTIONS = (
    "packets_per_chunk", "window", "engine", "multicast", "interface", "threads", "cpus",
    "dpdk_port", "dpdk_eal_args",
)  # fmt: skip


def _capture_settings(args: argparse.Namespace, bind: str) -> Any:
    """The capture options a verb has, as one CaptureSettings (the core's sections);
    an option the verb lacks or the user left unset keeps the settings' default. A
    pipeline file (run_pipeline.py) gives its sections whole, as ``capture_settings``."""
    from voltstream.capture_config import CaptureSettings

    if (whole := getattr(args, "capture_settings", None)) is not None:
        return whole
    given = {name: getattr(args, name, None) for name in _CAPTURE_OPTIONS}
    ring_mb = getattr(args, "ring_mb", None)
    return CaptureSettings.of(bind, queue_bytes=ring_mb and ring_mb << 20, **given)


def _capture_format(args: argparse.Namespace) -> Any:
    """The capture's format: a stream description file, the digitiser stream's
    defaults, or the YNAO/VDIF options."""
    from voltstream.cli_options import format_from

    if args.stream:
        from voltstream.streams import load_stream  # pydantic: only where a file is read

        # A path (--stream), or a description a pipeline file holds (run_pipeline.py).
        desc = load_stream(args.stream) if isinstance(args.stream, str) else args.stream
        if args.format not in ("ynao", desc.format):  # ynao: the default, not a choice
            raise ConfigError(f"--format {args.format} but {args.stream} says {desc.format}")
        return desc
    if args.format == "spead-dig":
        from voltstream.streams import spead_dig

        return spead_dig()
    if args.format in ("codif", "spead", "counter", "layout"):
        raise ConfigError(
            f"--format {args.format} needs --stream FILE.toml with its geometry "
            "(docs/formats.md has an example per format)"
        )
    return format_from(args)


def capture(args: argparse.Namespace) -> Loss:
    from voltstream.pipeline.capture import run_capture

    fmt = _capture_format(args)
    writer = None
    if args.output:
        if not hasattr(fmt, "observation"):
            raise ConfigError(
                f"--output writes the samples of YNAO and VDIF streams as DADA; a {fmt.name} "
                "stream is captured and counted without it"
            )
        from voltstream.io.dada import DadaWriter

        mjd, sec = _now_mjd()
        writer = DadaWriter(
            args.output, fmt.observation(start_mjd=mjd, start_sec=sec, source=args.source)
        )
    try:
        report = run_capture(
            fmt,
            _capture_settings(args, args.listen),
            args.duration,
            sink=(lambda samples, valid: writer.write(samples)) if writer else None,
            idle_timeout_s=args.idle_timeout,
            on_start=lambda: log.info("capture: listening on %s", args.listen),
            stop_event=_stop_event(args),
            live_report=watcher(args),
        )
    finally:
        if writer is not None:
            writer.close()
    return _print_report(report, args.report, report.engine)


def record(args: argparse.Namespace) -> int | Loss:
    from voltstream import record as rec

    if args.repair:
        done = rec.repair(args.dirs, args.repair)
        print(
            f"record --repair {done['scan']} ({done['layout']}): {done['files']} files; "
            f"{len(done['truncated'])} cut to their last whole packet, {len(done['removed'])} "
            f"partial chunks removed, {len(done['headers'])} DADA headers rewritten; "
            "manifest rewritten"
        )
        return 0
    if not args.scan or not args.listen:
        raise ConfigError("give --scan NAME and --listen HOST:PORT (or --repair SCAN)")
    report = rec.record(
        _capture_format(args),
        _capture_settings(args, args.listen),
        args.dirs,
        args.scan,
        args.duration,
        layout=args.layout,
        file_size=args.file_size,
        source=args.source,
        idle_timeout_s=args.idle_timeout,
        queue_chunks=args.queue_chunks,
        live_report=watcher(args),
        on_start=lambda address: log.info(
            "record: listening on %s, scan %s (%s) -> %s",
            address,
            args.scan,
            args.layout,
            ", ".join(args.dirs),
        ),
        stop_event=_stop_event(args),
    )
    for line in rec.summary_lines(report):
        print(line)
    if args.report:
        rec.write_report(report, args.report)
    return record_loss(report)


def run(args: argparse.Namespace) -> int:
    from voltstream.run_pipeline import run as run_file

    return run_file(args)


def replay(args: argparse.Namespace) -> int:
    from voltstream.replay.cli import run

    return run(args, _stop_event(args), lambda total: _progress(args, "replay", total, "B"))


def _print_report(report: Any, path: str | None, stats: dict) -> Loss:
    """The end of a run, alike for every verb: the report's summary on stdout, the
    whole report as JSON where ``--report`` asks; the run's loss, counted on the
    capture's counters ``stats``, for cli.main's exit status."""
    for line in report.summary_lines():
        print(line)
    if path:
        report.write_json(path)
    return capture_loss(stats)


def inspect(args: argparse.Namespace) -> int:
    from voltstream.io import inspect as ins

    if (args.input is None) == (args.listen is None):
        raise ConfigError("give either a FILE or --listen HOST:PORT, not both or neither")
    if args.input:
        info = ins.inspect_file(args.input)
    else:
        info = ins.inspect_packets(ins.listen_packets(args.listen, args.packets, args.timeout))
        info["options"] = info["options"].replace("HOST:PORT", args.listen)
    if args.json:
        print(json.dumps(info, indent=2, default=str))
    else:
        print("\n".join(ins.describe(info)))
    return 0


def fold(args: argparse.Namespace) -> int | Loss:
    from voltstream.fold.reference import FoldSettings
    from voltstream.io.polyco import ConstantPeriod, read_polyco
    from voltstream.io.psrfits import write_psrfits

    if (args.input is None) == (args.listen is None):
        raise ConfigError("give either an INPUT file or --listen HOST:PORT, not both or neither")
    device = resolve_device(args.device)
    live = None
    reader: Any
    predictor: Any
    # A pipeline file's [record] beside [fold] (run_pipeline.py): the capture is the
    # recording's, and the fold takes each chunk once it is written.
    recording_asked = getattr(args, "record", None) is not None
    recording = None
    if args.listen:
        from voltstream.cli_options import format_from
        from voltstream.pipeline.live import LiveReader

        fmt = format_from(args)
        mjd, sec = _now_mjd()
        obs = fmt.observation(start_mjd=mjd, start_sec=sec)
        if recording_asked and device == "gpu":
            raise ConfigError('a fold after a recording runs on the CPU for now: device = "cpu"')
        if device == "gpu":
            if args.gpus > 1 or args.workers_per_gpu > 1:
                raise ConfigError("--listen folds on one GPU; --gpus/--workers-per-gpu are "
                                  "for files")  # fmt: skip
        else:
            settings = _capture_settings(args, args.listen)
            if recording_asked:
                from voltstream.run_pipeline import start_recording

                recording = start_recording(args, fmt, settings)
            live = LiveReader(
                fmt,
                settings,
                args.duration,
                obs,
                idle_timeout_s=args.idle_timeout,
                source=recording.forwarded() if recording is not None else None,
                stop_event=_stop_event(args),
                live_report=watcher(args),
            )
            try:
                live.start()
            except BaseException:
                if recording is not None:
                    recording.finish()
                raise
            log.info("fold: listening on %s", args.listen)
        reader = live
    else:
        from voltstream.io.baseband import open_baseband

        reader = open_baseband(args.input, args.chan_bw, args.freq)
        if reader.obs.ndim == 1:  # real-sampled channels (DBBC3-style VDIF)
            from voltstream.dsp.real import RealToComplex

            reader = RealToComplex(reader)
            log.info("fold: %s holds real samples: each channel is converted to complex "
                     "baseband first (docs/formats.md, VDIF)", args.input)  # fmt: skip
        obs = reader.obs
    nsamp = getattr(reader, "nsamp", None)
    span_s = nsamp * obs.tsamp_s if nsamp else args.duration
    if args.period:
        predictor = ConstantPeriod(args.period, obs.start_mjd, obs.start_sec)
    elif args.par:
        from voltstream.io.par import predictor_from_par, quiet_pint_logging

        quiet_pint_logging()  # PINT logs every TOA step at DEBUG to stderr by default
        predictor = predictor_from_par(args.par, obs.start_mjd, obs.start_sec, span_s, obs.freq_mhz)
    else:
        predictor = read_polyco(args.polyco)
    tsub = args.tsub if args.tsub is not None else span_s / 10
    settings = FoldSettings(args.dm, predictor, args.nbin, tsub, pol_mode=args.pol)
    if args.listen and device == "gpu":
        from voltstream.pipeline.live import fold_live_gpu

        archive, report = fold_live_gpu(
            fmt, _capture_settings(args, args.listen), args.duration, obs, settings,
            idle_timeout_s=args.idle_timeout, packets_per_chunk=args.packets_per_chunk,
            pool_mb=args.buffer_mb, status=_status_line(args),
            on_start=lambda: log.info("fold: listening on %s", args.listen),
            stop_event=_stop_event(args), live_report=watcher(args),
        )  # fmt: skip
    else:
        t_fold = time.monotonic()
        try:
            with _progress(args, "fold", None if live else nsamp, "samples") as update:
                archive = _fold_on(device, args, reader, settings, update)
        except BaseException:
            if recording is not None:
                recording.finish()
            if live is not None and live.report is not None and args.report:
                live.report.write_json(args.report)  # what was captured, even if unfolded
            raise
        fold_s = time.monotonic() - t_fold
        report = live.report if live is not None else None
    archive.par_text = getattr(predictor, "par_text", None)
    from voltstream.dsp.dedisperse import Dedisperser

    archive.coherent_nfft = Dedisperser(args.dm, obs.chan_freqs_mhz, obs.chan_bw_mhz).nfft
    archive.history.append("voltstream " + " ".join(sys.argv[1:]))
    write_psrfits(args.output, archive)
    if args.plot:
        from voltstream.monitor.plots import plot_archive

        plot_archive(archive, args.plot, title=f"{obs.source}  DM {args.dm}")
    from voltstream.fold.reference import profile_snr

    loss = None
    snr = profile_snr(archive.profile())
    if recording is not None:
        from voltstream.run_pipeline import finish_recording

        finish_recording(recording, report, archive, snr, args.report)
    elif report is not None:
        loss = _print_report(report, args.report, report.engine)
    print(
        f"fold ({device}): {args.input or args.listen} -> {args.output}: {archive.nsub} "
        f"sub-integrations x {obs.nchan} channels x {archive.nbin} bins, S/N {snr:.1f}, "
        f"{archive.excluded_samples} lost samples excluded"
    )
    if not args.listen and nsamp:
        rate = nsamp * obs.nchan * obs.npol / fold_s / 1e9
        line = f"fold ({device}): {nsamp} samples folded in {fold_s:.2f} s ({rate:.2f} G samples/s"
        st = archive.stage_seconds
        if st.get("blocks_s"):  # the steady rate, start-up (CUDA, buffers, plans) apart
            steady = nsamp * obs.nchan * obs.npol / st["blocks_s"] / 1e9
            line += f"; {steady:.2f} once started, after {fold_s - st['blocks_s']:.2f} s start-up"
        print(line + ")")
    return loss if loss is not None else 0


def _fold_on(
    device: str,
    args: argparse.Namespace,
    reader: Any,
    settings: FoldSettings,
    update: Any = None,
) -> FoldedArchive:
    """Folds on ``device``; ``update(samples read)`` after each block (the progress bar)."""

    def progress(read: int, folded: int) -> None:
        if update is not None:
            update(read)

    if device == "cpu":
        from voltstream.pipeline.fold import fold_file

        return fold_file(reader, settings, progress)
    if args.gpus > 1 or args.workers_per_gpu > 1:
        from voltstream.pipeline.multi_gpu_fold import fold_file_multi_gpu

        return fold_file_multi_gpu(
            reader, settings, gpus=list(range(args.gpus)), workers_per_gpu=args.workers_per_gpu
        )
    from voltstream.pipeline.gpu_file_fold import fold_file_gpu

    return fold_file_gpu(reader, settings, progress)


def fengine(args: argparse.Namespace) -> Loss:
    """`voltstream fengine`: capture, channelise, send; prints every counter at the end."""
    from voltstream.digitiser import check_bits
    from voltstream.dsp.pfb import check_pfb_shape
    from voltstream.fengine.engines import make_engine, resolve_device
    from voltstream.fengine.heaps import HeapLayout
    from voltstream.fengine.output import HeapOutput, parse_destinations
    from voltstream.fengine.pipeline import apply_settings, run_fengine

    check_bits(args.sample_bits, "--sample-bits")
    if args.bits not in (4, 8):
        raise ConfigError(f"--bits {args.bits}: the output is 8-bit or 4-bit, use 8 or 4")
    nchan, taps = check_pfb_shape(args.channels, args.taps)
    dig_ids = _parse_dig_ids(args.dig_ids)
    dests = parse_destinations(args.dest)
    substreams = args.substreams if args.substreams is not None else max(1, len(dests))
    if substreams < 1:
        raise ConfigError(f"--substreams {substreams}: give at least 1")
    if not dests and not args.output_file:
        raise ConfigError(
            "nowhere to send: give --dest HOST:PORT (one per substream) and/or --output-file"
        )
    layout = HeapLayout(nchan, args.spectra_per_heap, substreams, args.bits)
    if args.rate is None:
        # Output bytes per digitiser sample time: 2 pols x (2 or 1) bytes per complex
        # value x nchan values per 2*nchan samples; plus packet headers; 10% margin.
        per_sample = 2 * (2 if args.bits == 8 else 1) / 2
        per_packet = max(1, min(args.packet_payload, layout.payload_bytes))
        overhead = (per_packet + 72) / per_packet
        rate = 1.1 * args.sample_rate_hz * per_sample * 8 * overhead / 1e9
    else:
        rate = args.rate
    settings = dict(
        nchan=nchan,
        taps=taps,
        n_substreams=substreams,
        **_by_name(args, "spectra_per_heap", "bits", "sample_rate_hz", "max_delay_samples",
                   "feng_id", "dither_seed"),
    )  # fmt: skip
    if not 0 <= args.feng_id < args.n_fengs:
        raise ConfigError(f"--feng-id {args.feng_id} must be in 0 .. --n-fengs - 1")
    device = resolve_device(args.device)
    control = None
    gains = delays = None
    if args.katcp_port is not None or args.settings:
        control_mod = _fengine_control(args)
        if args.settings:
            gains, delays = control_mod.load_settings(args.settings, nchan=nchan)
        if args.katcp_port is not None:
            control = control_mod.FEngineControl(
                {"nchan": nchan, "sample_rate_hz": args.sample_rate_hz, "n_pols": 2},
                host=args.katcp_host,
                port=args.katcp_port,
            )

    def factory() -> Any:
        return make_engine(device, sample_bits=args.sample_bits, **settings)

    engine = factory()
    if control is not None:
        # Through the control's queue, so ?gain answers what the engine uses; it
        # reaches the engine before the first block.
        for pol, g in (gains or {}).items():
            control.queue_gains(pol, g)
        control.queue_delay_models(delays or {})
    else:
        apply_settings(engine, gains, delays)
    output = HeapOutput(
        layout,
        dests,
        rate_gbps=rate,
        **_by_name(args, "packet_payload", "n_fengs", "output_file", "descriptor_interval"),
    )
    where = ", ".join(dests) if dests else "no UDP destination"
    print(
        f"fengine ({device}): {args.listen} (ids {dig_ids[0]},{dig_ids[1]}, "
        f"{args.sample_bits}-bit) -> {nchan} channels x {args.spectra_per_heap} spectra, "
        f"{substreams} substream(s), {args.bits}-bit -> {where}"
        + (f" + {args.output_file}" if args.output_file else "")
        + (f" at {rate:.2f} Gb/s" if rate else " unpaced"),
        flush=True,
    )
    if control is not None:
        control.start()
        host, port = control.address
        print(f"fengine: katcp control on {host}:{port}", flush=True)
    try:
        report = run_fengine(
            _capture_settings(args, args.listen),
            engine,
            output,
            dig_ids=dig_ids,
            sample_bits=args.sample_bits,
            duration_s=args.duration,
            idle_timeout_s=args.idle_timeout,
            control=control,
            engine_factory=factory,
            status=_status_line(args),
            live_report=watcher(args),
            **_by_name(args, "samples_per_heap", "chunk_heaps"),
            on_start=lambda address: print(f"fengine: listening on {address}", flush=True),
            stop_event=_stop_event(args),
        )
    finally:
        if control is not None:
            control.stop()
    return _print_report(report, args.report, report.capture)


def _fengine_control(args: argparse.Namespace) -> Any:
    """The katcp control module, or a one-line error naming the option that needs it."""
    try:
        from voltstream.fengine import control
    except ImportError as e:
        what = "--katcp-port" if args.katcp_port is not None else "--settings"
        raise ConfigError(
            f"{what} needs voltstream.fengine.control (katcp control, aiokatcp), which "
            f"cannot be imported: {e}"
        ) from None
    return control


def _free_udp_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


#: The demo's pulsar: a 33.3 ms pulsar at DM 26.833 (a DM from the paper's Table 3),
#: seen in the paper's configuration: 32 channels of 4 MHz, 2 pols, 8-bit complex.
DEMO_PULSAR = {"dm": 26.833, "period": 0.0333, "duty": 0.03, "pulse_phase": 0.25}


def demo(args: argparse.Namespace) -> int:
    from voltstream.capture_config import CaptureSettings
    from voltstream.fold.reference import FoldSettings, profile_snr
    from voltstream.formats import make_format
    from voltstream.io.dada import DadaWriter, open_dada
    from voltstream.io.polyco import ConstantPeriod
    from voltstream.io.psrfits import write_psrfits
    from voltstream.monitor.plots import plot_archive
    from voltstream.pipeline.capture import run_capture
    from voltstream.pipeline.fold import fold_file

    out = Path(args.outdir)
    out.mkdir(parents=True, exist_ok=True)
    fmt = make_format("ynao")
    port = args.port or _free_udp_port()
    dest = f"127.0.0.1:{port}"
    psr = DEMO_PULSAR
    print(
        f"demo: simulating {args.duration} s of a {psr['period'] * 1e3:.1f} ms pulsar at DM "
        f"{psr['dm']} ({fmt.nchan} x {fmt.chan_bw_mhz} MHz, {fmt.npol} pols, 8-bit) "
        f"-> UDP {dest} at {args.rate} Gb/s"
    )
    sim_cmd = [
        sys.executable,
        "-m",
        "voltstream.cli",
        "simulate",
        "--format",
        "ynao",
        "--signal",
        "pulsar",
        "--dm",
        str(psr["dm"]),
        "--period",
        str(psr["period"]),
        "--duty",
        str(psr["duty"]),
        "--pulse-phase",
        str(psr["pulse_phase"]),
        "--duration",
        str(args.duration),
        "--dest",
        dest,
        "--rate",
        str(args.rate),
    ]
    procs = []
    dada_path = out / "demo.dada"
    mjd, sec = _now_mjd()
    writer = DadaWriter(dada_path, fmt.observation(start_mjd=mjd, start_sec=sec, source="PSR_DEMO"))

    def start_sender() -> None:
        procs.append(subprocess.Popen(sim_cmd, env=dict(os.environ, PYTHONUNBUFFERED="1")))

    try:
        report = run_capture(
            fmt,
            CaptureSettings.of(dest),
            duration_s=max(60.0, 20 * args.duration),
            sink=lambda samples, valid: writer.write(samples),
            idle_timeout_s=3.0,
            on_start=start_sender,
        )
    finally:
        writer.close()
        for p in procs:
            try:
                p.wait(timeout=60)
            except subprocess.TimeoutExpired:
                p.kill()
    sim_rc = procs[0].returncode if procs else 1
    report.write_json(out / "capture-report.json")
    for line in report.summary_lines():
        print(line)

    reader = open_dada(dada_path)
    predictor = ConstantPeriod(psr["period"], reader.obs.start_mjd, reader.obs.start_sec)
    tsub = reader.nsamp * reader.obs.tsamp_s / 8
    t0 = time.monotonic()
    archive = fold_file(reader, FoldSettings(psr["dm"], predictor, nbin=128, tsub_s=tsub))
    fold_s = time.monotonic() - t0
    write_psrfits(out / "demo.fits", archive)
    plot_archive(archive, out / "demo.png", title=f"voltstream demo: DM {psr['dm']}")
    prof = archive.profile()
    snr = profile_snr(prof)
    peak_phase = (int(np.argmax(prof)) + 0.5) / archive.nbin
    phase_err = (peak_phase - psr["pulse_phase"] + 0.5) % 1.0 - 0.5
    lost = report.lost
    summary = {
        "capture": report.as_dict(),
        "fold": {
            "snr": snr,
            "peak_phase": peak_phase,
            "expected_phase": psr["pulse_phase"],
            "nsub": archive.nsub,
            "nbin": archive.nbin,
            "seconds": fold_s,
        },
        "simulator_exit": sim_rc,
    }
    (out / "demo-report.json").write_text(json.dumps(summary, indent=2) + "\n")
    print(
        f"fold: {archive.nsub} sub-integrations, S/N {snr:.1f}, peak at phase "
        f"{peak_phase:.3f} (expected {psr['pulse_phase']}), {fold_s:.1f} s"
    )
    print(f"demo: wrote {out}/demo.fits, demo.png, demo.dada, demo-report.json")
    problems = []
    if sim_rc != 0:
        problems.append(f"the simulator exited with status {sim_rc}")
    if report.samples_written == 0:
        problems.append("no data was captured")
    if lost:
        problems.append(f"{lost} packets were lost")
    if snr < 10 or abs(phase_err) > 0.02:
        problems.append(
            f"pulsar not detected at the right phase (S/N {snr:.1f}, phase error {phase_err:+.3f})"
        )
    if problems:
        print("demo: FAILED: " + "; ".join(problems), file=sys.stderr)
        return 1
    print("demo: OK: zero loss, pulsar detected")
    return 0
