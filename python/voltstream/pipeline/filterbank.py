"""The filterbank pipeline: reader -> filterbank engine -> rows -> file (SIGPROC or
PSRFITS search mode), with its report.

A reader is the fold's (pipeline/fold.py): ``.obs`` and ``.read_blocks(nsamp)``, a
file or a live capture alike. The engine is the NumPy reference
(search/filterbank.py) or the GPU engine (search/gpu_filterbank.py): the same plan,
the same ``(samples, valid)`` per block, ``finish()`` for what is still in flight
(docs/search.md). Output samples go out in rows of ``nsblk`` (:class:`RowWriter`):
each row updates the quantiser's statistics and is written; a row whose every sample
was lost gets weight 0 (PSRFITS) and is counted. The live GPU filterbank
(pipeline/live_filterbank.py) feeds the engine the capture's chunks and its rows to
the same RowWriter.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from voltstream.io.baseband import reader_blocks
from voltstream.pipeline.interfaces import BlockSource
from voltstream.search.filterbank import FilterbankPlan, FilterbankReference
from voltstream.search.quantise import RunningQuantiser

__all__ = ["FilterbankReport", "RowWriter", "filterbank_report", "make_filterbank", "open_writer",
           "run_filterbank"]  # fmt: skip


@dataclass
class FilterbankReport:
    """What a filterbank run did (the CLI prints it and writes it as --report JSON)."""

    output: str
    file_format: str  # "sigproc" or "psrfits"
    samples_in: int  # input (coarse) samples read
    lost_in: int  # of them lost (missing packets or frames, invalid data)
    samples_out: int  # output samples written
    lost_out: int  # of them flagged: filled with the quantiser's zero (the channel mean)
    rows: int  # rows of nsblk samples (PSRFITS SUBINT rows)
    rows_zero_weight: int  # rows whose every sample was lost (DAT_WTS 0 in PSRFITS)
    not_written: int  # input samples at the end short of a whole output sample
    clipped: int  # 8-bit codes clipped at 0 or 255
    nchans: int
    nifs: int
    nbits: int
    fch1_mhz: float
    foff_mhz: float
    tsamp_s: float
    tstart_mjd: int
    tstart_sec: float
    fine_channels: int
    spectra_per_sample: int
    first_input_sample: int
    dm: float | None

    def as_dict(self) -> dict:
        return asdict(self)

    def summary_lines(self) -> list[str]:
        return [
            f"filterbank: {self.samples_in} samples in ({self.lost_in} lost) -> "
            f"{self.samples_out} samples out ({self.lost_out} flagged lost, "
            f"{self.rows_zero_weight} of {self.rows} rows all lost), {self.output} "
            f"({self.file_format}, {self.nbits}-bit)",
            f"filterbank: {self.nchans} channels x {self.nifs} IFs, fch1 {self.fch1_mhz:.9g} "
            f"MHz, foff {self.foff_mhz:.9g} MHz, tsamp {self.tsamp_s * 1e6:.9g} us "
            f"({self.fine_channels} fine channels x {self.spectra_per_sample} spectra a "
            "sample), "
            f"tstart MJD {self.tstart_mjd} + {self.tstart_sec:.9f} s",
        ]


def open_writer(path: str, file_format: str, plan: FilterbankPlan, history: str = "") -> Any:
    """The writer of ``plan``'s output: SigprocWriter or PsrfitsSearchWriter."""
    obs = plan.out_obs
    if file_format == "psrfits":
        from voltstream.io.psrfits_search import PsrfitsSearchWriter

        return PsrfitsSearchWriter(path, obs, plan.npol_out, plan.pol_type,
                                   plan.settings.nsblk, plan.dm, history)  # fmt: skip
    from voltstream.io.sigproc import SigprocWriter

    return SigprocWriter(path, obs, plan.npol_out, rawdatafile=history)


