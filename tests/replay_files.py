"""Writers of every recording replay reads, for the replay tests: the four scan
layouts (as docs/replay.md defines them, spread over several dirs) and pcap files
of each link type, built byte by byte here so the readers are checked against the
definitions rather than against themselves."""

from __future__ import annotations

import struct
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from voltstream.formats import make_format
from voltstream.io import vdif
from voltstream.io.dada import format_header
from voltstream.observation import Observation

#: A small VDIF stream: 4 channels, 2 threads, 256-byte payloads (32 samples per
#: frame), 1000 frames per second per thread.
FMT = make_format("vdif", nchan=4, chan_bw_mhz=0.032, vdif_payload=256, npol=2)
OBS = FMT.observation(start_mjd=60000, start_sec=100.0)
FILL_WORD = 0x11223344


def samples(nframes: int, seed: int = 1) -> np.ndarray:
    """int8 (nframes * spp, nchan, npol, 2) samples, every code used."""
    rng = np.random.default_rng(seed)
    shape = (nframes * FMT.samples_per_packet, FMT.nchan, FMT.npol, 2)
    return rng.integers(-128, 128, shape, dtype=np.int8)


def frames(x: np.ndarray, first_sample: int = 0) -> np.ndarray:
    """The VDIF frames of ``x``, threads interleaved (frame k of both, then k + 1)."""
    return FMT.packetize(x, first_sample, OBS)


def write_vbs(dirs: Sequence[Path], scan: str, packets: np.ndarray, per_file: int) -> list[Path]:
    """Chunks of ``per_file`` packets, numbered from 0, dealt round the dirs."""
    out = []
    for k, first in enumerate(range(0, len(packets), per_file)):
        path = Path(dirs[k % len(dirs)]) / scan / f"{scan}.{k:08d}"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(packets[first : first + per_file].tobytes())
        out.append(path)
    return out


def write_mark6(
    dirs: Sequence[Path], scan: str, packets: np.ndarray, per_block: int, cut_last: int = 0
) -> None:
    """Blocks of ``per_block`` packets dealt round the dirs' files (block numbers count
    across files); ``cut_last`` bytes cut off the end of the last file written."""
    plen = packets.shape[1]
    block_size = 8 + per_block * plen
    files = [Path(d) / scan for d in dirs]
    for f in files:
        f.write_bytes(struct.pack("<Iiiii", 0xFEED6666, 2, block_size, 0, plen))
    last = files[0]
    for k, first in enumerate(range(0, len(packets), per_block)):
        data = packets[first : first + per_block].tobytes()
        last = files[k % len(files)]
        with open(last, "ab") as f:
            f.write(struct.pack("<ii", k, 8 + len(data)) + data)
    if cut_last:
        size = last.stat().st_size
        with open(last, "r+b") as f:
            f.truncate(size - cut_last)


