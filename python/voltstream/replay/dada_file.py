"""Any DADA file we read, replayed as VDIF frames: ``voltstream replay FILE.dada``.

A DADA file from another program (PSRDADA's dada_dbdisk, DSPSR, EDD: io/dada.py reads
its header, comments and all, NBIT 8 or 16, NDIM 1 or 2, any ORDER it takes, and the
files that follow it in one observation) holds samples, not packets. Replay sends
them as VDIF, the one format here that carries every such shape: one thread per
polarisation, the file's channels in each frame, its samples' own width (8 or 16
bits, offset binary: every value exact) and kind (real for NDIM 1). The frames'
geometry is chosen to fit the samples: the largest payload of at most 8000 bytes
whose frames hold whole samples and come a whole number of times a second (and,
where one does, divide the file into whole frames). :func:`describe` gives the
stream description (`fold --listen`, `record` and `capture` take it with
``--stream``) and the command lines that take the stream; `fold --listen` as printed
folds what `fold FILE.dada` folds.

The frames are stamped from the file's start (rounded to a frame). Samples after
the last whole frame are counted (``tail_samples``), not sent.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np

from voltstream.errors import ConfigError
from voltstream.formats import StreamFormat, make_format
from voltstream.io.vdif import HEADER_LEN
from voltstream.replay.sources import BATCH_BYTES, Batch, Source

__all__ = ["DadaFile", "describe"]

#: The largest VDIF payload replay makes (bytes): a jumbo frame's worth.
MAX_PAYLOAD = 8000


def _rate(tsamp_s: float, path: Path) -> int:
    """Samples a second of one channel, which VDIF's frame rate must divide."""
    rate = 1.0 / tsamp_s
    if abs(rate - round(rate)) > 1e-6 * rate:
        raise ConfigError(f"{path}: TSAMP {tsamp_s * 1e6:g} us is not a whole number of "
                          "samples a second; VDIF frames need one to come a whole number "
                          "of times a second")  # fmt: skip
    return int(round(rate))


def frame_payload(rate: int, per_sample_bits: int, nsamp: int) -> int:
    """The payload (bytes) of the frames: at most :data:`MAX_PAYLOAD`, a multiple of
    8, whole samples, a whole number of frames a second; one that also divides
    ``nsamp`` into whole frames where there is one. 0: none."""
    fits = []
    for payload in range(MAX_PAYLOAD, 0, -8):
        bits = payload * 8
        if bits % per_sample_bits:
            continue
        spf = bits // per_sample_bits
        if rate % spf == 0:
            fits.append((nsamp % spf == 0, payload))
    return max(fits)[1] if fits else 0


class DadaFile(Source):
    """One DADA file (and the files that follow it in its observation) as VDIF frames;
    see the module doc."""

    kind = "dada"

    def __init__(self, path: Path) -> None:
        from voltstream.io.baseband import open_baseband

        self.path = path
        self.reader = open_baseband(path, sequence=True)
        o = self.obs = self.reader.obs
        self.files = [r.path for r in getattr(self.reader, "readers", [self.reader])]
        rate = _rate(o.tsamp_s, path)
        per_sample = o.nchan * o.ndim * o.nbit  # one polarisation: one thread
        payload = frame_payload(rate, per_sample, self.reader.nsamp)
        if not payload:
            raise ConfigError(f"{path}: {rate} samples a second of {o.nchan} channels x "
                              f"{o.nbit}-bit {'complex' if o.ndim == 2 else 'real'} fit no "
                              f"VDIF frame of at most {MAX_PAYLOAD} bytes coming a whole "
                              "number of times a second")  # fmt: skip
        chan_bw = rate / 1e6 / (2 if o.ndim == 1 else 1) * (1 if o.bw_mhz > 0 else -1)
        try:
            self.fmt: StreamFormat = make_format(
                "vdif", nchan=o.nchan, chan_bw_mhz=chan_bw, freq_mhz=o.freq_mhz,
                vdif_payload=payload, npol=o.npol, bits=o.nbit, real=o.ndim == 1,
            )  # fmt: skip
        except ConfigError as e:
            raise ConfigError(f"{path} as VDIF frames: {e}") from None
        spf = self.fmt.samples_per_packet
        self.frames_per_second = rate // spf
        super().__init__(self.fmt.packet_len, self.frames_per_second)

    def batches(self, realtime: bool = False) -> Iterator[Batch]:
        fmt, spf, npol = self.fmt, self.fmt.samples_per_packet, self.obs.npol
        nsamp = self.reader.nsamp
        whole = nsamp - nsamp % spf
        self.counts = {"files": len(self.files), "tail_samples": nsamp - whole}
        block = max(1, BATCH_BYTES // (fmt.packet_len * npol)) * spf
        first = 0
        for x in self.reader.read_blocks(block):  # DADA: blocks, never (block, valid)
            assert isinstance(x, np.ndarray)
            n = min(len(x), whole - first)
            if n <= 0:
                break
            packets = fmt.packetize(x[:n], first, self.obs)  # frame k of every thread
            times = None
            if realtime:
                t = (first + spf * np.arange(n // spf)) * self.obs.tsamp_s
                times = np.repeat(t, npol)
            yield Batch(np.ascontiguousarray(packets), times)
            first += n

    def close(self) -> None:
        self.reader.close()


def describe(src: DadaFile, dest: str, toml_path: str | None) -> tuple[str, dict[str, str]]:
    """The stream description (TOML) of the frames ``src`` sends, and the commands that
    take them on ``dest`` (naming ``toml_path``, or FILE.toml): fold --listen (with the
    file's sky frequency and signed channel width, so it folds as `fold FILE` does),
    record, capture."""
    f, o = src.fmt, src.obs
    lines = [
        f"# The VDIF frames `voltstream replay {src.path.name}` sends (replay/dada_file.py):",
        "# one thread per polarisation, the DADA file's channels and samples as they are.",
        'format = "vdif"',
        f"threads = [{', '.join(map(str, f.thread_ids))}]",
        f"frame_len = {f.payload_len + HEADER_LEN}",
        f"frames_per_second = {src.frames_per_second}",
        "station = 0",
        f"nchan = {f.nchan}",
        f"bits_per_sample = {f.bits}",
        f"complex = {str(not f.real).lower()}",
        f"npol = {f.npol}",
    ]
    name = toml_path or "FILE.toml"
    device = " --device cpu" if f.bits == 16 else ""  # the GPU unpacks 2, 4 and 8 bits
    commands = {
        "fold_listen": (
            f"voltstream fold --listen {dest} --stream {name} --freq "
            f"{o.freq_mhz:.12g} --chan-bw {f.chan_bw_mhz:.12g}{device} --dm DM "
            "--period P -o out.fits"
        ),  # fmt: skip
        "record": (
            f"voltstream record --listen {dest} --stream {name} --scan NAME --dirs DIR "
            "--layout vdif"
        ),  # fmt: skip
        "capture": f"voltstream capture --listen {dest} --stream {name} --duration S",
    }
    return "\n".join(lines) + "\n", commands