class RowWriter:
    """Output samples, in batches of any length, into rows of ``nsblk``: each row
    updates the quantiser's statistics and is written; a row whose every sample was
    lost gets weight 0 (PSRFITS) and is counted. ``on_row(data, scale, offset,
    valid)``: each row as written (the tests' reference output)."""

    def __init__(self, plan: FilterbankPlan, writer: Any, on_row: Any = None) -> None:
        self.writer, self.on_row = writer, on_row
        self.nsblk = plan.settings.nsblk
        self.quant = RunningQuantiser(plan.npol_out, plan.nchan_out, plan.settings.nbits)
        self.pending: list[np.ndarray] = []
        self.pending_ok: list[np.ndarray] = []
        self.have = 0
        self.rows = self.dead = 0

    def add(self, x: np.ndarray, ok: np.ndarray) -> None:
        """Output samples (k, npol_out, nchan_out) and their validity (k,)."""
        if not len(x):
            return
        self.pending.append(x)
        self.pending_ok.append(ok)
        self.have += len(x)
        nsblk = self.nsblk
        if self.have >= nsblk:
            xs, oks = np.concatenate(self.pending), np.concatenate(self.pending_ok)
            whole = (self.have // nsblk) * nsblk
            for a in range(0, whole, nsblk):
                self._emit(xs[a : a + nsblk], oks[a : a + nsblk])
            self.pending, self.pending_ok = [xs[whole:]], [oks[whole:]]
            self.have -= whole

    def close(self) -> None:
        """Writes the last, short row (padded with the quantiser's zero)."""
        if self.have:
            self._emit(np.concatenate(self.pending), np.concatenate(self.pending_ok))
            self.pending, self.pending_ok, self.have = [], [], 0

    def _emit(self, x: np.ndarray, ok: np.ndarray) -> None:
        n, quant = x.shape[0], self.quant
        data, scale, offset = quant.row(x, ok)
        if n < self.nsblk:  # the last row: padded with the quantiser's zero (the mean)
            fill = np.empty((self.nsblk - n, *data.shape[1:]), data.dtype)
            fill[:] = quant.row(np.zeros((1, *x.shape[1:])), np.zeros(1, bool))[0][0]
            data = np.concatenate([data, fill])
        weight = 1.0 if ok.any() else 0.0
        self.writer.write_row(data, scale, offset, weight, n)
        if self.on_row is not None:
            self.on_row(data[:n], scale, offset, ok)
        self.rows += 1
        self.dead += weight == 0.0


def make_filterbank(
    reader: BlockSource,
    plan: FilterbankPlan,
    writer: Any,
    progress: Callable[[int], None] | None = None,
    engine: Any = None,
    on_row: Callable[[np.ndarray, np.ndarray, np.ndarray, np.ndarray], None] | None = None,
) -> tuple[int, int, RunningQuantiser]:
    """Runs everything ``reader`` yields through ``engine`` (None: the NumPy
    reference) into ``writer``; returns (rows, rows all lost, quantiser). ``on_row(data,
    scale, offset, valid)``: each row as written (the tests' reference output)."""
    eng = engine if engine is not None else FilterbankReference(plan)
    rows = RowWriter(plan, writer, on_row)
    for block, valid in reader_blocks(reader, plan.block_samples()):
        rows.add(*eng.feed(block, valid))
        if progress is not None:
            progress(eng.samples_in)
    rows.add(*eng.finish())  # what a GPU engine still had in flight
    rows.close()
    return rows.rows, rows.dead, rows.quant


def filterbank_report(
    path: str, file_format: str, plan: FilterbankPlan, eng: Any, rows: int, dead: int,
    samples: int, clipped: int,
) -> FilterbankReport:  # fmt: skip
    """The report of a run: ``eng``'s counters (either engine's), the rows written."""
    obs = plan.out_obs
    # The input samples past the last whole output sample (with dm: also the filter's
    # head and the samples its overlap held back).
    used = plan.first_input + eng.samples_out * plan.span
    return FilterbankReport(
        output=path, file_format=file_format, samples_in=eng.samples_in, lost_in=eng.lost_in,
        samples_out=samples, lost_out=eng.lost_out, rows=rows, rows_zero_weight=dead,
        not_written=max(0, eng.samples_in - used), clipped=clipped,
        nchans=plan.nchan_out, nifs=plan.npol_out, nbits=plan.settings.nbits,
        fch1_mhz=plan.fch1_mhz, foff_mhz=plan.foff_mhz, tsamp_s=plan.tsamp_s,
        tstart_mjd=obs.start_mjd, tstart_sec=obs.start_sec, fine_channels=plan.fine,
        spectra_per_sample=plan.nint, first_input_sample=plan.first_input,
        dm=plan.settings.dm,
    )  # fmt: skip


def run_filterbank(
    reader: BlockSource,
    plan: FilterbankPlan,
    path: str,
    file_format: str,
    history: str = "",
    progress: Callable[[int], None] | None = None,
    device: str = "cpu",
) -> FilterbankReport:
    """``reader`` through ``plan``'s filterbank (the NumPy reference, or the GPU engine
    for ``device`` "gpu") into the file ``path``; its report."""
    writer = open_writer(path, file_format, plan, history)
    eng: Any
    if device == "gpu":
        from voltstream.search.gpu_filterbank import GpuFilterbank

        eng = GpuFilterbank(plan)
    else:
        eng = FilterbankReference(plan)
    try:
        rows, dead, quant = make_filterbank(reader, plan, writer, progress, eng)
    finally:
        writer.close()
    return filterbank_report(path, file_format, plan, eng, rows, dead, writer.samples,
                             quant.clipped)  # fmt: skip
