"""Real-sampled channels in the GPU fold: packed real chunks become complex baseband
on the GPU before the fold's complex path, equal to ``dsp/real.py`` ``RealToComplex``.

Most VLBI digitisers (DBBC3, R2DBE, RDBE) send real samples; coherent dedispersion
needs complex channels. A ``GpuFolder`` built with a real :class:`PackedLayout`
(``ndim`` 1) and the complex observation (``dsp.real.complex_observation``: half the
sample rate, the filter's delay off the start) runs, per chunk of ``n`` real inputs
(a capture chunk, a file block, a gap):

    packed bytes --real_to_complex.cu--> (nout, chan, pol) complex64 --> unpack.cu
    (float32 complex) --> FFT, chirp, inverse FFT, fold as for complex data

Host side, without CuPy: :class:`RealCarry`, the converter's bookkeeping across
chunks (how many inputs it carries, the mixer's phase on the stream's one time line,
which outputs a lost input touched), and :func:`signed_taps`. GPU side:
:class:`RealFront`, the kernel with its decoded carry and output buffer.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from voltstream.dsp.packed import PackedLayout
from voltstream.dsp.real import TAPS, halfband_lowpass
from voltstream.errors import ConfigError

__all__ = ["RealCarry", "RealFront", "RealStep", "signed_taps"]


def signed_taps(taps: int = TAPS) -> np.ndarray:
    """``RealToComplex``'s float32 taps times the mixer's sign pattern (``j % 4``: 0 +,
    1 +, 2 -, 3 -) that real_to_complex.cu sums with (see its header)."""
    h = halfband_lowpass(taps).astype(np.float32)
    return h * np.array([1, 1, -1, -1], dtype=np.float32)[np.arange(taps) % 4]


@dataclass(frozen=True)
class RealStep:
    """What the converter does with one chunk of ``n_in`` real inputs."""

    n_in: int
    carry_len: int  # inputs carried in front of the chunk
    start: int  # stream index of the first of them (even: inputs go in pairs)
    nout: int  # complex outputs made: output k from inputs 2k .. 2k + taps - 1
    new_len: int  # inputs carried on, from index 2 nout of carry + chunk
    out_valid: np.ndarray | None  # False: the output's span touched a lost input


class RealCarry:
    """``RealToComplex.read_blocks``' bookkeeping, chunk by chunk, for the GPU: it
    carries the inputs that the next outputs still need (at most ``taps - 1``) and
    their validity, and counts inputs for the mixer's phase."""

    def __init__(self, taps: int = TAPS) -> None:
        if taps % 4 != 1:
            raise ConfigError(f"taps={taps}: use 4k + 1 (an even delay in output samples)")
        self.taps = taps
        self.carry_len = 0
        self.carry_ok = np.ones(0, dtype=bool)
        self.n_in = 0  # inputs seen so far, gaps included

    @staticmethod
    def max_out(n: int) -> int:
        """The most outputs a chunk of ``n`` inputs makes (the carry holds < taps)."""
        return (n + 1) // 2

    def step(self, valid: np.ndarray | None, n: int) -> RealStep:
        """The next chunk: ``n`` inputs, ``valid`` one bool each (None: all there)."""
        taps, carry_len = self.taps, self.carry_len
        total = carry_len + n
        nout = max(0, (total - (taps - 1) + 1) // 2)
        start = self.n_in - carry_len
        if start % 2:
            raise AssertionError("the converter consumes inputs in pairs")
        out_valid = None
        if valid is None and self.carry_ok.all():
            tail_ok = np.ones(total - 2 * nout, dtype=bool)
        else:
            ok = np.ones(n, dtype=bool) if valid is None else np.asarray(valid, bool).reshape(n)
            ok = np.concatenate([self.carry_ok, ok])
            if nout:
                # Output k is lost when any of inputs 2k .. 2k + taps - 1 is.
                bad = np.concatenate([[0], np.cumsum(~ok[: 2 * (nout - 1) + taps])])
                k2 = 2 * np.arange(nout)
                ov = bad[k2 + taps] == bad[k2]
                out_valid = None if ov.all() else ov
            tail_ok = ok[2 * nout :].copy()
        self.carry_ok, self.carry_len = tail_ok, total - 2 * nout
        self.n_in += n
        return RealStep(n, carry_len, start, nout, self.carry_len, out_valid)


class RealFront:
    """The GPU half: ``real_to_complex.cu`` for one packed real layout, with its decoded
    carry (two buffers, taking turns) and the complex chunk it writes for the fold.
    Every call queues on the stream it is given (the fold's compute stream)."""

    def __init__(self, cp: Any, layout: PackedLayout, chunk: int, taps: int = TAPS) -> None:
        import cupyx

        from voltstream.fold.kernels import RealToComplexTemplate

        self.cp = cp
        self.op = RealToComplexTemplate(layout, taps).instantiate(taps - 1)
        self.ncp = layout.nchan * layout.npol
        self.carry = RealCarry(taps)
        self.max_out = RealCarry.max_out(chunk)
        self.taps_d = cp.asarray(signed_taps(taps))
        self.carry_d = [cp.zeros(self.ncp * (taps - 1), dtype=np.float32) for _ in range(2)]
        self.cur = 0
        self.out = cp.empty(2 * self.ncp * max(1, self.max_out), dtype=np.float32)
        self.pin_valid = [cupyx.empty_pinned((max(1, self.max_out),), np.uint8) for _ in range(2)]
        self.dev_valid = [cp.empty(max(1, self.max_out), dtype=np.uint8) for _ in range(2)]

    def upload_valid(self, kslot: int, step: RealStep, stream: Any) -> Any:
        """The outputs' validity on the GPU (None: all valid), copied on ``stream``; the
        slot's pinned buffer must be free (its last copy done)."""
        if step.out_valid is None:
            return None
        n = step.nout
        self.pin_valid[kslot][:n] = step.out_valid
        dev = self.dev_valid[kslot][:n]
        dev.data.copy_from_host_async(self.pin_valid[kslot].ctypes.data, n, stream)
        return dev

    def convert(self, raw: Any, mask: Any, step: RealStep, out_valid: Any, stream: Any) -> Any:
        """Queues the chunk's conversion and the next carry; returns the outputs as the
        fold's float32 complex samples, flat ((nout, chan, pol, re/im))."""
        carry, nxt = self.carry_d[self.cur], self.carry_d[1 - self.cur]
        self.op(raw, step.n_in, carry, step.carry_len, mask, self.taps_d, self.out, step.nout,
                step.start, out_valid, stream)  # fmt: skip
        self.op.carry_tail(raw, step.n_in, carry, step.carry_len, mask, nxt, 2 * step.nout,
                           step.new_len, stream)  # fmt: skip
        self.cur = 1 - self.cur
        return self.out[: 2 * self.ncp * step.nout]
