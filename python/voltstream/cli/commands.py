"""The work behind each CLI verb. Each function takes the parsed argparse
namespace and returns an exit status, or the run's Loss (service/exit_status.py)
for cli.main to judge against --max-loss; library errors propagate to cli.main.

A long-running verb polls the stop event (``_stop_event``): the first SIGINT or
SIGTERM ends its run as its duration would, and the report is written. simulate
and fengine live in simulate.py and fengine.py, what the verbs share in common.py;
this module names every verb for cli.main."""

from __future__ import annotations

import argparse
import json
import logging
import math
import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import voltstream.cli.stream_options as stream_options
from voltstream.capture.run import counted
from voltstream.cli.common import (  # noqa: F401 - the verbs' shared helpers
    SUB_BYTE_RMS,
    _capture_format,
    _capture_settings,
    _nothing_received,
    _now_mjd,
    _print_report,
    _progress,
    _status_line,
    _stop_event,
    capture_output,
    live_gpu_run,
    record_settings,
)
from voltstream.cli.fengine import fengine  # noqa: F401 - a verb
from voltstream.cli.filterbank import filterbank  # noqa: F401 - a verb
from voltstream.cli.latency import latency  # noqa: F401 - a verb
from voltstream.cli.ops import status, watcher  # noqa: F401 - status: `voltstream status`
from voltstream.cli.pulsar import DEMO_PULSAR, fold_predictor, pulsar_check
from voltstream.cli.search import search  # noqa: F401 - a verb
from voltstream.cli.simulate import simulate, simulate_spead_dig  # noqa: F401 - verbs
from voltstream.cli.stream_options import file_threads, filled, fold_stream_options, write_stream
from voltstream.device import resolve_device
from voltstream.errors import ConfigError
from voltstream.service.exit_status import Loss, record_loss
from voltstream.service.outputs import check_outputs

if TYPE_CHECKING:  # imported by the verbs that need them, to keep start-up short
    from voltstream.fold.reference import FoldSettings
    from voltstream.observation import FoldedArchive


log = logging.getLogger("voltstream.cli.commands")


def capture(args: argparse.Namespace) -> int | Loss:
    from voltstream.capture.run import run_capture
    from voltstream.cli.dump import capture_with_ring, check_dump_options

    check_outputs([("--output", args.output), ("--report", args.report)])
    if check_dump_options(args, trigger_needed=True):  # triggered voltage dumps: cli/dump.py
        return capture_with_ring(args)
    fmt = _capture_format(args)
    writer = capture_output(args, fmt)
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
    no_data = _nothing_received("capture", report, fmt.name, args.output, args.report)
    if no_data is not None:
        return no_data
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
    settings = record_settings(vars(args))
    # The disks as the recorder (and `run --check`) judges them, before it listens.
    if problems := rec.disk_problems(settings.dirs, settings.scan, settings.layout):
        raise ConfigError(f"--dirs: {problems[0]}")
    check_outputs([("--report", args.report)])
    report = rec.record(
        _capture_format(args),
        _capture_settings(args, args.listen),
        settings,
        args.duration,
        idle_timeout_s=args.idle_timeout,
        live_report=watcher(args),
        on_start=lambda address: log.info(
            "record: listening on %s, scan %s (%s) -> %s",
            address,
            settings.scan,
            settings.layout,
            ", ".join(settings.dirs),
        ),
        stop_event=_stop_event(args),
    )
    for line in rec.summary_lines(report):
        print(line)
    if args.report:
        rec.write_report(report, args.report)
    return record_loss(report)


def run(args: argparse.Namespace) -> Any:
    """`voltstream run FILE`: the file validated whole (run_file), then its verb here."""
    from voltstream.cli.run_file import verb_of

    verb_args = verb_of(args)
    if isinstance(verb_args, int):  # --check, --print-config: done
        return verb_args
    return globals()[verb_args.verb](verb_args)


def replay(args: argparse.Namespace) -> int:
    from voltstream.cli.replay import run

    return run(args, _stop_event(args), lambda total: _progress(args, "replay", total, "B"))


