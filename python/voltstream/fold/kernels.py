"""The fold path's CUDA kernels, each a Template and an Operation
(``voltstream.dsp.cuda``): unpack (``unpack.cu``), packed unpack
(``unpack_packed.cu``), real-sampled channels to complex baseband
(``real_to_complex.cu``), chirp multiply (``chirp.cu``), detect + fold (``fold.cu``).
Each is tested against its NumPy reference in ``tests/gpu/test_kernels.py``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from voltstream.dsp.cuda import Buffer, Operation, Template
from voltstream.dsp.packed import ENCODINGS, PackedLayout
from voltstream.errors import ConfigError

__all__ = [
    "ChirpOp",
    "ChirpTemplate",
    "FoldOp",
    "FoldTemplate",
    "PackedUnpackOp",
    "PackedUnpackTemplate",
    "RealToComplexOp",
    "RealToComplexTemplate",
    "UnpackOp",
    "UnpackTemplate",
]

# Sample encodings the unpack kernel reads, keyed by (numpy dtype, ndim).
SAMPLE_KINDS = {("int8", 2): 0, ("int16", 2): 1, ("float32", 2): 2, ("int8", 1): 3, ("int16", 1): 4}


class _FramingOp(Operation):
    """What both unpacks share (kernels/frame_tile.cuh): overlap-save frames of
    ``nfft`` samples, ``step`` apart, from a carry followed by this chunk's samples."""

    def __init__(self, template: Template, nfft: int, step: int) -> None:
        if not 0 < step <= nfft:
            raise ConfigError(f"unpack needs 0 < step <= nfft, got step {step}, nfft {nfft}")
        super().__init__(template)
        self.nfft, self.step = nfft, step

    def _check_frames(
        self, carry_len: int, nsamp_raw: int, nblock: int, out: Any, ncp: int
    ) -> None:
        if carry_len + nsamp_raw < (nblock - 1) * self.step + self.nfft:
            raise ConfigError("unpack was asked for more frames than the samples can fill")
        self.check(out=(out, Buffer(np.complex64, min_size=ncp * nblock * self.nfft)))


# --- unpack: (time, chan, pol[, re/im]) -> overlap-save frames (chan, pol, block, nfft)


class UnpackTemplate(Template):
    """Unpack + transpose + overlap-save framing for one sample encoding."""

    source = "unpack.cu"
    TILE_T = 32
    TILE_CP = 32

    def __init__(self, dtype: Any, ndim: int = 2) -> None:
        key = (np.dtype(dtype).name, int(ndim))
        if key not in SAMPLE_KINDS:
            raise ConfigError(
                f"the GPU unpack reads {sorted(SAMPLE_KINDS)} (dtype, ndim), not {key}; "
                "convert the data or use --device cpu"
            )
        self.dtype = np.dtype(dtype)
        self.ndim = int(ndim)
        self.kind = SAMPLE_KINDS[key]
        super().__init__({"SAMPLE_KIND": self.kind, "TILE_T": self.TILE_T, "TILE_CP": self.TILE_CP})

    def instantiate(self, ncp: int, nfft: int, step: int) -> UnpackOp:
        return UnpackOp(self, ncp, nfft, step)


