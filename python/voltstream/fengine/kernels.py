"""The F-engine's CUDA kernels (``dsp/kernels/fengine.cu``) as a Template and an
Operation (``voltstream.dsp.cuda``): ``pfb_fir`` reads packed digitiser samples and
writes the FIR output; ``postprocess`` applies fine delay, phase, gain and dither,
quantises and transposes into heap order. ``tests/gpu/test_fengine_gpu.py`` holds
them to ``FEngineReference``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from voltstream.digitiser import SAMPLE_BITS, check_bits
from voltstream.dsp.cuda import Buffer, Operation, Template
from voltstream.errors import ConfigError
from voltstream.fengine.plan import NPOL

__all__ = ["FEngineOp", "FEngineTemplate"]


#: Output sample widths the F-engine quantises to (bits per real/imag part).
OUT_BITS = (8, 4)


class FEngineTemplate(Template):
    """fengine.cu for one (input bits, taps, output bits)."""

    source = "fengine.cu"
    FIR_THREADS = 128
    VARIANTS = tuple(
        (("IN_BITS", b), ("TAPS", t), ("OUT_BITS", o))
        for b in SAMPLE_BITS
        for t in (1, 16)
        for o in OUT_BITS
    )

    def __init__(self, sample_bits: int, taps: int, out_bits: int) -> None:
        check_bits(sample_bits)
        if out_bits not in OUT_BITS:
            raise ConfigError(f"output sample width {out_bits}: use 8 or 4")
        self.sample_bits, self.taps, self.out_bits = int(sample_bits), int(taps), int(out_bits)
        super().__init__({"IN_BITS": sample_bits, "TAPS": taps, "OUT_BITS": out_bits})

    def instantiate(self, nchan: int) -> FEngineOp:
        if nchan < 2 or nchan % 2:
            raise ConfigError(f"the F-engine kernels take an even channel count, not {nchan}")
        return FEngineOp(self, nchan)


class FEngineOp(Operation):
    """Both kernels for ``nchan`` channels (rows of ``2 * nchan`` samples)."""

    t: FEngineTemplate

    def __init__(self, template: FEngineTemplate, nchan: int) -> None:
        super().__init__(template)
        self.nchan = nchan
        self.step = 2 * nchan

    def fir(self, raw: Any, starts: Any, weights: Any, out: Any, stream: Any = None) -> None:
        """FIR of packed ``raw`` (2, bytes) at ``starts`` (2, nspec) into ``out`` (2, nspec, n)."""
        n, nspec = self.step, starts.shape[1]
        self.check(
            starts=(starts, Buffer(np.int64, (NPOL, nspec))),
            weights=(weights, Buffer(np.float32, (self.t.taps * n,))),
            out=(out, Buffer(np.float32, (NPOL, nspec, n))),
            raw=(raw, Buffer(np.uint8)),
        )
        if nspec == 0:
            return
        if raw.strides[1] != 1 or raw.strides[0] % 16 or n % 4:
            raise ConfigError("packed input rows must be contiguous and 16-byte aligned")
        # Enough threads to fill the GPU (four columns each), each sliding over a
        # run of spectra.
        seg = int(min(64, max(self.t.taps, nspec * (n // 4) * 2 // (1 << 19))))
        threads = self.t.FIR_THREADS
        grid = (-(-(n // 4) // threads), -(-nspec // seg), NPOL)
        args: tuple[Any, ...] = (raw, np.int64(raw.strides[0]), starts, weights, out)
        args += (np.int32(n), np.int32(nspec), np.int32(seg))
        self.launch("pfb_fir", grid, (threads,), args, stream)

    @staticmethod
    def rotation(tau: np.ndarray, phi: np.ndarray, chan_hz: float) -> np.ndarray:
        """Per-spectrum rotation parameters for ``post``: float32 ``(..., 2)``.

        ``(phi / 2 pi reduced to [-0.5, 0.5), chan_hz * tau)`` in cycles, computed in
        float64 so the kernel's float32 ``x - c * y`` stays exact to ~1e-7 cycles.
        """
        cyc = np.asarray(phi, dtype=np.float64) / (2 * np.pi)
        cyc -= np.rint(cyc)
        step = chan_hz * np.asarray(tau, dtype=np.float64)
        return np.stack([cyc, step], axis=-1).astype(np.float32)

    def post(
        self,
        spec: Any,
        rot: Any,
        gains: Any,
        slots: Any,
        slot_ids: Any,
        out: Any,
        sat: Any,
        dither_key: int | None,
        stream: Any = None,
    ) -> None:
        """Post-process the slots listed in ``slots`` into ``out (nsend, nchan, sph, ...)``."""
        nsend = int(slots.shape[0])
        nchan, sph = out.shape[1], out.shape[2]
        total = rot.shape[1]
        per_value = (2, 2) if self.t.out_bits == 8 else (2,)
        self.check(
            spec=(spec, Buffer(np.complex64, (NPOL, total, nchan + 1))),
            rot=(rot, Buffer(np.float32, (NPOL, total, 2))),
            gains=(gains, Buffer(np.complex64, (NPOL, nchan))),
            slots=(slots, Buffer(np.int32, (nsend,))),
            slot_ids=(slot_ids, Buffer(np.int64, (nsend,))),
            out=(
                out,
                Buffer(
                    np.int8 if self.t.out_bits == 8 else np.uint8,
                    (nsend, self.nchan, sph, *per_value),
                ),
            ),  # fmt: skip
            sat=(sat, Buffer(np.uint64, (nsend, NPOL))),
        )
        if nsend == 0:
            return
        grid = (-(-nchan // 32), -(-sph // 32), nsend)
        args: tuple[Any, ...] = (spec, rot, gains, slots, slot_ids, out, sat, np.int32(nchan))
        args += (np.int32(sph),)
        args += (np.int64(total),)
        args += (
            np.uint64(0 if dither_key is None else dither_key),
            np.int32(dither_key is not None),
        )
        self.launch("postprocess", grid, (32, 8), args, stream)
