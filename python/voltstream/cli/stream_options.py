"""Stream descriptions on the command line: `inspect --write-stream FILE.toml` writes
the one its printed commands name, and `fold --listen --stream FILE.toml` turns a VDIF
description (that one, or one by hand) into the format options the live fold reads,
where the fold takes the stream it describes; else one line saying why not and which
verb takes it (record, capture)."""

from __future__ import annotations

import argparse
from typing import Any

from voltstream.errors import ConfigError
from voltstream.io.inspect_commands import cpu_only, live_fold_refusal
from voltstream.io.vdif import HEADER_LEN, LEGACY_HEADER_LEN

__all__ = ["file_band", "file_threads", "filled", "fold_stream_options", "gpu_check",
           "live_real", "write_stream"]  # fmt: skip


def fold_stream_options(args: argparse.Namespace) -> None:
    """Sets ``args``' format options from its ``--stream`` description (and clears
    ``stream``); nothing without one. ConfigError where fold --listen does not take
    the stream, naming the command that records it."""
    if getattr(args, "real", False) and (args.input or args.scheduler or args.subband):
        raise ConfigError("--real describes a live stream (fold --listen on one node); a "
                          "file's own headers say whether its samples are real")  # fmt: skip
    if not getattr(args, "stream", None):
        return
    name = args.stream if isinstance(args.stream, str) else "the stream description"
    if not args.listen:
        raise ConfigError(
            f"--stream {name} describes a live stream, for fold --listen HOST:PORT; a file's "
            "own headers describe it"
        )
    from voltstream.streams import VdifStream, load_stream

    desc = load_stream(args.stream) if isinstance(args.stream, str) else args.stream
    record = (f"voltstream record --listen {args.listen} --stream {name} --scan NAME "
              "--dirs DIR")  # fmt: skip
    if not isinstance(desc, VdifStream):
        raise ConfigError(f"{name}: fold --listen takes the samples of VDIF descriptions, "
                          f"not {desc.format}; record or capture it: {record}")  # fmt: skip
    if desc.bits_per_sample is None or desc.complex is None:
        raise ConfigError(
            f"{name} does not say what its frames hold: add bits_per_sample = N and complex = "
            "true or false (`voltstream inspect --write-stream` writes them)"
        )
    # Every thread, npol of them a block of channels (io/vdif_threads.py); picked
    # threads (--vdif-threads) by the same rule, unless --npol says.
    from voltstream.io.vdif_threads import check_npol, default_npol

    threads, npol = desc.threads, int(desc.npol)
    if isinstance(args.vdif_threads, list):  # some of them
        if not set(args.vdif_threads) <= set(threads):
            raise ConfigError(f"--vdif-threads {','.join(map(str, args.vdif_threads))}: "
                              f"{name} has threads {threads}")  # fmt: skip
        threads, npol = args.vdif_threads, default_npol(len(args.vdif_threads))
    npol = getattr(args, "npol", None) or npol
    check_npol(npol, len(threads))
    bits, cplx = desc.bits_per_sample, desc.complex
    refusal = live_fold_refusal(bits=bits, complex_data=cplx, legacy=desc.legacy)
    if refusal is not None:
        raise ConfigError(f"{name}: {refusal}; record or capture it: {record}")
    payload = desc.frame_len - (LEGACY_HEADER_LEN if desc.legacy else HEADER_LEN)
    per_sample = (2 if cplx else 1) * desc.nchan * bits
    if (payload * 8) % per_sample:
        kind = "complex" if cplx else "real"
        raise ConfigError(f"{name}: a {payload}-byte payload does not hold whole samples of "
                          f"{desc.nchan} channels x {bits}-bit {kind}")  # fmt: skip
    # Real samples come at twice the (complex) channel width they are converted to.
    chan_bw = desc.frames_per_second * (payload * 8 // per_sample) / 1e6 / (1 if cplx else 2)
    if args.chan_bw is not None and abs(abs(args.chan_bw) - chan_bw) > 1e-9 * chan_bw:
        raise ConfigError(f"--chan-bw {args.chan_bw:g}: {name} says {chan_bw:g} MHz "
                          f"(frames_per_second x samples a frame); give -{chan_bw:g} for a "
                          "lower sideband, or leave it out")  # fmt: skip
    args.format, args.nchan, args.bits, args.vdif_payload = "vdif", desc.nchan, bits, payload
    args.vdif_threads, args.npol = list(threads), npol
    args.real, args.legacy = not cplx, desc.legacy
    args.chan_bw = args.chan_bw if args.chan_bw is not None else chan_bw
    if args.station is None:
        args.station = desc.station
    args.stream = None


def gpu_check(args: argparse.Namespace) -> Any:
    """`resolve_device`'s ``need`` for a fold: a live VDIF fold of a width the GPU does
    not unpack (1, 16 bits) runs on the CPU (``auto``), or is one line (``gpu``)."""

    def need() -> None:
        bits = getattr(args, "bits", 8)
        if args.listen and getattr(args, "format", None) == "vdif" and cpu_only(bits):
            raise ConfigError(f"--device gpu: the GPU folds 2-, 4- and 8-bit VDIF live, not "
                              f"{bits}-bit; fold it on the CPU: --device cpu")  # fmt: skip

    return need


def live_real(fmt: Any, live: Any, obs: Any, device: str) -> tuple[Any, Any]:
    """The live fold's reader and observation: a real-sampled stream's channels go to
    complex baseband first (``RealToComplex`` on the CPU; the GPU folder does it on the
    GPU from the complex observation); any other stream as it is."""
    if not getattr(fmt, "real", False):
        return live, obs
    import logging

    from voltstream.dsp.real import RealToComplex, complex_observation

    logging.getLogger("voltstream").info(
        "fold: the stream holds real samples: each channel is converted to complex "
        "baseband first (on the %s)", device)  # fmt: skip
    return (RealToComplex(live) if live is not None else None), complex_observation(obs)


def filled(info: dict, placeholder: str, value: str) -> dict:
    """``info`` with ``placeholder`` replaced by ``value`` in its command lines."""
    for key in ("commands", "not_taken"):
        if key in info:
            info[key] = {k: v.replace(placeholder, value) for k, v in info[key].items()}
    info["options"] = info["options"].replace(placeholder, value)
    return info


def write_stream(info: dict, path: str) -> dict:
    """`inspect --write-stream FILE.toml`: the stream description written, and named
    in the command lines in place of the placeholder."""
    from pathlib import Path

    from voltstream.io.inspect_commands import PLACEHOLDER

    if not info.get("stream"):
        why = ("only a VDIF file or stream has one; other formats are taken by the format "
               "options printed") if info["kind"] != "vdif" else (
               "the frame rate is unknown (the frames seen lie within one second): inspect "
               "more of the stream (--packets, --duration), or give the file a sidecar with "
               "frames_per_second")  # fmt: skip
        raise ConfigError(f"--write-stream {path}: no stream description to write: {why}")
    from voltstream.service.outputs import check_outputs

    check_outputs([("--write-stream", path)])
    Path(path).write_text(info["stream"])
    info["stream_file"] = path
    return filled(info, PLACEHOLDER, path)


def file_threads(args: argparse.Namespace) -> list[int] | None:
    """The threads `fold FILE --vdif-threads` folds (None: all of a VDIF file's)."""
    if args.vdif_threads == "auto":
        raise ConfigError(
            "--vdif-threads auto learns a live stream's threads; for a file give the thread "
            "ids (voltstream inspect FILE lists them)"
        )
    return args.vdif_threads


def file_band(reader: Any, args: argparse.Namespace) -> Any:
    """`fold FILE.vdif`'s reader of the band: a file's threads as ``--npol``
    polarisations of blocks of channels side by side (io/vdif_threads.py; by default
    one or two threads are the polarisations, more are subbands of one), as fold
    --listen takes the same threads."""
    from voltstream.io.vdif_threads import ThreadBlocks, default_npol

    threads = getattr(reader, "threads", None)
    if threads is None:  # DADA: its header says its polarisations
        if getattr(args, "npol", None) is not None:
            raise ConfigError("--npol says what a VDIF stream's threads carry; a DADA "
                              "file's header says its polarisations")  # fmt: skip
        return reader
    npol = (getattr(args, "npol", None) or getattr(reader, "sidecar_npol", None)
            or default_npol(len(threads)))  # fmt: skip
    return reader if npol == len(threads) else ThreadBlocks(reader, npol)
