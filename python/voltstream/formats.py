"""Stream formats as the Python side sees them: how a capture is configured for a
format, and how a chunk's payload bytes become TFP samples.

The byte layouts themselves live in the Rust wire layer and docs/formats.md; this
module only knows the sizes it needs to reshape payloads, and the options the
capture engine takes for each format. The sizes are written once, where the
Python side writes or reads the bytes: the YNAO frame's in ``sim/packetize.py``
(its packetizer), VDIF's in ``io/vdif.py`` (its file format).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from fractions import Fraction
from typing import Any

import numpy as np

from voltstream.dsp.packed import PackedLayout
from voltstream.errors import ConfigError
from voltstream.io import vdif
from voltstream.observation import Observation
from voltstream.sim.packetize import (
    _YNAO_HEADER,
    YNAO_DATA_LEN,
    YNAO_HEADER_LEN,
    YNAO_NCHAN,
    YNAO_NPOL,
    YNAO_NSPEC,
    packetize_vdif,
    packetize_ynao,
)

FORMATS = ("ynao", "vdif")

#: VDIF sample widths a capture's chunks unpack on the GPU (``chunk_layout``); the
#: CPU's live fold decodes every width the file reader does (``vdif.NBITS``).
GPU_BITS = vdif.GPU_NBITS

#: VDIF defaults: 8-bit complex, one thread per polarisation, 8000-byte payloads.
VDIF_DEFAULT_PAYLOAD = 8000
#: Our VDIF frames count seconds from reference epoch 0 (2000-01-01).
VDIF_EPOCH_MJD = vdif.ref_epoch_mjd(0)


@dataclass(frozen=True)
class StreamFormat:
    """One capture's format: its name, the sample geometry, and the packet sizes."""

    name: str
    nchan: int
    npol: int
    samples_per_packet: int  # time samples of every channel carried by one packet
    payload_len: int  # data bytes per packet (excluding the header)
    chan_bw_mhz: float  # signed: negative for a lower sideband
    freq_mhz: float  # band centre
    bits: int = 8  # per real or imaginary part (VDIF: 1, 2, 4, 8 or 16; YNAO: 8)
    station: int | None = None  # VDIF: accept only this station id (others: foreign)
    # VDIF: the thread id of each capture stream, in stream order (default 0 .. npol-1):
    # ``npol`` polarisations of each block of channels, the polarisation fastest
    # (io/vdif_threads.py); ``nchan`` counts every block's channels.
    vdif_threads: tuple[int, ...] | None = None
    # A band that arrives as several streams (YNAO subbands on several ports, one
    # stream each): ``nchan`` counts every subband's channels, in stream order.
    subbands: int = 1
    # VDIF: real-sampled channels (a DBBC3's), each real at twice ``chan_bw_mhz``; the
    # fold converts them to complex channels of ``chan_bw_mhz`` (dsp/real.py).
    real: bool = False
    # VDIF: 16-byte legacy headers (a stream description's ``legacy = true``); the
    # payload is the same bytes after a shorter header.
    legacy: bool = False

    @property
    def ndim(self) -> int:
        """Values per sample: 2 (complex) or 1 (real)."""
        return 1 if self.real else 2

    @property
    def thread_ids(self) -> list[int]:
        """The VDIF thread of each capture stream, in stream order: polarisation
        ``k % npol`` of channel block ``k // npol`` (io/vdif_threads.py)."""
        return list(self.vdif_threads) if self.vdif_threads else list(range(self.npol))

    @property
    def thread_blocks(self) -> int:
        """VDIF: the blocks of channels the threads carry side by side (1: the threads
        are the polarisations)."""
        return len(self.thread_ids) // self.npol if self.name == "vdif" else 1

    @property
    def thread_nchan(self) -> int:
        """VDIF: the channels of one thread (its frames' header nchan)."""
        return self.nchan // self.thread_blocks

    @property
    def tsamp_s(self) -> float:
        """The sample time as sent (real samples: half the complex channel's)."""
        return 1e-6 / abs(self.chan_bw_mhz) / (2 if self.real else 1)

    @property
    def packets_per_second(self) -> float:
        return 1.0 / (self.tsamp_s * self.samples_per_packet)

    @property
    def packet_len(self) -> int:
        if self.name == "ynao":
            return self.payload_len + YNAO_HEADER_LEN
        return self.payload_len + (vdif.LEGACY_HEADER_LEN if self.legacy else vdif.HEADER_LEN)

    @property
    def streams(self) -> int:
        """Capture streams: YNAO carries both pols in one stream (once per subband), VDIF
        one per thread."""
        return self.subbands if self.name == "ynao" else len(self.thread_ids)

    def in_subbands(self, n: int) -> StreamFormat:
        """This format (one subband) as a band of ``n`` subbands, one stream each (YNAO:
        the channels of subband k are ``32 k .. 32 k + 31``); ``freq_mhz`` stays the
        centre of the whole band."""
        if n == 1:
            return self
        if self.name != "ynao":
            raise ConfigError(
                "a band in several streams (several --listen addresses) takes YNAO "
                f"subbands; for {self.name}, capture each address on its own"
            )
        return replace(self, nchan=self.nchan * n, subbands=n)

    @property
    def data_rate_gbps(self) -> float:
        return 8 * self.packet_len * self.packets_per_second * self.streams / 1e9

    def observation(self, **kw: Any) -> Observation:
        return Observation(
            nchan=self.nchan,
            npol=self.npol,
            freq_mhz=self.freq_mhz,
            bw_mhz=self.chan_bw_mhz * self.nchan,
            tsamp_s=self.tsamp_s,
            ndim=self.ndim,
            **kw,
        )

    def capture_kwargs(self) -> dict:
        """Format options for `voltstream._core.Capture`."""
        if self.name == "ynao":
            return {"format": "ynao"}
        fps = self.packets_per_second
        if abs(fps - round(fps)) > 1e-6:
            raise ConfigError(
                f"VDIF needs a whole number of frames per second; {self.samples_per_packet} "
                f"samples per frame at {abs(self.chan_bw_mhz)} MHz gives {fps:.3f}: "
                "change --vdif-payload or --chan-bw"
            )
        return {
            "format": "vdif",
            "vdif_threads": self.thread_ids,
            "vdif_frame_len": self.packet_len,
            "frames_per_second": int(round(fps)),
            "station": self.station,
            "vdif_legacy": self.legacy,
        }

    def chunk_layout(self, packets_per_chunk: int, slot_len: int | None = None) -> PackedLayout:
        """Where sample (s, chan, pol, re/im) sits in a capture chunk's bytes, laid out
        [stream][packet][payload]: the GPU unpack kernel reads chunks as they are.
        ``slot_len``: bytes per packet slot where a slot holds more than the payload
        (a recording's chunks keep whole packets); the reader starts at the first
        payload (``slot_len - payload_len`` bytes in), the layout steps by slots."""
        if self.bits not in GPU_BITS:  # the GPU unpack kernels' widths
            raise ConfigError(
                f"the GPU folds 2-, 4- and 8-bit VDIF live, not {self.bits}-bit: fold it on "
                "the CPU (--device cpu), which decodes every width a file's reader does"
            )
        values_per_byte = 8 // self.bits
        frame = (slot_len or self.payload_len) * values_per_byte  # values per packet slot
        if self.name == "ynao":  # a stream: (spectrum, chan, pol, re/im) int8 per packet
            # Each subband (stream) is a block of channels, ppc packets of the next.
            cpb = self.nchan // self.subbands
            per_sample = cpb * self.npol * 2
            return PackedLayout(8, "twos", 2, self.nchan, self.npol, self.samples_per_packet,
                                frame, per_sample, self.npol * 2, 2,
                                cpb, packets_per_chunk * frame)  # fmt: skip
        # VDIF: one stream per thread, (time, chan[, re/im]) offset binary per frame;
        # thread k is pol k % npol of channel block k // npol (the pol fastest).
        enc, d = ("vdif2" if self.bits == 2 else "offset"), self.ndim
        per_stream = packets_per_chunk * frame
        return PackedLayout(self.bits, enc, d, self.nchan, self.npol, self.samples_per_packet,
                            frame, self.thread_nchan * d, d, per_stream, self.thread_nchan,
                            self.npol * per_stream)  # fmt: skip

    def packetize(
        self, samples: np.ndarray, first_sample: int, obs: Observation, subband: int = 0
    ) -> np.ndarray:
        """Samples into packets (n, packet_len) uint8 in send order.

        `samples` are int8 (nsamp, nchan, npol, 2) re/im, or complex (nsamp, nchan,
        npol) already scaled to the 8-bit range. `first_sample` counts samples since
        the observation start `obs`, so every packet's time stamp and index are exact.
        `subband`: the YNAO header's subband id (a ROACH2 numbers the subbands it
        sends to its nodes); VDIF has no such field.
        """
        if samples.dtype == np.int8 and self.name != "ynao":  # YNAO frames take int8 as is
            samples = samples.astype(np.float32).view(np.complex64)[..., 0]

        spp = self.samples_per_packet
        if first_sample % spp:
            raise ConfigError(f"block start {first_sample} is not on a packet boundary ({spp})")
        if self.name == "ynao":
            ns = round(first_sample * self.tsamp_s * 1e9) + round(obs.start_sec * 1e9)
            days, ns = divmod(ns, 86400 * 10**9)
            return packetize_ynao(
                samples,
                start_sequence=first_sample // spp,
                mjd=obs.start_mjd + days,
                second=ns // 10**9,
                nanosecond=ns % 10**9,
                tsamp_s=self.tsamp_s,
                subband=subband,
            )
        fps = self.capture_kwargs()["frames_per_second"]
        start_frame = (obs.start_mjd - VDIF_EPOCH_MJD) * 86400 * fps + round(obs.start_sec * fps)
        if self.thread_blocks > 1:  # each thread its block of channels and pol
            from voltstream.io.vdif_threads import from_blocks

            samples = from_blocks(samples, self.thread_blocks)
        return packetize_vdif(
            samples,
            frames_per_second=fps,
            nbit=self.bits,
            samples_per_frame=spp,
            start_frame=start_frame + first_sample // spp,
            station=self.station or 0,
            threads=self.thread_ids,
            complex_data=not self.real,
            legacy=self.legacy,
        )

    @property
    def tsamp_exact(self) -> Fraction:
        """The sample time as an exact fraction of the channel width given (``tsamp_s``
        is its float): sample times counted from a packet's stamp stay exact."""
        return Fraction(1, 10**6) / abs(Fraction(self.chan_bw_mhz)) / (2 if self.real else 1)

    def packet_time(self, header: np.ndarray) -> tuple[int, Fraction]:
        """The time of a packet's first sample from its header bytes (uint8, the packet's
        first ``packet_len - payload_len``), exactly: (MJD, seconds into that day). YNAO
        stamps its frames (MJD, second, nanosecond); VDIF counts seconds from its
        reference epoch and frames within the second."""
        header = np.ascontiguousarray(header, np.uint8)
        if self.name == "ynao":
            h = header[: _YNAO_HEADER.itemsize].view(_YNAO_HEADER)[0]
            return int(h["mjd"]), int(h["second"]) + Fraction(int(h["nanosecond"]), 10**9)
        h = vdif.decode_headers(header[None, :])
        days, sec = divmod(int(h["seconds"][0]), 86400)
        fps = self.capture_kwargs()["frames_per_second"]
        mjd = vdif.ref_epoch_mjd(int(h["ref_epoch"][0])) + days
        return mjd, sec + Fraction(int(h["frame"][0]), fps)

    def payload_to_tfp(self, per_stream: np.ndarray, present: np.ndarray) -> np.ndarray:
        """(streams, packets, payload) uint8 + (streams, packets) presence -> int8 TFP.

        Returns (packets * samples_per_packet, nchan, npol, 2) int8; samples of absent
        packets are zero.
        """
        nstreams, npkt, _ = per_stream.shape
        spp, nchan, npol = self.samples_per_packet, self.nchan, self.npol
        if self.bits != 8 or self.real:
            raise ConfigError(
                f"{self.bits}-bit VDIF cannot be written to an 8-bit DADA file yet; capture "
                "it without --output, or record its packets (voltstream record --layout vdif)"
            )
        if self.name == "ynao":  # one stream per subband, its channels in a block
            nsub = self.subbands
            raw = per_stream.view(np.int8).reshape(nsub, npkt, spp, nchan // nsub, npol, 2)
            out = np.empty((npkt, spp, nsub, nchan // nsub, npol, 2), np.int8)
            for k in range(nsub):
                out[:, :, k] = raw[k]
                out[~present[k], :, k] = 0
            return out.reshape(npkt * spp, nchan, npol, 2)
        # VDIF 8-bit complex is offset binary, time-major then channel within a
        # frame; thread k is pol k % npol of channel block k // npol.
        tn = self.thread_nchan
        frames = per_stream.reshape(nstreams, npkt, spp, tn, 2)
        out = np.empty((npkt, spp, nchan, npol, 2), dtype=np.int8)
        for k in range(nstreams):
            b, p = divmod(k, npol)
            part = out[:, :, b * tn : (b + 1) * tn, p, :]
            np.bitwise_xor(frames[k], 0x80, out=part.view(np.uint8))
            part[~present[k]] = 0
        return out.reshape(npkt * spp, nchan, npol, 2)

    def payload_to_complex(self, per_stream: np.ndarray, present: np.ndarray) -> np.ndarray:
        """(streams, packets, payload) uint8 + presence -> complex64 (n, nchan, npol).

        For VDIF of widths other than 8 bits (1, 2, 4, 16), whose levels (2-bit: +-1,
        +-3.3359; 16-bit: beyond int8) an int8 TFP sample cannot hold: each part
        decoded as a VDIF file's reader decodes it (io/vdif.py ``unpack``), so a live
        CPU fold sees the samples a fold of the same frames from a file sees. Samples
        of absent packets are zero.
        """
        if self.name != "vdif":
            return (
                self.payload_to_tfp(per_stream, present)
                .astype(np.float32)
                .view(np.complex64)[..., 0]
            )
        nstreams, npkt, _ = per_stream.shape
        spp, nchan, npol, d = self.samples_per_packet, self.nchan, self.npol, self.ndim
        tn = self.thread_nchan  # thread k: pol k % npol of channels (k // npol) * tn ..
        out = np.zeros((npkt, spp, nchan, npol, d), dtype=np.float32)
        for k in range(nstreams):
            b, p = divmod(k, npol)
            have = np.flatnonzero(present[k])
            parts = vdif.unpack(per_stream[k, have], self.bits)
            out[have, :, b * tn : (b + 1) * tn, p, :] = parts.reshape(have.size, spp, tn, d)
        if self.real:  # real samples, float32 (n, nchan, npol): RealToComplex takes them
            return out.reshape(npkt * spp, nchan, npol)
        return out.reshape(npkt * spp, nchan, npol, 2).view(np.complex64)[..., 0]


def station_code(text: str) -> int | None:
    """A VDIF/CODIF station id written as its two ASCII characters (``"Ef"``), or as
    a number; None when ``text`` is neither."""
    if text.isdigit():
        return int(text)
    if len(text) == 2 and text.isascii():
        return (ord(text[0]) << 8) | ord(text[1])
    return None


def make_format(
    name: str,
    nchan: int | None = None,
    chan_bw_mhz: float = 4.0,
    freq_mhz: float = 1420.0,
    vdif_payload: int = VDIF_DEFAULT_PAYLOAD,
    npol: int | None = None,
    bits: int = 8,
    station: int | None = None,
    vdif_threads: list[int] | None = None,
    real: bool = False,
    legacy: bool = False,
) -> StreamFormat:
    """Builds a StreamFormat from command-line style options, validating them. VDIF:
    ``nchan`` is one thread's channels; ``vdif_threads`` are ``npol`` polarisations of
    each block of channels, the pol fastest (io/vdif_threads.py; ``npol`` None: 2
    without threads, else `default_npol`)."""
    if name not in FORMATS:
        raise ConfigError(f"unknown format {name!r}: choose one of {', '.join(FORMATS)}")
    if chan_bw_mhz == 0:
        raise ConfigError("--chan-bw must be non-zero (negative for a lower sideband)")
    if name == "ynao":
        if nchan not in (None, YNAO_NCHAN) or npol not in (None, YNAO_NPOL):
            raise ConfigError(
                f"the YNAO frame always carries {YNAO_NCHAN} channels and {YNAO_NPOL} pols"
            )
        if bits != 8:
            raise ConfigError("the YNAO frame carries 8-bit samples; --bits is for VDIF")
        return StreamFormat(
            "ynao", YNAO_NCHAN, YNAO_NPOL, YNAO_NSPEC, YNAO_DATA_LEN, chan_bw_mhz, freq_mhz
        )
    nchan = 32 if nchan is None else nchan
    if nchan < 1 or nchan & (nchan - 1):
        raise ConfigError(f"VDIF needs a power-of-two channel count, got {nchan}")
    if bits not in vdif.NBITS:
        raise ConfigError(
            f"VDIF samples of {bits} bits: use {', '.join(map(str, vdif.NBITS))} (the GPU "
            f"folds {', '.join(map(str, GPU_BITS))} live)"
        )
    bits_per_sample = (1 if real else 2) * nchan * bits  # all channels of one thread
    if vdif_payload % 8 or (vdif_payload * 8) % bits_per_sample:
        kind = "real" if real else "complex"
        raise ConfigError(
            f"--vdif-payload {vdif_payload} must be a multiple of 8 bytes and hold whole "
            f"samples ({bits}-bit {kind} x {nchan} channels = {bits_per_sample // 8 or 1} "
            f"byte(s) per sample)"
        )
    if station is not None and not 0 <= station < 1 << 16:
        raise ConfigError(f"--station {station}: a VDIF station id is 0 .. 65535")
    from voltstream.io.vdif_threads import check_npol, default_npol

    threads = None
    if vdif_threads is not None:
        threads = tuple(int(t) for t in vdif_threads)
        if len(set(threads)) != len(threads) or not all(0 <= t < 1024 for t in threads):
            raise ConfigError(
                f"--vdif-threads {','.join(map(str, threads))}: distinct ids in 0 .. 1023"
            )
    if npol is None:
        npol = 2 if threads is None else default_npol(len(threads))
    if npol not in (1, 2):
        raise ConfigError(f"--npol {npol}: VDIF streams here carry 1 or 2 polarisations")
    blocks = 1 if threads is None else check_npol(npol, len(threads))
    return StreamFormat(
        "vdif", nchan * blocks, npol, vdif_payload * 8 // bits_per_sample, vdif_payload,
        chan_bw_mhz, freq_mhz, bits, station, threads, real=real, legacy=legacy,
    )  # fmt: skip
