"""What a baseband file or a live stream is, and the options that capture or fold it.

`voltstream inspect FILE` and `voltstream inspect --listen HOST:PORT` use this. For
VDIF the frames' headers say it all (stations, threads, channels, bits, real or
complex, frame length, legacy or extended headers, time span and gaps); a YNAO frame
stream is recognised by its header; a DADA file by its ASCII header. The result is a
plain dict (``--json``) and the lines :func:`describe` prints, ending with the
command-line options that take the stream, or why the CLI cannot take it yet.

One header parser per source: a VDIF file's frames are read by the file format's
own (``io/vdif.py`` ``decode_headers``, vectorised, as ``open_vdif`` reads them),
packets from the network by the Rust wire layer (``_core.parse_header``), which
also tells VDIF from YNAO. Both give the same fields.
"""

from __future__ import annotations

import socket
import time
from pathlib import Path
from typing import Any

import numpy as np

from voltstream.errors import ConfigError, FormatError
from voltstream.io.inspect_commands import vdif_commands
from voltstream.io.vdif import LEGACY_HEADER_LEN, decode_headers

__all__ = ["describe", "inspect_file", "inspect_packets", "listen_packets"]

#: Frames read from the start of a VDIF file (enough for a second of most streams).
MAX_FRAMES = 200_000


def inspect_file(path: str | Path) -> dict:
    """Describes a DADA or VDIF file (VDIF: up to MAX_FRAMES frames from its start)."""
    p = Path(path)
    if not p.is_file():
        raise ConfigError(f"{path}: no such file")
    with open(p, "rb") as f:
        head = f.read(4096)  # a DADA header's first keys may follow comment lines
    from voltstream.io.dada import is_dada_header

    if is_dada_header(head):
        from voltstream.io.dada import open_dada
        from voltstream.io.dada_sequence import follow_sequence

        first = open_dada(p)
        r = follow_sequence(first)  # the files fold reads as this observation
        o = r.obs
        return {
            "kind": "dada",
            "path": str(p),
            "nchan": o.nchan, "npol": o.npol, "nbit": o.nbit, "ndim": o.ndim,
            "order": first.order,
            "freq_mhz": o.freq_mhz, "bw_mhz": o.bw_mhz, "tsamp_us": o.tsamp_s * 1e6,
            "nsamp": r.nsamp, "seconds": r.nsamp * o.tsamp_s,
            "source": o.source, "telescope": o.telescope,
            "files": [q.name for q in getattr(r, "paths", [p])],
            "options": f"voltstream fold {p} --dm DM --period P -o out.fits",
        }  # fmt: skip
    if head.startswith(b"SIMPLE  ="):
        raise FormatError(
            f"{path}: a FITS file, a product (voltstream fold writes PSRFITS archives), not "
            "a baseband input: inspect and fold read VDIF and DADA files; open an archive "
            "with psrchive or astropy"
        )
    if len(head) < LEGACY_HEADER_LEN:
        raise FormatError(f"{path}: not a VDIF or DADA file (too short for either header)")
    flen = int(decode_headers(np.frombuffer(head[:16], np.uint8)[None])["frame_len"][0])
    size = p.stat().st_size
    if flen <= LEGACY_HEADER_LEN or flen > size:
        raise FormatError(f"{path}: not a VDIF or DADA file (no DADA header; as VDIF its "
                          f"first header declares {flen}-byte frames in a {size}-byte "
                          "file)")  # fmt: skip
    n = min(MAX_FRAMES, size // flen)
    raw = np.fromfile(p, np.uint8, count=n * flen).reshape(n, flen)
    heads = decode_headers(raw)
    if (heads["frame_len"] != flen).any():
        k = int(np.argmax(heads["frame_len"] != flen))
        raise FormatError(f"{path}: not a VDIF or DADA file (no DADA header; as VDIF, frame "
                          f"{k} declares {heads['frame_len'][k]} bytes, frame 0 "
                          f"{flen})")  # fmt: skip
    info = _vdif(n, heads)
    info["path"] = str(p)
    info["frames_in_file"] = p.stat().st_size // flen
    if info["frames_per_second"] is None:  # within one second: the sidecar may say
        info["frames_per_second"] = _sidecar_rate(p)
    info.update(vdif_commands(info, str(p)))
    return info


def _sidecar_rate(path: Path) -> int | None:
    """A VDIF file's frames per second from its sidecar (``<file>.json``), if any."""
    from voltstream.config_files import read_json_object

    meta = read_json_object(Path(str(path) + ".json"), "VDIF sidecar (fix or delete it)")
    fps = (meta or {}).get("frames_per_second")
    return int(fps) if isinstance(fps, int) and fps > 0 else None


def listen_packets(bind: str, packets: int = 2000, timeout_s: float = 5.0) -> list[bytes]:
    """Up to ``packets`` UDP payloads received on ``bind`` within ``timeout_s``."""
    with bound_socket(bind) as s:
        return receive(s, packets, timeout_s)


def bound_socket(bind: str) -> socket.socket:
    """A UDP socket bound to ``bind`` (HOST:PORT), with room for a burst."""
    host, _, port = bind.rpartition(":")
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 24)
    try:
        s.bind((host or "0.0.0.0", int(port)))
    except OSError as e:
        s.close()
        raise ConfigError(f"cannot listen on {bind}: {e.strerror}") from None
    return s


