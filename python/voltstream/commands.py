"""The work behind each CLI verb. Each function takes the parsed argparse
namespace and returns an exit status; library errors propagate to cli.main."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from voltstream.errors import ConfigError, FormatError


def _now_mjd() -> tuple[int, float]:
    t = time.time()
    days, sec = divmod(t, 86400.0)
    return 40587 + int(days), float(int(sec))  # whole seconds: packet time stamps start there


def simulate(args) -> int:
    from voltstream.cli import _format_from
    from voltstream.sim import signal

    fmt = _format_from(args)
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
        sink = None
    else:
        sender = None
        sink = _open_sim_output(args.output, fmt, obs)
    first = 0
    t0 = time.monotonic()
    try:
        for x in blocks:
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
                    r = sender.send(pkts, fmt.packet_len, args.rate)
                    stats["packets"] += int(r["packets"])
                    stats["bytes"] += int(r["bytes"])
                else:
                    sink[1].write(pkts.tobytes())
                    stats["packets"] += pkts.size // fmt.packet_len
                    stats["bytes"] += pkts.size
            first += n
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
    )
    return 0


def _open_sim_output(path: str, fmt, obs):
    if path.endswith(".dada"):
        from voltstream.io.dada import DadaWriter

        return ("dada", DadaWriter(path, obs))
    try:
        return ("raw", open(path, "wb"))  # noqa: SIM115 - closed by the caller
    except OSError as e:
        raise ConfigError(f"cannot write {path}: {e.strerror}") from None


def capture(args) -> int:
    from voltstream.cli import _format_from
    from voltstream.pipeline.capture import run_capture

    fmt = _format_from(args)
    writer = None
    if args.output:
        from voltstream.io.dada import DadaWriter

        mjd, sec = _now_mjd()
        writer = DadaWriter(
            args.output, fmt.observation(start_mjd=mjd, start_sec=sec, source=args.source)
        )
    try:
        report = run_capture(
            fmt,
            args.bind,
            args.duration,
            sink=(lambda samples, valid: writer.write(samples)) if writer else None,
            packets_per_chunk=args.packets_per_chunk,
            window=args.window,
            idle_timeout_s=args.idle_timeout,
            engine=args.engine,
        )
    finally:
        if writer is not None:
            writer.close()
    for line in report.summary_lines():
        print(line)
    if args.report:
        report.write_json(args.report)
    return 0


def open_baseband(path: str, chan_bw_mhz: float | None = None, freq_mhz: float | None = None):
    """Opens a baseband file by its content: DADA (ASCII header) or VDIF frames."""
    p = Path(path)
    if not p.is_file():
        raise ConfigError(f"{path}: no such file")
    with open(p, "rb") as f:
        head = f.read(64)
    if head.startswith(b"HEADER") or b"HDR_VERSION" in head:
        from voltstream.io.dada import open_dada

        return open_dada(path)
    if p.suffix == ".vdif":
        from voltstream.io.vdif import open_vdif

        kw = {}
        if chan_bw_mhz is not None:
            kw["chan_bw_mhz"] = chan_bw_mhz
        if freq_mhz is not None:
            kw["freq_mhz"] = freq_mhz
        return open_vdif(path, **kw)
    raise FormatError(
        f"{path}: not a DADA file (no 'HEADER DADA' at the start) and not named .vdif; "
        "voltstream fold reads 8-bit TFP DADA files and VDIF files"
    )


def choose_device(device: str) -> str:
    """Resolves --device auto|gpu|cpu to 'gpu' or 'cpu', refusing an unusable GPU."""
    if device == "cpu":
        return "cpu"
    from voltstream.dsp.gpu_fold import gpu_available

    usable = gpu_available()
    if device == "gpu" and not usable:
        raise ConfigError(
            "--device gpu: no usable CUDA GPU (CuPy missing or no device); use --device cpu"
        )
    return "gpu" if usable else "cpu"


def fold(args) -> int:
    from voltstream.io.polyco import ConstantPeriod, read_polyco
    from voltstream.io.psrfits import write_psrfits

    if (args.input is None) == (args.listen is None):
        raise ConfigError("give either an INPUT file or --listen HOST:PORT, not both or neither")
    device = choose_device(args.device)
    live = None
    if args.listen:
        from voltstream.cli import _format_from
        from voltstream.pipeline.live import LiveReader

        fmt = _format_from(args)
        mjd, sec = _now_mjd()
        live = LiveReader(
            fmt,
            args.listen,
            args.duration,
            fmt.observation(start_mjd=mjd, start_sec=sec),
            idle_timeout_s=args.idle_timeout,
            engine=args.engine,
        )
        live.start()
        reader = live
    else:
        reader = open_baseband(args.input, args.chan_bw, args.freq)
    obs = reader.obs
    nsamp = getattr(reader, "nsamp", None)
    span_s = nsamp * obs.tsamp_s if nsamp else args.duration
    if args.period:
        predictor = ConstantPeriod(args.period, obs.start_mjd, obs.start_sec)
    elif args.par:
        from voltstream.io.par import predictor_from_par

        predictor = predictor_from_par(args.par, obs.start_mjd, obs.start_sec, span_s, obs.freq_mhz)
    else:
        predictor = read_polyco(args.polyco)
    tsub = args.tsub if args.tsub is not None else span_s / 10
    archive = _fold_on(device, args, reader, predictor, tsub)
    archive.par_text = getattr(predictor, "par_text", None)
    from voltstream.dsp.dedisperse import Dedisperser

    archive.coherent_nfft = Dedisperser(args.dm, obs.chan_freqs_mhz, obs.chan_bw_mhz).nfft
    archive.history.append("voltstream " + " ".join(sys.argv[1:]))
    write_psrfits(args.output, archive)
    if args.plot:
        from voltstream.monitor.plots import plot_archive

        plot_archive(archive, args.plot, title=f"{obs.source}  DM {args.dm}")
    from voltstream.dsp.fold import profile_snr

    if live is not None:
        for line in live.report.summary_lines():
            print(line)
        if args.report:
            live.report.write_json(args.report)
    snr = profile_snr(archive.profile())
    print(
        f"fold ({device}): {args.input or args.listen} -> {args.output}: {archive.nsub} "
        f"sub-integrations x {obs.nchan} channels x {archive.nbin} bins, S/N {snr:.1f}, "
        f"{archive.excluded_samples} lost samples excluded"
    )
    return 0


def _fold_on(device: str, args, reader, predictor, tsub: float):
    kw = dict(pol_mode=args.pol)
    if device == "cpu":
        from voltstream.pipeline.fold import fold_file

        return fold_file(reader, args.dm, predictor, args.nbin, tsub, **kw)
    if args.gpus > 1 or args.workers_per_gpu > 1:
        from voltstream.dsp.gpu_workers import fold_file_multi_gpu

        return fold_file_multi_gpu(
            reader,
            args.dm,
            predictor,
            args.nbin,
            tsub,
            gpus=list(range(args.gpus)),
            workers_per_gpu=args.workers_per_gpu,
            **kw,
        )
    from voltstream.dsp.gpu_fold import fold_file_gpu

    return fold_file_gpu(reader, args.dm, predictor, args.nbin, tsub, **kw)


def _free_udp_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


#: The demo's pulsar: a 33.3 ms pulsar at DM 26.833 (a DM from the paper's Table 3),
#: seen in the paper's configuration: 32 channels of 4 MHz, 2 pols, 8-bit complex.
DEMO_PULSAR = {"dm": 26.833, "period": 0.0333, "duty": 0.03, "pulse_phase": 0.25}


def demo(args) -> int:
    from voltstream.dsp.fold import profile_snr
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

    def start_sender():
        procs.append(subprocess.Popen(sim_cmd, env=dict(os.environ, PYTHONUNBUFFERED="1")))

    try:
        report = run_capture(
            fmt,
            dest,
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
    archive = fold_file(reader, psr["dm"], predictor, nbin=128, tsub_s=tsub)
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
