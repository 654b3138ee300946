"""A DADA scan rebuilt into packets: the samples of every stream's files, in time
order, packetized again in the format the user names (``--format vdif|ynao``) by the
same packetizers ``voltstream simulate`` uses.

The dada layout keeps one stream per ``SS`` (``<SCAN>_s<SS>_<OBS_OFFSET>.dada``);
each file's data are TFP samples (NBIT 8, NDIM 2, as DadaReader reads them), the
streams' polarisations side by side in SS order making the stream's ``npol``. A
file's place is its OBS_OFFSET (bytes of its stream before it). Samples no file
holds (files not recorded) are sent as zeros and counted (``gap_samples``); samples
after the last whole packet are not sent and are counted (``tail_samples``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path

import numpy as np

from voltstream.errors import ConfigError, FormatError
from voltstream.formats import StreamFormat
from voltstream.io.dada import DadaReader
from voltstream.observation import Observation
from voltstream.replay.sources import BATCH_BYTES, Batch, Source

#: Builds the packet format from what the headers say: (nchan, npol, chan_bw_mhz,
#: freq_mhz) -> StreamFormat (the user's --format and its options fill the rest).
FormatFactory = Callable[[int, int, float, float], StreamFormat]


class DadaStreams(Source):
    """The dada layout rebuilt into packets; see the module doc."""

    kind = "dada"

    def __init__(self, streams: Mapping[int, Sequence[Path]], make: FormatFactory) -> None:
        if not streams:
            raise ConfigError("no DADA files to replay")
        self.readers: dict[int, list[tuple[int, DadaReader]]] = {}
        for ss in sorted(streams):
            opened = [DadaReader(p) for p in streams[ss]]
            self.readers[ss] = sorted(((self._first_sample(r), r) for r in opened),
                                      key=lambda t: t[0])  # fmt: skip
        first = next(iter(self.readers.values()))[0][1]
        self.obs0 = first.obs
        self.npols = [rs[0][1].obs.npol for rs in self.readers.values()]
        self._check_alike()
        o = self.obs0
        self.fmt = make(o.nchan, sum(self.npols), o.bw_mhz / o.nchan, o.freq_mhz)
        if self.fmt.nchan != o.nchan or self.fmt.npol != sum(self.npols):
            raise ConfigError(
                f"the DADA scan has {o.nchan} channels x {sum(self.npols)} pols but --format "
                f"{self.fmt.name} packets carry {self.fmt.nchan} x {self.fmt.npol}"
            )
        if abs(self.fmt.tsamp_s - o.tsamp_s) > 1e-9 * o.tsamp_s:
            raise ConfigError(
                f"DADA TSAMP {o.tsamp_s * 1e6} us does not match the packets' channel width "
                f"({self.fmt.tsamp_s * 1e6} us per sample)"
            )
        super().__init__(self.fmt.packet_len)

    @staticmethod
    def _first_sample(r: DadaReader) -> int:
        offset = int(r.header["OBS_OFFSET"])
        if offset % r.bytes_per_sample:
            raise FormatError(f"{r.path}: OBS_OFFSET {offset} is not on a sample boundary")
        return offset // r.bytes_per_sample

    def _check_alike(self) -> None:
        o = self.obs0
        for rs in self.readers.values():
            for _, r in rs:
                ro = r.obs
                if (ro.nbit, ro.ndim) != (8, 2):
                    raise FormatError(
                        f"{r.path}: NBIT {ro.nbit} NDIM {ro.ndim}; replay rebuilds packets "
                        "from 8-bit complex samples (NBIT 8, NDIM 2)"
                    )
                if (ro.nchan, ro.tsamp_s, ro.freq_mhz, ro.bw_mhz) != (
                    o.nchan, o.tsamp_s, o.freq_mhz, o.bw_mhz,
                ):  # fmt: skip
                    raise FormatError(f"{r.path}: header disagrees with {self._first_path()}")
                if ro.npol != rs[0][1].obs.npol:
                    raise FormatError(f"{r.path}: NPOL differs from the stream's other files")

    def _first_path(self) -> Path:
        return next(iter(self.readers.values()))[0][1].path

    def _origin(self) -> Observation:
        """The observation as of sample 0 (OBS_OFFSET 0) of the first stream."""
        first, r = next(iter(self.readers.values()))[0]
        sec = r.obs.start_sec - first * r.obs.tsamp_s
        days = int(sec // 86400)
        return dataclasses.replace(r.obs, start_mjd=r.obs.start_mjd + days,
                                   start_sec=sec - 86400 * days)  # fmt: skip

    def batches(self, realtime: bool = False) -> Iterator[Batch]:
        self.counts = {"files": sum(map(len, self.readers.values())), "gap_samples": 0,
                       "tail_samples": 0}  # fmt: skip
        fmt, spp = self.fmt, self.fmt.samples_per_packet
        begin = min(rs[0][0] for rs in self.readers.values())
        end = max(s + r.nsamp for rs in self.readers.values() for s, r in rs)
        start = begin - begin % spp  # packets sit on whole multiples of their length
        whole_end = end - (end - start) % spp
        self.counts["tail_samples"] = end - whole_end
        per_sample = fmt.nchan * fmt.npol * 2
        block = max(spp, (BATCH_BYTES // per_sample) // spp * spp)
        obs = self._origin()
        for a in range(start, whole_end, block):
            n = min(block, whole_end - a)
            samples = np.zeros((n, fmt.nchan, fmt.npol, 2), np.int8)
            pol = 0
            for ss, npol in zip(self.readers, self.npols, strict=True):
                got = self._fill(self.readers[ss], a, samples[:, :, pol : pol + npol])
                self.counts["gap_samples"] += n - got
                pol += npol
            packets = fmt.packetize(samples, a, obs)
            times = None
            if realtime:
                npk = n // spp
                t = (a - begin + spp * np.arange(npk)) * fmt.tsamp_s
                times = np.repeat(np.maximum(t, 0.0), packets.shape[0] // npk)
            yield Batch(np.ascontiguousarray(packets), times)

    @staticmethod
    def _fill(files: list[tuple[int, DadaReader]], a: int, out: np.ndarray) -> int:
        """Copies the samples of ``files`` that fall in [a, a + len(out)) into ``out``;
        returns how many samples it found."""
        got = 0
        for s, r in files:
            lo, hi = max(a, s), min(a + len(out), s + r.nsamp)
            if lo < hi:
                out[lo - a : hi - a] = r.read_raw(lo - s, hi - lo)
                got += hi - lo
        return got

    def close(self) -> None:
        for rs in self.readers.values():
            for _, r in rs:
                r.close()