class UnpackOp(_FramingOp):
    t: UnpackTemplate

    def __init__(self, template: UnpackTemplate, ncp: int, nfft: int, step: int) -> None:
        if ncp < 1:
            raise ConfigError(f"unpack needs at least one (chan, pol) pair, got ncp={ncp}")
        super().__init__(template, nfft, step)
        self.ncp = ncp

    def __call__(
        self, raw: Any, carry: Any, carry_len: int, out: Any, nblock: int, stream: Any = None
    ) -> None:
        """Frame ``carry[:carry_len]`` followed by ``raw`` into ``out`` (ncp, >= nblock, nfft)."""
        t = self.t
        nsamp_raw = raw.size // (self.ncp * t.ndim)
        self._check_frames(carry_len, nsamp_raw, nblock, out, self.ncp)
        self.check(raw=(raw, Buffer(t.dtype)), carry=(carry, Buffer(t.dtype)))
        tiles = -(-self.nfft // t.TILE_T)
        grid = (tiles * nblock, -(-self.ncp // t.TILE_CP))
        args: tuple[Any, ...] = (raw, carry, out, np.int32(self.ncp), np.int32(self.nfft))
        args += (np.int32(self.step),)
        args += (np.int32(nblock), np.int32(carry_len), np.int64(nsamp_raw))
        self.launch("unpack_frame", grid, (t.TILE_T * 8,), args, stream)


# --- unpack of packed codes (2/4-bit, offset-binary 8-bit) straight from the bytes


class PackedUnpackTemplate(Template):
    """Unpack of packed codes read through a ``PackedLayout``, and its carry kernel."""

    source = "unpack_packed.cu"
    VARIANTS = tuple(
        (("NBIT", b), ("ENCODING", e), ("NDIM", d))
        for b, e in ((2, 0), (2, 1), (2, 2), (4, 0), (4, 1), (8, 0), (8, 1))
        for d in (1, 2)
    )
    TILE_T = 32
    TILE_CP = 32
    CARRY_THREADS = 128

    def __init__(self, layout: PackedLayout) -> None:
        layout.check()
        self.layout = layout
        super().__init__(
            {
                "NBIT": layout.nbit,
                "ENCODING": ENCODINGS[layout.encoding],
                "NDIM": layout.ndim,
                "TILE_T": self.TILE_T,
                "TILE_CP": self.TILE_CP,
            }
        )

    def instantiate(self, nfft: int, step: int, carry_cap: int) -> PackedUnpackOp:
        return PackedUnpackOp(self, nfft, step, carry_cap)


class PackedUnpackOp(_FramingOp):
    """Frames ``carry[:carry_len]`` (decoded, (ncp, carry_cap)) then ``raw`` (bytes)."""

    t: PackedUnpackTemplate

    def __init__(
        self, template: PackedUnpackTemplate, nfft: int, step: int, carry_cap: int
    ) -> None:
        if carry_cap < 1:
            raise ConfigError(f"the packed unpack needs a carry, got carry_cap={carry_cap}")
        super().__init__(template, nfft, step)
        self.carry_cap = carry_cap
        L = template.layout
        self.ncp = L.nchan * L.npol
        self.layout_args = L.kernel_args()

    def _common(self, raw: Any, carry: Any, valid: Any, nsamp_raw: int) -> Any:
        """Checks the buffers both kernels read; the mask pointer (0: none)."""
        return _check_packed(self, raw, carry, np.complex64, valid, nsamp_raw)

    def __call__(self, raw: Any, nsamp_raw: int, carry: Any, carry_len: int, valid: Any,
                 out: Any, nblock: int, stream: Any = None) -> None:  # fmt: skip
        if carry_len > self.carry_cap:
            raise ConfigError(f"carry of {carry_len} samples exceeds its {self.carry_cap}")
        self._check_frames(carry_len, nsamp_raw, nblock, out, self.ncp)
        vptr = self._common(raw, carry, valid, nsamp_raw)
        t = self.t
        grid = (-(-self.nfft // t.TILE_T) * nblock, -(-self.ncp // t.TILE_CP))
        args: tuple[Any, ...] = (raw, carry, vptr, out) + self.layout_args[:-1]
        args += (np.int32(self.ncp), np.int32(self.nfft), np.int32(self.step), np.int32(nblock),
                 np.int32(self.carry_cap), np.int32(carry_len), np.int64(nsamp_raw))  # fmt: skip
        self.launch("unpack_packed_frame", grid, (t.TILE_T * 8,), args, stream)

    def carry_tail(self, raw: Any, nsamp_raw: int, carry: Any, carry_len: int, valid: Any,
                   nxt: Any, cut: int, new_len: int, stream: Any = None) -> None:  # fmt: skip
        """``nxt`` = stream samples ``cut .. cut + new_len`` of carry + raw, decoded."""
        _check_carry(self, nxt, np.complex64, "samples", carry_len, nsamp_raw, cut, new_len)
        vptr = self._common(raw, carry, valid, nsamp_raw)
        _launch_carry(self, (raw, carry, vptr, nxt), carry_len, nsamp_raw, cut, new_len, stream)


def _check_carry(op: Any, nxt: Any, dtype: Any, unit: str, carry_len: int, nsamp_raw: int,
                 cut: int, new_len: int) -> None:  # fmt: skip
    """A carry tail (``new_len`` of ``unit`` from ``cut`` of carry + raw) that fits the
    op's carry and the stream, into an ``nxt`` of ``dtype`` large enough."""
    if new_len > op.carry_cap or cut + new_len > carry_len + nsamp_raw:
        raise ConfigError(f"carry of {new_len} {unit} from {cut} does not fit or exceeds "
                          "the stream")  # fmt: skip
    op.check(nxt=(nxt, Buffer(dtype, min_size=op.ncp * op.carry_cap)))


def _launch_carry(op: Any, buffers: tuple[Any, ...], carry_len: int, nsamp_raw: int, cut: int,
                  new_len: int, stream: Any) -> None:  # fmt: skip
    """The packed decoders' ``carry_tail`` kernel (unpack_packed.cu, real_to_complex.cu:
    the same arguments): ``buffers`` = (raw, carry, valid pointer, nxt)."""
    if new_len <= 0:
        return
    nt = op.t.CARRY_THREADS
    args: tuple[Any, ...] = buffers + op.layout_args
    args += (np.int32(op.carry_cap), np.int32(carry_len), np.int64(nsamp_raw),
             np.int64(cut), np.int32(new_len))  # fmt: skip
    op.launch("carry_tail", (-(-new_len // nt), op.ncp), (nt,), args, stream)


# --- real-sampled channels to complex baseband, from the packed bytes

# (NBIT, ENCODING) pairs the packed kernels read; pairs of channel x pol per block.
_PACKED_CODES = ((2, 0), (2, 1), (2, 2), (4, 0), (4, 1), (8, 0), (8, 1))
_R2C_TILES = (4, 8, 16, 32)


class RealToComplexTemplate(Template):
    """``dsp/real.py`` ``RealToComplex`` on the GPU for one packed real layout: the
    down-converter and its carry kernel (``real_to_complex.cu``)."""

    source = "real_to_complex.cu"
    TILES = _R2C_TILES
    VARIANTS = tuple(
        (("NBIT", b), ("ENCODING", e), ("TAPS", 65), ("TILE_CP", t))
        for b, e in _PACKED_CODES
        for t in _R2C_TILES
    )
    THREADS = 256
    CARRY_THREADS = 64

    def __init__(self, layout: PackedLayout, taps: int = 65) -> None:
        layout.check()
        if layout.ndim != 1:
            raise ConfigError("the real-to-complex kernel reads real samples (ndim 1)")
        if taps % 4 != 1:
            raise ConfigError(f"taps={taps}: use 4k + 1 (an even delay in output samples)")
        self.layout, self.taps = layout, taps
        ncp = layout.nchan * layout.npol
        # Pairs per block: no more than the data have (a block of 4 channels x 2 pols
        # uses all its threads), up to 32.
        self.tile_cp = next((t for t in self.TILES if t >= ncp), self.TILES[-1])
        self.tile_k = 2048 // self.tile_cp
        super().__init__({"NBIT": layout.nbit, "ENCODING": ENCODINGS[layout.encoding],
                          "TAPS": taps, "TILE_CP": self.tile_cp})  # fmt: skip

    def instantiate(self, carry_cap: int) -> RealToComplexOp:
        return RealToComplexOp(self, carry_cap)


class RealToComplexOp(Operation):
    """Complex outputs from ``carry[:carry_len]`` (decoded real, (ncp, carry_cap)
    float32) followed by ``raw`` (packed real values in the template's layout)."""

    t: RealToComplexTemplate

    def __init__(self, template: RealToComplexTemplate, carry_cap: int) -> None:
        if carry_cap < template.taps - 1:
            raise ConfigError(f"the carry holds {template.taps - 1} inputs, got {carry_cap}")
        super().__init__(template)
        self.carry_cap = carry_cap
        L = template.layout
        self.ncp = L.nchan * L.npol
        self.layout_args = L.kernel_args()

    def _common(self, raw: Any, carry: Any, valid: Any, nsamp_raw: int, carry_len: int) -> Any:
        if not 0 <= carry_len <= self.carry_cap:
            raise ConfigError(f"carry of {carry_len} inputs exceeds its {self.carry_cap}")
        return _check_packed(self, raw, carry, np.float32, valid, nsamp_raw)

    def __call__(self, raw: Any, nsamp_raw: int, carry: Any, carry_len: int, valid: Any,
                 signed_taps: Any, out: Any, nout: int, start: int, out_valid: Any = None,
                 stream: Any = None) -> None:  # fmt: skip
        """Outputs 0 .. nout - 1 into ``out`` ((nout, ncp) complex64 as float32 pairs);
        ``start``: the stream index of the carry's first input (even);
        ``signed_taps``: :func:`voltstream.fold.gpu_real.signed_taps` on the GPU."""
        t = self.t
        if start % 2:
            raise ConfigError(f"the converter consumes inputs in pairs: start {start} is odd")
        if nout > 0 and 2 * (nout - 1) + t.taps > carry_len + nsamp_raw:
            raise ConfigError(f"{nout} outputs need more inputs than carry + chunk hold")
        vptr = self._common(raw, carry, valid, nsamp_raw, carry_len)
        self.check(
            signed_taps=(signed_taps, Buffer(np.float32, (t.taps,))),
            out=(out, Buffer(np.float32, min_size=2 * self.ncp * nout)),
            out_valid=(out_valid, Buffer(np.uint8, min_size=nout)),
        )
        if nout <= 0:
            return
        grid = (-(-nout // t.tile_k), -(-self.ncp // t.tile_cp))
        args: tuple[Any, ...] = (raw, carry, vptr, signed_taps, out,
                                 out_valid if out_valid is not None else 0)  # fmt: skip
        args += self.layout_args
        args += (np.int32(self.carry_cap), np.int32(carry_len), np.int64(nsamp_raw),
                 np.int32(nout), np.int32(start % 4))  # fmt: skip
        block = (t.tile_cp, t.THREADS // t.tile_cp)
        self.launch("real_to_complex", grid, block, args, stream)

    def carry_tail(self, raw: Any, nsamp_raw: int, carry: Any, carry_len: int, valid: Any,
                   nxt: Any, cut: int, new_len: int, stream: Any = None) -> None:  # fmt: skip
        """``nxt`` = inputs ``cut .. cut + new_len`` of carry + raw, decoded."""
        _check_carry(self, nxt, np.float32, "inputs", carry_len, nsamp_raw, cut, new_len)
        vptr = self._common(raw, carry, valid, nsamp_raw, carry_len)
        _launch_carry(self, (raw, carry, vptr, nxt), carry_len, nsamp_raw, cut, new_len, stream)


# --- chirp multiply, in place on the spectra


class ChirpTemplate(Template):
    source = "chirp.cu"

    def instantiate(self, nchan: int, npol: int, nfft: int) -> ChirpOp:
        if nfft % 2 or nfft < 2:
            raise ConfigError(f"the chirp kernel works on pairs of bins: nfft {nfft} must be even")
        return ChirpOp(self, nchan, npol, nfft)


class ChirpOp(Operation):
    def __init__(self, template: ChirpTemplate, nchan: int, npol: int, nfft: int) -> None:
        super().__init__(template)
        self.nchan, self.npol, self.nfft = nchan, npol, nfft

    def __call__(self, spec: Any, chirp: Any, nblock: int, stream: Any = None) -> None:
        """``spec`` (nchan, npol, nblock*, nfft) *= ``chirp`` (nchan, nfft), complex64."""
        rows_per_chan = self.npol * nblock
        npairs = self.nchan * rows_per_chan * self.nfft // 2
        self.check(
            chirp=(chirp, Buffer(np.complex64, (self.nchan, self.nfft))),
            spec=(spec, Buffer(np.complex64, min_size=2 * npairs)),
        )
        threads = 256
        blocks = int(min(-(-npairs // threads), 132 * 32))
        args = (spec, chirp, np.int32(self.nfft // 2), np.int64(rows_per_chan), np.int64(npairs))
        self.launch("chirp_multiply", (blocks,), (threads,), args, stream)


# --- overlap discard + detection + folding

FOLD_MODES = {("AA+BB", "linear"): 0, ("AA+BB", "circular"): 0, ("AABBCRCI", "linear"): 1}
FOLD_MODES.update({("AABBCRCI", "circular"): 1, ("IQUV", "linear"): 2, ("IQUV", "circular"): 3})


class FoldTemplate(Template):
    """Detect + fold for one polarisation layout and detection mode."""

    source = "fold.cu"
    VARIANTS = tuple(
        (("NPOL", p), ("MODE", m), ("MIN_BLOCKS", b))
        for p, m in ((1, 0), (2, 0), (2, 1), (2, 2), (2, 3))
        for b in (1, 5, 6)
    )
    KNOT_LOG2 = 12
    # __launch_bounds__ minimum blocks per SM (fold.cu's MIN_BLOCKS); the
    # benchmark's --fold-min-blocks compares values (docs/benchmarks.md).
    MIN_BLOCKS = 6
    THREADS = 256
    SAMPLES_PER_BLOCK = 16384
    MAX_SMEM = 160 * 1024

    def __init__(self, npol: int, mode: str = "AA+BB", basis: str = "linear") -> None:
        if (mode, basis) not in FOLD_MODES:
            raise ConfigError(
                f"unknown detection {mode!r}/{basis!r}: use AA+BB, AABBCRCI or IQUV with "
                "basis linear or circular"
            )
        if npol not in (1, 2) or (npol == 1 and mode != "AA+BB"):
            raise ConfigError(f"{mode} needs 2 polarisations, the data have {npol}: use AA+BB")
        self.npol, self.mode = npol, mode
        self.npol_out = 1 if mode == "AA+BB" else 4
        super().__init__(
            {
                "NPOL": npol,
                "MODE": FOLD_MODES[mode, basis],
                "KNOT_LOG2": self.KNOT_LOG2,
                "MIN_BLOCKS": self.MIN_BLOCKS,
            }
        )

    @property
    def knot(self) -> int:
        return 1 << self.KNOT_LOG2

    def nknot(self, nout: int) -> int:
        """Knots (phase samples) per channel needed for ``nout`` output samples."""
        return ((max(nout, 1) - 1) >> self.KNOT_LOG2) + 2

    def instantiate(self, nchan: int, nbin: int, nfft: int, head: int, step: int) -> FoldOp:
        smem = 4 * nbin * (self.npol_out + 1)
        if nbin < 2 or smem > self.MAX_SMEM:
            raise ConfigError(
                f"the GPU folder holds {self.MAX_SMEM // (4 * (self.npol_out + 1))} bins at "
                f"most for {self.mode}; got nbin={nbin}: use fewer bins or --device cpu"
            )
        if not (0 <= head and head + step <= nfft and step > 0):
            raise ConfigError(f"fold needs head + step <= nfft, got {head} + {step} > {nfft}")
        if smem > 48 * 1024:
            self.kernel("detect_fold").max_dynamic_shared_size_bytes = smem
        return FoldOp(self, nchan, nbin, nfft, head, step, smem)


class FoldOp(Operation):
    t: FoldTemplate

    def __init__(
        self, template: FoldTemplate, nchan: int, nbin: int, nfft: int, head: int, step: int,
        smem: int,
    ) -> None:  # fmt: skip
        super().__init__(template)
        self.nchan, self.nbin = nchan, nbin
        self.nfft, self.head, self.step, self.smem = nfft, head, step, smem

    def __call__(
        self,
        ts: Any,
        nblock: int,
        knots: Any,
        delay: Any,
        acc: Any,
        hits: Any,
        offered: Any,
        first: int,
        tsamp_s: float,
        tsub_s: float | None,
        valid: Any = None,
        stream: Any = None,
    ) -> None:
        """Fold the valid middle of ``nblock`` frames of ``ts`` into acc/hits/offered."""
        t = self.t
        nout = nblock * self.step
        nsub_cap = acc.shape[0]
        self.check(
            knots=(knots, Buffer(np.float64, (self.nchan, t.nknot(nout)))),
            delay=(delay, Buffer(np.float64, (self.nchan,))),
            acc=(acc, Buffer(np.float64, (nsub_cap, t.npol_out, self.nchan, self.nbin))),
            hits=(hits, Buffer(np.uint32, (nsub_cap, self.nchan, self.nbin))),
            offered=(offered, Buffer(np.uint64, (nsub_cap, self.nchan))),
            ts=(ts, Buffer(np.complex64, min_size=self.nchan * t.npol * nblock * self.nfft)),
            valid=(valid, Buffer(np.uint8, (nout,))),
        )
        spb = t.SAMPLES_PER_BLOCK
        # Mirrors the kernel's split: whole frames per block, or segments of one.
        if self.step >= spb:
            nx = nblock * -(-self.step // spb)
        else:
            nx = -(-nblock // (spb // self.step))
        args = (
            ts,
            valid if valid is not None else knots,  # any pointer; unused
            knots,
            delay,
            acc,
            hits,
            offered,
            np.int32(self.nchan),
            np.int32(nblock),
            np.int32(self.nfft),
            np.int32(self.head),
            np.int32(self.step),
            np.int32(knots.shape[1]),
            np.int32(self.nbin),
            np.int32(nsub_cap),
            np.int32(valid is not None),
            np.int32(spb),
            np.int64(first),
            np.float64(tsamp_s),
            np.float64(tsub_s if tsub_s else np.inf),
        )
        self.launch("detect_fold", (nx, self.nchan), (t.THREADS,), args, stream, self.smem)


def _check_packed(op: Any, raw: Any, carry: Any, carry_dtype: Any, valid: Any,
                  nsamp_raw: int) -> Any:  # fmt: skip
    """The buffers a packed kernel reads (its packed bytes, its decoded carry, the
    validity mask), checked; the mask pointer (0: none)."""
    if raw.size < op.t.layout.nbytes(nsamp_raw):
        raise ConfigError(f"{raw.size} bytes cannot hold {nsamp_raw} packed samples")
    op.check(
        raw=(raw, Buffer(np.uint8)),
        carry=(carry, Buffer(carry_dtype, min_size=op.ncp * op.carry_cap)),
        valid=(valid, Buffer(np.uint8, min_size=nsamp_raw)),
    )
    return valid if valid is not None else 0
