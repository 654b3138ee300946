"""The command lines that take a VDIF file or stream `voltstream inspect` saw.

Each verb gets a command that runs as printed once its placeholders (HOST:PORT, DM,
P, out.fits, NAME, DIR, S) are filled in, or one line saying why it does not take the
stream and which verb does. The format options (``--format vdif --nchan ...``)
describe complex VDIF of 2, 4 or 8 bits, one thread per polarisation (1 or 2) with
standard headers; every other shape (real samples, other widths, more threads, legacy
headers) is captured and recorded through a stream description, ``--stream
FILE.toml`` (streams/: ``format = "vdif"``), whose text is given here and which
`inspect --write-stream FILE.toml` writes. 1- and 16-bit samples fold live on the CPU
only (the GPU unpacks 2, 4 and 8 bits): their ``fold --listen`` has ``--device cpu``.

What each verb takes:

- ``fold FILE``: every shape the file reader reads, every thread: one or two threads
  are polarisations, more are blocks of channels side by side (``--npol 1``;
  io/vdif_threads.py says how to say otherwise);
- ``fold --listen``: the same, every thread, of any width (:func:`live_fold_refusal`),
  real samples too (with ``--real``); legacy headers through the stream description
  (the format options have no word for them);
- ``capture`` and ``record``: the format options where they describe every thread,
  else the stream description.
"""

from __future__ import annotations

from typing import Any

from voltstream.io.vdif import GPU_NBITS, HEADER_LEN, LEGACY_HEADER_LEN, NBITS

__all__ = ["PLACEHOLDER", "cpu_only", "live_fold_refusal", "stream_toml", "vdif_commands"]

#: The stream description's path in the printed commands until one is written.
PLACEHOLDER = "FILE.toml"

#: Widths the format options describe to capture and record (``--bits``); fold
#: --listen takes every width (1 and 16 on the CPU).
OPTION_BITS = (2, 4, 8)

_FOLD = "--dm DM --period P -o out.fits"


def live_fold_refusal(*, bits: int, complex_data: bool, legacy: bool) -> str | None:
    """Why `fold --listen` does not take a VDIF stream of this shape (None: it does).
    Every width the file reader decodes folds live (1 and 16 bits on the CPU:
    `cpu_only`), real or complex, legacy headers too, every thread (polarisations and
    blocks of channels, io/vdif_threads.py)."""
    if bits not in NBITS:
        return f"fold --listen takes VDIF of {', '.join(map(str, NBITS))} bits, not {bits}"
    return None


def cpu_only(bits: int) -> bool:
    """Whether a live fold of ``bits``-bit VDIF runs on the CPU only (not one of the
    widths the GPU unpacks)."""
    return bits not in GPU_NBITS


def stream_toml(i: dict) -> str | None:
    """The stream description (TOML) of an inspected VDIF stream ``i`` (``_vdif``'s
    dict): every thread, the frame geometry and the samples. None when the frame rate
    is unknown (the frames seen lie within one second)."""
    if not i["frames_per_second"]:
        return None
    main = max(i["stations"], key=i["stations"].get)
    lines = [
        "# A VDIF stream as `voltstream inspect` saw it (docs/formats.md, VDIF): capture",
        "# and record take it with --stream; fold --listen where its samples fold live.",
        'format = "vdif"',
        f"threads = [{', '.join(map(str, i['threads']))}]",
        f"frame_len = {i['frame_len'][0]}",
        f"frames_per_second = {i['frames_per_second']}",
        f"station = {main}",
        f"legacy = {str(i['legacy']).lower()}",
        f"nchan = {i['nchan'][0]}",
        f"bits_per_sample = {i['bits'][0]}",
        f"complex = {str(bool(i['complex'][0])).lower()}",
        "# Thread k is polarisation k % npol of channel block k // npol (npol = 1: each",
        "# thread a subband of one polarisation; 2: threads A, B of each subband).",
        f"npol = {_npol(i['threads'])}",
    ]
    return "\n".join(lines) + "\n"


def _npol(threads: list[int]) -> int:
    from voltstream.io.vdif_threads import default_npol

    return default_npol(len(threads))