def fill_frame(like: np.ndarray) -> np.ndarray:
    """A fill frame with ``like``'s header (time, thread) and the invalid bit set."""
    out = like.copy()
    out[3] |= 0x80
    out[vdif.HEADER_LEN :] = np.frombuffer(
        np.full((len(out) - vdif.HEADER_LEN) // 4, FILL_WORD, "<u4").tobytes(), np.uint8
    )
    return out


def write_vdif_layout(
    dirs: Sequence[Path], scan: str, per_thread: list[np.ndarray], per_file: int
) -> None:
    """Per thread SS, files of ``per_file`` frames; file number n in dirs[n % len]."""
    for ss, fr in enumerate(per_thread):
        for n, first in enumerate(range(0, len(fr), per_file)):
            path = Path(dirs[n % len(dirs)]) / scan / f"{scan}_s{ss:02d}_{n:08d}.vdif"
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(fr[first : first + per_file].tobytes())


def write_dada_layout(dirs: Sequence[Path], scan: str, x: np.ndarray, per_file: int) -> None:
    """One stream per polarisation of ``x`` (int8 TFP), files of ``per_file`` samples."""
    for ss in range(x.shape[2]):
        pol = np.ascontiguousarray(x[:, :, ss : ss + 1, :])
        obs = Observation(**{**OBS.__dict__, "npol": 1})
        bps = pol[0].nbytes
        for n, first in enumerate(range(0, len(pol), per_file)):
            part = pol[first : first + per_file]
            offset = first * bps
            path = Path(dirs[n % len(dirs)]) / scan / f"{scan}_s{ss:02d}_{offset:016d}.dada"
            path.parent.mkdir(parents=True, exist_ok=True)
            head = format_header(obs, {"OBS_OFFSET": offset, "FILE_NUMBER": n,
                                       "FILE_SIZE": part.nbytes})  # fmt: skip
            path.write_bytes(head + part.tobytes())


# --- pcap -------------------------------------------------------------------------


def udp(payload: bytes, sport: int, dport: int) -> bytes:
    return struct.pack(">HHHH", sport, dport, 8 + len(payload), 0) + payload


def ipv4(datagram: bytes, proto: int = 17, frag: int = 0) -> bytes:
    src, dst = bytes([10, 0, 0, 1]), bytes([10, 0, 0, 2])
    head = struct.pack(">BBHHHBBH4s4s", 0x45, 0, 20 + len(datagram), 1, frag, 64, proto, 0,
                       src, dst)  # fmt: skip
    return head + datagram


def ipv6(datagram: bytes, with_extension: bool = False) -> bytes:
    nxt, ext = 17, b""
    if with_extension:  # a destination-options header (8 bytes of padding options)
        nxt, ext = 60, bytes([17, 0, 1, 4, 0, 0, 0, 0])
    head = struct.pack(">IHBB16s16s", 6 << 28, len(ext) + len(datagram), nxt, 64,
                       b"\0" * 15 + b"\1", b"\0" * 15 + b"\2")  # fmt: skip
    return head + ext + datagram


def ethernet(ip: bytes, vlans: Sequence[int] = (), ethertype: int | None = None) -> bytes:
    if ethertype is None:
        ethertype = 0x86DD if ip[0] >> 4 == 6 else 0x0800
    tags = b"".join(struct.pack(">HH", tpid, 7) for tpid in vlans)
    return b"\x02" * 6 + b"\x04" * 6 + tags + struct.pack(">H", ethertype) + ip


def sll(ip: bytes) -> bytes:
    proto = 0x86DD if ip[0] >> 4 == 6 else 0x0800
    return struct.pack(">HHH8sH", 0, 1, 6, b"\x02" * 8, proto) + ip


def sll2(ip: bytes) -> bytes:
    proto = 0x86DD if ip[0] >> 4 == 6 else 0x0800
    return struct.pack(">HHIHBB8s", proto, 0, 1, 1, 0, 6, b"\x02" * 8) + ip


def write_pcap(
    path: Path,
    link_type: int,
    frames: Sequence[bytes],
    *,
    big_endian: bool = False,
    nanoseconds: bool = False,
    t0: float = 1000.0,
    step: float = 1e-3,
    cut_tail: int = 0,
) -> None:
    """A classic pcap file of ``frames``, stamped t0, t0 + step, ...; ``cut_tail`` bytes
    cut off its end (a capture killed mid-write)."""
    e = ">" if big_endian else "<"
    magic = 0xA1B23C4D if nanoseconds else 0xA1B2C3D4
    unit = 10**9 if nanoseconds else 10**6
    out = [struct.pack(e + "IHHiIII", magic, 2, 4, 0, 0, 65535, link_type)]
    for k, fr in enumerate(frames):
        t = round((t0 + k * step) * unit)
        out.append(struct.pack(e + "IIII", t // unit, t % unit, len(fr), len(fr)) + fr)
    data = b"".join(out)
    path.write_bytes(data[: len(data) - cut_tail])
