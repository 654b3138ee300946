"""The search filterbank's CUDA kernels (``dsp/kernels/filterbank.cu``), each a
Template and an Operation (``voltstream.dsp.cuda``): the stream gather (carry + a
chunk's new samples into whole output samples) and detect + integrate. The unpack,
chirp and FFTs before them are the fold's (``fold/kernels.py``, cuFFT). Each is
tested against the NumPy reference through the engine in
``tests/gpu/test_filterbank_gpu.py``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from voltstream.dsp.cuda import Buffer, Operation, Template
from voltstream.errors import ConfigError

__all__ = ["DETECT_MODES", "DetectOp", "FilterbankTemplate", "GatherOp"]

#: The plan's detection (search/filterbank.py POLS: dsp.detect mode, None = AABB) to
#: the kernel's MODE.
DETECT_MODES = {"AA+BB": 0, None: 1, "IQUV": 2}


class FilterbankTemplate(Template):
    """Both filterbank kernels for one polarisation count and detection."""

    source = "filterbank.cu"
    VARIANTS = ((("NPOL", 1), ("MODE", 0)), (("NPOL", 2), ("MODE", 0)),
                (("NPOL", 2), ("MODE", 1)), (("NPOL", 2), ("MODE", 2)))  # fmt: skip
    THREADS = 256

    def __init__(self, npol: int, mode: str | None) -> None:
        if mode not in DETECT_MODES:
            raise ConfigError(f"unknown filterbank detection {mode!r}: use AA+BB, AABB or IQUV")
        if npol not in (1, 2) or (npol == 1 and mode != "AA+BB"):
            raise ConfigError(f"{mode or 'AABB'} needs 2 polarisations, the data have {npol}")
        self.npol, self.mode = npol, mode
        self.npol_out = {0: 1, 1: 2, 2: 4}[DETECT_MODES[mode]]
        super().__init__({"NPOL": npol, "MODE": DETECT_MODES[mode]})

    def gather(self, ncp: int, cap: int) -> GatherOp:
        return GatherOp(self, ncp, cap)

    def detect(self, nchan: int, m: int, nint: int) -> DetectOp:
        return DetectOp(self, nchan, m, nint)


class GatherOp(Operation):
    """Carry (ncp, cap) + new samples -> ``out`` (ncp, nout) and ``next`` (ncp, cap)."""

    t: FilterbankTemplate

    def __init__(self, template: FilterbankTemplate, ncp: int, cap: int) -> None:
        if ncp < 1 or cap < 1:
            raise ConfigError(f"the gather needs ncp >= 1 and a carry, got {ncp}, {cap}")
        super().__init__(template)
        self.ncp, self.cap = ncp, cap

    def __call__(self, frames: Any, nfft: int, head: int, step: int, nblock: int, nsrc: int,
                 carry: Any, carry_len: int, nxt: Any, out: Any, nout: int,
                 stream: Any = None) -> None:  # fmt: skip
        """``frames`` None: the ``nsrc`` new samples are a gap (zeros)."""
        total = carry_len + nsrc
        if not (0 <= nout <= total and total - nout <= self.cap and carry_len <= self.cap):
            raise ConfigError(f"gather of {carry_len} + {nsrc} samples into {nout} and a carry "
                              f"of {self.cap} does not fit")  # fmt: skip
        if frames is not None and (nsrc > nblock * step or head + step > nfft):
            raise ConfigError(f"{nsrc} new samples exceed {nblock} frames of {step}")
        cb = Buffer(np.complex64, min_size=self.ncp * self.cap)
        self.check(
            carry=(carry, cb), nxt=(nxt, cb),
            out=(out, Buffer(np.complex64, min_size=self.ncp * nout)),
            frames=(frames, Buffer(np.complex64, min_size=self.ncp * nblock * nfft)),
        )  # fmt: skip
        if total == 0:
            return
        nt = self.t.THREADS
        args = (frames if frames is not None else out, np.int32(nfft), np.int32(head),
                np.int32(max(step, 1)), np.int32(nblock), np.int32(frames is None),
                np.int64(nsrc), carry, np.int32(carry_len), nxt, np.int32(self.cap), out,
                np.int64(nout))  # fmt: skip
        self.launch("gather_stream", (-(-total // nt), self.ncp), (nt,), args, stream)


class DetectOp(Operation):
    """``spec`` (ncp, k * nint, m) -> ``out`` (k, npol_out, nchan * m) float32."""

    t: FilterbankTemplate

    def __init__(self, template: FilterbankTemplate, nchan: int, m: int, nint: int) -> None:
        super().__init__(template)
        self.nchan, self.m, self.nint = nchan, m, nint

    def __call__(self, spec: Any, k: int, out: Any, stream: Any = None) -> None:
        t = self.t
        nout_chan = self.nchan * self.m
        nspec = self.nchan * t.npol * k * self.nint * self.m
        self.check(
            spec=(spec, Buffer(np.complex64, min_size=nspec)),
            out=(out, Buffer(np.float32, min_size=k * t.npol_out * nout_chan)),
        )  # fmt: skip
        if k == 0:
            return
        nt = t.THREADS
        args = (spec, out, np.int32(self.nchan), np.int32(self.m), np.int32(self.nint),
                np.int32(k), np.float32(1.0 / self.m))  # fmt: skip
        self.launch("detect_integrate", (k, -(-nout_chan // nt)), (nt,), args, stream)