def receive(s: socket.socket, packets: int, timeout_s: float) -> list[bytes]:
    """Up to ``packets`` datagrams from ``s`` within ``timeout_s``."""
    got: list[bytes] = []
    end = time.monotonic() + timeout_s
    while len(got) < packets and (left := end - time.monotonic()) > 0:
        s.settimeout(left)
        try:
            got.append(s.recv(65536))
        except TimeoutError:
            break
    return got


def learn_vdif_threads(bind: str, station: int | None = None, packets: int = 512,
                       timeout_s: float = 5.0) -> dict:  # fmt: skip
    """The VDIF threads a stream on ``bind`` carries, learnt from up to ``packets``
    frames before the capture opens (``--vdif-threads auto``): the thread ids of the
    station given, or of the first valid frame's, ascending. Those frames are not
    captured: the capture starts after them, and the run report says how many.

    The learning socket is returned still bound (``"socket"``): the caller keeps it
    until the capture binds the port (capture.config.start_capture), so the sender
    is not answered with ICMP port-unreachable in between."""
    from voltstream import _core

    s = bound_socket(bind)
    try:
        got = receive(s, packets, timeout_s)
        heads = []
        for p in got:
            try:
                heads.append(_core.parse_header("vdif", bytes(p)))
            except Exception:  # FormatError: not VDIF; counted below
                continue
        valid = [h for h in heads if not h["invalid"]]
        if not valid:
            raise ConfigError(
                f"--vdif-threads auto: no valid VDIF frame arrived on {bind} in {timeout_s:g} "
                f"s ({len(got)} packets); give --vdif-threads, or start the sender first"
            )
        if station is None:
            station = valid[0]["station"]
        threads = sorted({h["thread"] for h in valid if h["station"] == station})
        if not threads:
            raise ConfigError(f"--vdif-threads auto: no valid frame of station {station} on {bind}")
    except BaseException:
        s.close()
        raise
    return {"threads": threads, "station": station, "packets": len(got), "socket": s}


def inspect_packets(packets: list, hint: str | None = None) -> dict:
    """Describes a list of packets: VDIF frames or YNAO frames (tried in that order)."""
    if not packets:
        return {"kind": "nothing", "packets": 0, "options": "no packet arrived"}
    from voltstream import _core

    for kind in [hint] if hint else ["vdif", "ynao"]:
        try:
            heads = [_core.parse_header(kind, bytes(p)) for p in packets]
        except Exception:  # FormatError from the Rust parser: not this format
            continue
        if kind == "vdif":
            return _vdif(len(packets), {k: np.array([h[k] for h in heads]) for k in heads[0]})
        return _ynao(packets, heads)
    sizes = sorted({len(p) for p in packets})
    return {"kind": "unknown", "packets": len(packets), "sizes": sizes[:8],
            "options": "neither VDIF nor YNAO frames: describe the layout in a stream file "
                       "(format = \"layout\", docs/formats.md)"}  # fmt: skip


