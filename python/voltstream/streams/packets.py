"""The packet formats `voltstream simulate` makes beyond complex VDIF and YNAO frames:
real-sampled VDIF (as a DBBC3 sends it), CODIF (a stream description's geometry
with the format options' samples), and the packets of a declarative layout or the
counter format (e.g. a wavefront sensor's frames for `voltstream latency`).

``RealVdif`` and ``Codif`` stand in for ``formats.StreamFormat`` where simulate
packetises samples (``packetize``, ``samples_per_packet``, ``observation``...), with
``prepare`` turning each synthesised complex block into what they pack.
``LayoutPackets`` has no samples: its packets carry a counter and noise bytes.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from voltstream.errors import ConfigError
from voltstream.formats import VDIF_EPOCH_MJD, StreamFormat
from voltstream.io import vdif as _vdif
from voltstream.observation import Observation
from voltstream.sim import codif as _codif
from voltstream.sim.packetize import packetize_vdif
from voltstream.streams import CodifStream, CounterStream, LayoutStream

#: Standard deviation (in codes) of each real or imaginary part the simulator
#: quantises to: about optimal below 8 bits (2.2 levels at 2 bits); 20 at 8 bits.
RMS = {2: 2.2, 4: 3.0, 8: 20.0}


def _whole(value: float, what: str, fix: str) -> int:
    if value < 1 or abs(value - round(value)) > 1e-6:
        raise ConfigError(f"{what} is {value:g}, not a whole number: {fix}")
    return int(round(value))


def _scaled(x: np.ndarray, bits: int, stats: dict) -> np.ndarray:
    """``x`` (unit power) in code units; 8-bit values past the codes are counted."""
    q = x * np.float32(RMS[bits] * math.sqrt(2.0))
    if bits == 8:
        parts = q.view(np.float32) if np.iscomplexobj(q) else q
        stats["clipped"] += int(np.count_nonzero(np.abs(parts) > 127.5))
    return q


@dataclass
class RealVdif:
    """VDIF of real-sampled channels (``simulate --format vdif --real``): each of the
    complex format's channels (bandwidth B) as real samples at 2B, packed at --bits
    (2: the VDIF levels, as a DBBC3 sends them) into --vdif-payload bytes a frame."""

    complex_format: StreamFormat
    upconvert: Any = field(default=None, repr=False)

    def __post_init__(self) -> None:
        from voltstream.dsp.real import ComplexToReal

        f = self.complex_format
        bits_per_sample = f.thread_nchan * f.bits  # one thread's channels
        if (f.payload_len * 8) % bits_per_sample:
            raise ConfigError(f"--vdif-payload {f.payload_len} does not hold whole real samples")
        self.samples_per_packet = f.payload_len * 8 // bits_per_sample
        rate = 2 * abs(f.chan_bw_mhz) * 1e6 / self.samples_per_packet
        self.fps = _whole(rate, "real VDIF frames per second", "change --vdif-payload or --chan-bw")
        self.upconvert = ComplexToReal()

    name = "vdif"
    nchan = property(lambda self: self.complex_format.nchan)
    thread_blocks = property(lambda self: self.complex_format.thread_blocks)
    npol = property(lambda self: self.complex_format.npol)
    bits = property(lambda self: self.complex_format.bits)
    freq_mhz = property(lambda self: self.complex_format.freq_mhz)
    packet_len = property(lambda self: self.complex_format.packet_len)
    tsamp_s = property(lambda self: self.complex_format.tsamp_s / 2)

    @property
    def block_unit(self) -> int:
        """Complex samples a block must be a multiple of to make whole frames."""
        return self.samples_per_packet // math.gcd(self.samples_per_packet, 2)

    def observation(self, **kw: Any) -> Observation:
        return dataclasses.replace(self.complex_format.observation(**kw), ndim=1,
                                   tsamp_s=self.tsamp_s)  # fmt: skip

    def capture_kwargs(self) -> dict:
        return {**self.complex_format.capture_kwargs(), "frames_per_second": self.fps}

    def prepare(self, x: np.ndarray, stats: dict) -> np.ndarray:
        return _scaled(self.upconvert(x), self.bits, stats)

    def packetize(
        self, q: np.ndarray, first: int, obs: Observation, subband: int = 0
    ) -> np.ndarray:
        f, spf = self.complex_format, self.samples_per_packet
        start = (obs.start_mjd - VDIF_EPOCH_MJD) * 86400 * self.fps + round(
            obs.start_sec * self.fps
        )
        if f.thread_blocks > 1:  # each thread its block of channels and pol
            from voltstream.io.vdif_threads import from_blocks

            q = from_blocks(q, f.thread_blocks)
        return packetize_vdif(q, frames_per_second=self.fps, nbit=f.bits, complex_data=False,
                              samples_per_frame=spf, start_frame=start + first // spf,
                              station=f.station or 0, threads=f.thread_ids)  # fmt: skip


@dataclass
class Codif:
    """CODIF frames of the stream description ``desc`` (threads, frame length, frames
    per period, station, group) carrying the samples of ``samples`` (the format
    options: channels, channel width, bits; one thread per polarisation)."""

    desc: CodifStream
    samples: StreamFormat

    def __post_init__(self) -> None:
        s, d = self.samples, self.desc
        data = d.frame_len - _codif.HEADER_LEN
        per_sample = 2 * s.nchan * s.bits  # bits of one complex sample of every channel
        if data % 8 or (data * 8) % per_sample:
            raise ConfigError(
                f"CODIF frame_len {d.frame_len}: its {data}-byte data array must be a "
                f"multiple of 8 bytes and hold whole samples ({s.nchan} channels of "
                f"{s.bits}-bit complex); change --nchan or --bits"
            )
        self.samples_per_packet = data * 8 // per_sample
        rate = abs(s.chan_bw_mhz) * 1e6 / self.samples_per_packet
        self.fps = _whole(rate, "CODIF frames per second", "change --chan-bw or the frame_len")
        self.period = _whole(d.frames_per_period / self.fps, f"the period of frames_per_period "
                             f"{d.frames_per_period} at {self.fps} frames/s (s)",
                             f"make it a multiple of {self.fps}")  # fmt: skip
        if self.period >= 1 << 16:
            raise ConfigError(f"a CODIF period of {self.period} s does not fit its 16 bits")

    name = "codif"
    npol = property(lambda self: len(self.desc.threads))
    nchan = property(lambda self: self.samples.nchan)
    bits = property(lambda self: self.samples.bits)
    freq_mhz = property(lambda self: self.samples.freq_mhz)
    tsamp_s = property(lambda self: self.samples.tsamp_s)
    packet_len = property(lambda self: self.desc.frame_len)
    block_unit = property(lambda self: self.samples_per_packet)

    def observation(self, **kw: Any) -> Observation:
        return dataclasses.replace(self.samples.observation(**kw), npol=self.npol)

    def prepare(self, x: np.ndarray, stats: dict) -> np.ndarray:
        return _scaled(x, self.bits, stats)

    def packetize(
        self, q: np.ndarray, first: int, obs: Observation, subband: int = 0
    ) -> np.ndarray:
        spf = self.samples_per_packet
        # The half-year epoch the observation starts in; frames count from it.
        year, month = _year_month(obs.start_mjd)
        epoch = 2 * (year - 2000) + (month > 6)
        since = (obs.start_mjd - _vdif.ref_epoch_mjd(epoch)) * 86400 + obs.start_sec
        start = round(since * self.fps) + first // spf
        return _codif.packetize_codif(
            q, nbit=self.bits, samples_per_frame=spf, frames_per_period=self.desc.frames_per_period,
            period_s=self.period, start_frame=start, epoch=epoch,
            station=self.desc.station or 0, group=self.desc.group or 0, threads=self.desc.threads,
        )  # fmt: skip


def _year_month(mjd: int) -> tuple[int, int]:
    import datetime

    d = datetime.date(1858, 11, 17) + datetime.timedelta(days=int(mjd))
    return d.year, d.month


class LayoutPackets:
    """Packets of a declarative layout (or the counter format, the same as a layout):
    the index field counts ``index_step`` a packet, every stream id in turn (time-
    major), the constant fields hold their values, the payload noise bytes."""

    def __init__(self, desc: LayoutStream | CounterStream) -> None:
        if isinstance(desc, CounterStream):
            n = desc.payload_len
            spec: dict[str, Any] = {
                "packet_len": 10 + n, "index": {"offset": 0, "bytes": 8},
                "stream": {"offset": 8, "bytes": 2}, "stream_ids": list(range(desc.streams)),
                "payload_offset": 10, "payload_len": n, "checks": [], "index_step": 1,
            }  # fmt: skip
        else:
            spec = desc.layout.model_dump()
        self.spec = spec
        self.packet_len = int(spec["packet_len"])
        self.stream_ids = list(spec.get("stream_ids") or [0])

    def packets(self, first: int, n: int, rng: np.random.Generator) -> np.ndarray:
        """Indices ``first .. first + n`` of every stream: (n * streams, packet_len)."""
        s = self.spec
        k = len(self.stream_ids)
        out = np.zeros((n * k, self.packet_len), dtype=np.uint8)
        lo, size = s["payload_offset"], s["payload_len"]
        out[:, lo : lo + size] = rng.integers(0, 256, (n * k, size), dtype=np.uint8)
        index = np.repeat(np.arange(first, first + n, dtype=np.uint64), k)
        _put(out, s["index"], index * np.uint64(s.get("index_step", 1)))
        if s.get("stream") is not None:
            _put(out, s["stream"], np.tile(np.array(self.stream_ids, dtype=np.uint64), n))
        for check in s.get("checks") or []:
            _put(out, check, np.full(n * k, check["value"], dtype=np.uint64))
        return out


def _put(packets: np.ndarray, f: dict[str, Any], values: np.ndarray) -> None:
    """ORs ``values`` into field ``f`` (offset, bytes, endian, shift, bits) of each row."""
    nbytes, shift, bits = int(f["bytes"]), int(f.get("shift", 0)), int(f.get("bits", 0))
    width = bits or 8 * nbytes - shift
    mask = np.uint64((1 << width) - 1) if width < 64 else np.uint64(0xFFFFFFFFFFFFFFFF)
    raw = (values.astype(np.uint64) & mask) << np.uint64(shift)
    big = f.get("endian", "big") == "big"
    b = raw.astype(">u8" if big else "<u8").view(np.uint8).reshape(-1, 8)
    b = b[:, 8 - nbytes :] if big else b[:, :nbytes]
    off = int(f["offset"])
    packets[:, off : off + nbytes] |= b