def _options(i: dict, threads: list[int]) -> str:
    """The format options of a stream the options describe, folding ``threads``."""
    payload = i["frame_len"][0] - (LEGACY_HEADER_LEN if i["legacy"] else HEADER_LEN)
    nchan, bits, cplx = i["nchan"][0], i["bits"][0], bool(i["complex"][0])
    opts = f"--format vdif --nchan {nchan} --bits {bits} --vdif-payload {payload}"
    if not cplx:  # fold --listen only: capture and record take it by its description
        opts += " --real"
    if len(i["stations"]) > 1:
        opts += f" --station {max(i['stations'], key=i['stations'].get)}"
    if len(threads) == 1:
        opts += f" --npol 1 --vdif-threads {threads[0]}"
    elif threads != [0, 1] or len(i["threads"]) > 2:  # named: the others are foreign
        opts += " --vdif-threads " + ",".join(map(str, threads))
    if len(threads) > 2:  # subbands of one polarisation (io/vdif_threads.py)
        opts += f" --npol {_npol(threads)}"
    if i["frames_per_second"]:
        ndim = 2 if cplx else 1  # real: each channel sampled at twice its width
        bw = i["frames_per_second"] * (payload * 8 // (ndim * nchan * bits)) / 1e6 / (3 - ndim)
        opts += f" --chan-bw {bw:g}"
    return opts


def vdif_commands(i: dict, path: str | None = None) -> dict[str, Any]:
    """``commands`` (verb: command line), ``not_taken`` (verb: why not, and what
    does), ``stream`` (the description's TOML, or None) and ``options`` (one line of
    it all) for the VDIF stream ``i``; ``path``: the file it came from, if any."""
    one = all(len(i[k]) == 1 for k in ("frame_len", "nchan", "bits", "complex"))
    if not one:
        why = "frames of several shapes: capture each stream on a port of its own"
        return {"commands": {}, "not_taken": {"all": why}, "stream": None, "options": why}
    bits, cplx, legacy = i["bits"][0], bool(i["complex"][0]), i["legacy"]
    threads = list(i["threads"])
    folded = threads  # every thread: polarisations, or blocks of channels
    commands: dict[str, str] = {}
    not_taken: dict[str, str] = {}
    if path is not None:
        pick = f" --npol {_npol(threads)}" if len(threads) > 2 else ""
        commands["fold"] = f"voltstream fold {path}{pick} {_FOLD}"
    listen = "--listen HOST:PORT"
    refusal = live_fold_refusal(bits=bits, complex_data=cplx, legacy=legacy)
    toml = stream_toml(i)
    if refusal is None and legacy and toml is None:  # only a description says legacy
        refusal = ("fold --listen takes legacy headers through a stream description, which "
                   "needs the frame rate")  # fmt: skip
    live = refusal is None  # fold --listen takes it (real: with --real)
    # capture's and record's format options describe the samples
    plain = live and cplx and bits in OPTION_BITS and not legacy
    if plain and len(threads) <= 2:
        described = _options(i, threads)
    elif toml is not None:
        described = f"--stream {PLACEHOLDER}"
    else:
        described = ""
        why = ("capture and record take it with --stream FILE.toml, which needs its frame "
               "rate: the frames seen lie within one second; inspect more of it (--packets, "
               "--duration)")  # fmt: skip
        not_taken["capture"] = not_taken["record"] = why
    if described:
        commands["capture"] = f"voltstream capture {listen} {described} --duration S"
        commands["record"] = (f"voltstream record {listen} {described} --scan NAME --dirs DIR "
                              "--layout vdif")  # fmt: skip
    if live:
        if legacy:  # the format options have no word for legacy headers
            opts = f"--stream {PLACEHOLDER}"
        else:
            opts = _options(i, folded)
        device = " --device cpu" if cpu_only(bits) else ""
        commands["fold_listen"] = f"voltstream fold {listen} {opts}{device} {_FOLD}"
    else:
        takes = "record or capture it" if described else "capture or record it"
        not_taken["fold_listen"] = f"{refusal}: {takes} ({described or 'see above'})"
    return {"commands": commands, "not_taken": not_taken, "stream": toml,
            "options": _summary(i, commands, not_taken, plain, threads)}  # fmt: skip


def _summary(i: dict, commands: dict, not_taken: dict, plain: bool, threads: list) -> str:
    """One line: the live fold's options and the capture's (as before commands were
    listed one by one), or the command lines themselves."""
    if plain and len(threads) <= 2:
        opts = _options(i, threads)
        live = f"voltstream fold --listen HOST:PORT {opts} (capture: --listen HOST:PORT {opts})"
    else:
        live = "; ".join([*(c for k, c in commands.items() if k != "fold"),
                          *dict.fromkeys(not_taken.values())])  # fmt: skip
    if "fold" in commands:
        return f"{commands['fold']}; the same stream live: {live}"
    return live