def inspect(args: argparse.Namespace) -> int:
    from voltstream.io import inspect as ins

    if (args.input is None) == (args.listen is None):
        raise ConfigError("give either a FILE or --listen HOST:PORT, not both or neither")
    if args.input:
        info = ins.inspect_file(args.input)
    else:
        info = ins.inspect_packets(ins.listen_packets(args.listen, args.packets, args.duration))
        info = filled(info, "HOST:PORT", args.listen)
    if args.write_stream:
        info = write_stream(info, args.write_stream)
    if args.json:
        print(json.dumps(info, indent=2, default=str))
    else:
        print("\n".join(ins.describe(info)))
    return 0


def fold(args: argparse.Namespace) -> int | Loss:
    from voltstream.fold.reference import FoldSettings
    from voltstream.io.psrfits import write_psrfits

    # Before any work: a fold that can only fail at its end on a missing directory.
    check_outputs([("-o", args.output), ("--report", args.report), ("--plot", args.plot)])
    fold_stream_options(args)  # --stream: the description as the format options
    if args.scheduler or args.subband:
        from voltstream.cli.cluster import fold_cluster

        return fold_cluster(args)
    if (args.input is None) == (args.listen is None):
        raise ConfigError("give either an INPUT file or --listen HOST:PORT, not both or neither")
    device = resolve_device(args.device, need=stream_options.gpu_check(args))
    live = None
    reader: Any
    predictor: Any
    # A pipeline file's [record] beside [fold] (run_file.py): the capture is the
    # recording's, and the fold takes each chunk once it is written.
    recording_asked = getattr(args, "record", None) is not None
    recording = None
    if args.listen:
        from voltstream.pipeline.live import LiveReader

        fmt = _capture_format(args)  # a band in several streams: its subbands' channels
        mjd, sec = _now_mjd()
        obs = fmt.observation(start_mjd=mjd, start_sec=sec)
        if device == "gpu" and (args.gpus > 1 or args.workers_per_gpu > 1):
            raise ConfigError("--listen folds on one GPU; --gpus/--workers-per-gpu are for "
                              "files")  # fmt: skip
        settings = _capture_settings(args, args.listen)
        if recording_asked:  # the GPU too folds the chunks once written
            from voltstream.cli.run_file import start_recording

            recording = start_recording(args, fmt, settings)
        if device != "gpu":
            live = LiveReader(
                fmt, settings, args.duration, obs, idle_timeout_s=args.idle_timeout,
                source=recording.forwarded() if recording is not None else None,
                stop_event=_stop_event(args), live_report=watcher(args),
            )  # fmt: skip
            try:
                live.start()
            except BaseException:
                if recording is not None:
                    recording.finish()
                raise
            log.info("fold: listening on %s", args.listen)
        reader, obs = stream_options.live_real(fmt, live, obs, device)
    else:
        from voltstream.io.baseband import open_baseband

        reader = open_baseband(args.input, args.chan_bw, args.freq, sequence=True,
                               threads=file_threads(args))  # fmt: skip
        reader = stream_options.file_band(reader, args)  # VDIF threads: pols, subbands
        if reader.obs.ndim == 1:  # real-sampled channels (DBBC3-style VDIF)
            from voltstream.dsp.real import RealToComplex

            reader = RealToComplex(reader)
            log.info("fold: %s holds real samples: each channel is converted to complex "
                     "baseband first (docs/formats.md, VDIF)", args.input)  # fmt: skip
        obs = reader.obs
    nsamp = getattr(reader, "nsamp", None)
    span_s = nsamp * obs.tsamp_s if nsamp else args.duration
    predictor = fold_predictor(args, obs, span_s)
    tsub = args.tsub if args.tsub is not None else span_s / 10
    _check_archive_fits(args, obs, span_s, tsub)
    settings = FoldSettings(args.dm, predictor, args.nbin, tsub, pol_mode=args.pol)
    if args.listen and device == "gpu":
        from voltstream.pipeline.live import GpuChunking, fold_live_gpu

        try:
            archive, report = fold_live_gpu(
                fmt, _capture_settings(args, args.listen), args.duration, obs, settings,
                GpuChunking(args.packets_per_chunk, args.buffer_mb), live_gpu_run(args, "fold"),
                source=recording.forwarded() if recording is not None else None,
            )  # fmt: skip
        except BaseException:
            if recording is not None:
                recording.finish()
            raise
        no_data = _nothing_received("fold", report, fmt.name, args.output, args.report)
        if no_data is not None:
            return no_data
    else:
        t_fold = time.monotonic()
        try:
            with _progress(args, "fold", None if live else nsamp, "samples") as update:
                archive = _fold_on(device, args, reader, settings, update)
        except BaseException as e:
            if recording is not None:
                recording.finish()
            if isinstance(e, ConfigError) and live is not None and live.report is not None:
                # Nothing to fold (an input shorter than one FFT): say why, if so.
                no_data = _nothing_received("fold", live.report, fmt.name, args.output,
                                            args.report)  # fmt: skip
                if no_data is not None:
                    return no_data
            if live is not None and live.report is not None and args.report:
                live.report.write_json(args.report)  # what was captured, even if unfolded
            raise
        fold_s = time.monotonic() - t_fold
        report = live.report if live is not None else None
    archive.par_text = getattr(predictor, "par_text", None)  # coherent_nfft: the fold's plan's
    archive.history.append("voltstream " + " ".join(sys.argv[1:]))
    write_psrfits(args.output, archive)
    if args.plot:
        from voltstream.monitor.plots import plot_archive

        plot_archive(archive, args.plot, title=f"{obs.source}  DM {args.dm}")
    from voltstream.fold.reference import profile_snr

    loss = None
    snr = profile_snr(archive.profile())
    if recording is not None:
        from voltstream.cli.run_file import finish_recording

        finish_recording(recording, report, archive, snr, args.report)
    elif report is not None:
        loss = _print_report(report, args.report, report.engine)
    print(
        f"fold ({device}): {args.input or args.listen} -> {args.output}: "
        f"{counted(archive.nsub, 'sub-integration')} x {counted(obs.nchan, 'channel')} x "
        f"{counted(archive.nbin, 'bin')}, S/N {snr:.1f}, "
        f"{counted(archive.excluded_samples, 'lost sample')} excluded"
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


def _check_archive_fits(args: argparse.Namespace, obs: Any, span_s: float, tsub: float) -> None:
    """A ConfigError, before any work, where the archive (sub-integrations x channels x
    pols x bins, float64 while folding) would take more than half this machine's memory:
    too many bins or too short sub-integrations end in a failed allocation otherwise."""
    if not span_s or not tsub > 0:
        return
    nsub = math.ceil(span_s / tsub)
    npol = 1 if args.pol == "AA+BB" else 4
    need = nsub * obs.nchan * npol * args.nbin * 8
    try:
        memory = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError):
        return
    if need > memory / 2:
        raise ConfigError(
            f"--nbin {args.nbin} with --tsub {tsub:g} s: the archive would hold {nsub} "
            f"sub-integrations x {obs.nchan} channels x {npol} pols x {args.nbin} bins = "
            f"{need / 2**30:.1f} GiB, more than half of this machine's "
            f"{memory / 2**30:.0f} GiB; use fewer bins or longer sub-integrations"
        )


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


def _free_udp_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def demo(args: argparse.Namespace) -> int:
    if args.nodes is not None:
        from voltstream.cli.cluster import demo_nodes

        return demo_nodes(args)
    args.duration = 0.5 if args.duration is None else args.duration
    args.rate = 2.0 if args.rate is None else args.rate
    from voltstream.capture.config import CaptureSettings
    from voltstream.capture.run import run_capture
    from voltstream.fold.reference import FoldSettings
    from voltstream.formats import make_format
    from voltstream.io.dada import DadaWriter, open_dada
    from voltstream.io.polyco import ConstantPeriod
    from voltstream.io.psrfits import write_psrfits
    from voltstream.monitor.plots import plot_archive
    from voltstream.pipeline.fold import fold_file

    out = Path(args.output)
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
    snr, peak_phase, phase_err, missed = pulsar_check(archive, psr)
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
        f"fold: {counted(archive.nsub, 'sub-integration')}, S/N {snr:.1f}, peak at phase "
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
    problems += missed
    if problems:
        print("demo: FAILED: " + "; ".join(problems), file=sys.stderr)
        return 1
    print("demo: OK: zero loss, pulsar detected")
    return 0
