"""`voltstream simulate`: synthesised streams of every sample format, to UDP or a
file (commands.py dispatches here)."""

from __future__ import annotations

import argparse
import logging
import threading
import time
from typing import Any, BinaryIO

import numpy as np

from voltstream.commands_common import (
    SUB_BYTE_RMS,
    _now_mjd,
    _progress,
    _send_sliced,
    _stop_event,
)
from voltstream.errors import ConfigError
from voltstream.ops.cli import status, watcher  # noqa: F401 - status: `voltstream status`

log = logging.getLogger("voltstream.commands")


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