def _vdif(n_frames: int, col: dict[str, np.ndarray]) -> dict:
    """Describes ``n_frames`` VDIF frames from their header fields, one array each."""
    threads = sorted(set(col["thread"].tolist()))
    stations = {int(s): int((col["station"] == s).sum()) for s in np.unique(col["station"])}
    flen = sorted(set(col["frame_len"].tolist()))
    nchan = sorted(set(col["nchan"].tolist()))
    bits = sorted(set(col["bits_per_sample"].tolist()))
    cplx = sorted(set(col["complex"].tolist()))
    t = col["seconds"] * 10**7 + col["frame"]  # sortable (frame numbers < 2**24)
    per_thread_frames = {}
    gaps = 0
    for th in threads:
        sel = col["thread"] == th
        per_thread_frames[int(th)] = int(sel.sum())
    fps = None
    if col["seconds"].max() > col["seconds"].min():
        whole = col["seconds"] < col["seconds"].max()
        fps = int(col["frame"][whole].max()) + 1
    if fps:
        idx = col["seconds"] * fps + col["frame"]
        for th in threads:
            i = np.unique(idx[col["thread"] == th])
            gaps += int(i[-1] - i[0] + 1 - len(i))
    info = {
        "kind": "vdif", "packets": n_frames, "stations": stations, "threads": threads,
        "frames_per_thread": per_thread_frames, "frame_len": flen, "nchan": nchan,
        "bits": bits, "complex": cplx, "legacy": bool(col["legacy"].any()),
        "edv": sorted(set(col["edv"].tolist())), "invalid_frames": int(col["invalid"].sum()),
        "first_seconds": int(col["seconds"].min()), "last_seconds": int(col["seconds"].max()),
        "frames_per_second": fps, "missing_frames": gaps if fps else None,
        "span_frames": int(t.max() - t.min()) if fps is None else None,
    }  # fmt: skip
    info.update(vdif_commands(info))
    return info


def _ynao(packets: list[bytes], heads: list[dict[str, Any]]) -> dict:
    seq = np.array([h["sequence"] for h in heads])
    span = int(seq.max() - seq.min() + 1)
    return {
        "kind": "ynao", "packets": len(packets), "subbands": sorted({h["subband"] for h in heads}),
        "first_sequence": int(seq.min()), "last_sequence": int(seq.max()),
        "missing_frames": span - len(np.unique(seq)),
        "options": "voltstream fold --listen HOST:PORT --format ynao "
                   "(capture: --listen HOST:PORT --format ynao)",
    }  # fmt: skip


def describe(info: dict) -> list[str]:
    """The lines `voltstream inspect` prints: the findings, then each verb's command
    line (or why it does not take the stream), then the stream description's text
    where the commands need one and it was not written to a file."""
    shown = ("kind", "path", "options", "commands", "not_taken", "stream", "stream_file")
    lines = [f"{info.get('path', 'stream')}: {info['kind']}"]
    for k, v in info.items():
        if k not in shown and v is not None:
            lines.append(f"  {k}: {v}")
    commands, not_taken = info.get("commands") or {}, info.get("not_taken") or {}
    if not commands and not not_taken:
        lines.append(f"  take it with: {info['options']}")
        return lines
    first = "  take it with: "
    for cmd in commands.values():
        lines.append(first + cmd)
        first = " " * len(first)
    lines += [f"  {why}" for why in dict.fromkeys(not_taken.values())]  # each once
    text = info.get("stream")
    if text and any("--stream" in c for c in (*commands.values(), *not_taken.values())):
        if info.get("stream_file"):
            lines.append(f"  {info['stream_file']}: the stream description, written")
        else:
            lines.append("  FILE.toml (inspect --write-stream FILE.toml writes it):")
            lines += [f"    {line}" for line in text.splitlines() if not line.startswith("#")]
    return lines
