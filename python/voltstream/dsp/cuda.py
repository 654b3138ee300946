"""CUDA kernels of the GPU fold path: one cached NVRTC loader, and per kernel a
Template (checks parameters, compiles once) and an Operation (typed buffers,
launch on a stream).

The sources live in ``dsp/kernels/*.cu``; each compiles on its own with the
options in :data:`NVRTC_OPTIONS` and defaults for its ``-D`` parameters, which
is what ``scripts/check_kernels.py`` (CI, no GPU) does with the PyPI NVRTC.
CuPy is imported inside functions only, so this module imports on machines
without it.
"""

from __future__ import annotations

import functools
import threading
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from voltstream.errors import ConfigError, VoltstreamError

__all__ = [
    "KERNEL_DIR",
    "KERNEL_VARIANTS",
    "NVRTC_OPTIONS",
    "PackedLayout",
    "PackedUnpackTemplate",
    "ChirpTemplate",
    "FoldTemplate",
    "GpuError",
    "UnpackTemplate",
    "cupy_module",
    "kernel_sources",
    "launch",
    "load_module",
]

KERNEL_DIR = Path(__file__).with_name("kernels")

# Shared by the runtime loader and the CI compile check. No fast-math: the fold
# kernel keeps the pulse phase in float64 and the detection in IEEE float32.
NVRTC_OPTIONS: tuple[str, ...] = ("--std=c++17",)

# -D sets the runtime compiles besides each file's defaults, so that CI's NVRTC
# check (scripts/check_kernels.py) builds every variant a GPU run can ask for.
KERNEL_VARIANTS: dict[str, tuple[tuple[tuple[str, int], ...], ...]] = {
    "fold.cu": tuple(
        (("NPOL", p), ("MODE", m), ("MIN_BLOCKS", b))
        for p, m in ((1, 0), (2, 0), (2, 1), (2, 2), (2, 3))
        for b in (1, 5, 6)
    ),
    "unpack_packed.cu": tuple(
        (("NBIT", b), ("ENCODING", e), ("NDIM", d))
        for b, e in ((2, 0), (2, 1), (2, 2), (4, 0), (4, 1), (8, 0), (8, 1))
        for d in (1, 2)
    ),
    "fengine.cu": tuple(
        (("IN_BITS", b), ("TAPS", t), ("OUT_BITS", o))
        for b in (8, 10, 12, 16)
        for t in (1, 16)
        for o in (8, 4)
    ),
}

# Sample encodings the unpack kernel reads, keyed by (numpy dtype, ndim).
SAMPLE_KINDS = {("int8", 2): 0, ("int16", 2): 1, ("float32", 2): 2, ("int8", 1): 3, ("int16", 1): 4}


class GpuError(VoltstreamError, RuntimeError):
    """The GPU path cannot run here (no CuPy, no device, a kernel failed to build)."""


def kernel_sources() -> list[Path]:
    """Every CUDA source of the package, sorted by name."""
    return sorted(KERNEL_DIR.glob("*.cu"))


def cupy_module():
    try:
        import cupy
    except ImportError as exc:
        raise GpuError(
            "the GPU path needs CuPy (pip install cupy-cuda12x or cupy-cuda13x) and an "
            "NVIDIA GPU; use --device cpu otherwise"
        ) from exc
    return cupy


def load_module(name: str, defines: tuple[tuple[str, int], ...] = ()):
    """Compile ``kernels/<name>`` once per process, option set and device; a CuPy RawModule.

    Keyed by the current device too: a loaded module belongs to one CUDA context,
    and the multi-GPU workers (dsp/gpu_workers.py) build engines on several.
    """
    cp = cupy_module()
    return _load_module(name, tuple(defines), cp.cuda.runtime.getDevice())


_LOAD_LOCK = threading.Lock()


@functools.cache
def _load_module(name: str, defines: tuple[tuple[str, int], ...], device: int):
    with _LOAD_LOCK:  # worker threads build their engines at the same time
        return _compile_module(name, defines)


def _compile_module(name: str, defines: tuple[tuple[str, int], ...]):
    cp = cupy_module()
    path = KERNEL_DIR / name
    if not path.is_file():
        raise GpuError(f"kernel source {path} is missing; reinstall voltstream")
    options = NVRTC_OPTIONS + tuple(f"-D{k}={int(v)}" for k, v in defines)
    module = cp.RawModule(code=path.read_text(), options=options)
    try:
        module.compile()
    except Exception as exc:  # CuPy raises its own CompileException with the log
        raise GpuError(f"NVRTC could not compile {name} with {options}: {exc}") from exc
    return module


def launch(kernel, grid, block, args, stream=None, shared_mem: int = 0) -> None:
    # RawKernel launches on the current stream; make ``stream`` current for it.
    if stream is None:
        kernel(grid, block, args, shared_mem=shared_mem)
    else:
        with stream:
            kernel(grid, block, args, shared_mem=shared_mem)


def _check(arr, dtype, shape, what: str):
    if arr.dtype != np.dtype(dtype) or tuple(arr.shape) != tuple(shape):
        raise ConfigError(
            f"{what} must be {np.dtype(dtype)} shaped {tuple(shape)}, "
            f"got {arr.dtype} {tuple(arr.shape)}"
        )
    if not arr.flags.c_contiguous:
        raise ConfigError(f"{what} must be C-contiguous")


# --- unpack: (time, chan, pol[, re/im]) -> overlap-save frames (chan, pol, block, nfft)


class UnpackTemplate:
    """Unpack + transpose + overlap-save framing for one sample encoding."""

    TILE_T = 32
    TILE_CP = 32

    def __init__(self, dtype, ndim: int = 2):
        key = (np.dtype(dtype).name, int(ndim))
        if key not in SAMPLE_KINDS:
            raise ConfigError(
                f"the GPU unpack reads {sorted(SAMPLE_KINDS)} (dtype, ndim), not {key}; "
                "convert the data or use --device cpu"
            )
        self.dtype = np.dtype(dtype)
        self.ndim = int(ndim)
        self.kind = SAMPLE_KINDS[key]
        mod = load_module(
            "unpack.cu",
            (("SAMPLE_KIND", self.kind), ("TILE_T", self.TILE_T), ("TILE_CP", self.TILE_CP)),
        )
        self.kernel = mod.get_function("unpack_frame")

    def instantiate(self, ncp: int, nfft: int, step: int) -> UnpackOp:
        if not (0 < step <= nfft) or ncp < 1:
            raise ConfigError(f"unpack needs 0 < step <= nfft and ncp >= 1, got {step}, {nfft}")
        return UnpackOp(self, ncp, nfft, step)


class UnpackOp:
    def __init__(self, template: UnpackTemplate, ncp: int, nfft: int, step: int):
        self.t, self.ncp, self.nfft, self.step = template, ncp, nfft, step

    def __call__(self, raw, carry, carry_len: int, out, nblock: int, stream=None):
        """Frame ``carry[:carry_len]`` followed by ``raw`` into ``out`` (ncp, >= nblock, nfft)."""
        t = self.t
        if raw.dtype != t.dtype or carry.dtype != t.dtype:
            raise ConfigError(f"unpack expects {t.dtype} samples, got {raw.dtype}/{carry.dtype}")
        nsamp_raw = raw.size // (self.ncp * t.ndim)
        if carry_len + nsamp_raw < (nblock - 1) * self.step + self.nfft:
            raise ConfigError("unpack was asked for more frames than the samples can fill")
        if out.dtype != np.complex64 or out.size < self.ncp * nblock * self.nfft:
            raise ConfigError("unpack output must be complex64 with room for every frame")
        tiles = -(-self.nfft // t.TILE_T)
        grid = (tiles * nblock, -(-self.ncp // t.TILE_CP))
        launch(
            t.kernel,
            grid,
            (t.TILE_T * 8,),
            (
                raw,
                carry,
                out,
                np.int32(self.ncp),
                np.int32(self.nfft),
                np.int32(self.step),
                np.int32(nblock),
                np.int32(carry_len),
                np.int64(nsamp_raw),
            ),
            stream,
        )


# --- unpack of packed codes (2/4-bit, offset-binary 8-bit) straight from the bytes

# Encodings of unpack_packed.cu, by name; see its header for what each means.
ENCODINGS = {"twos": 0, "offset": 1, "vdif2": 2}


@dataclass(frozen=True)
class PackedLayout:
    """Where sample (s, chan, pol, re/im) sits in a packed buffer, in values.

    ``value = (s // spf) * s_blk + (s % spf) * s_t + chan * s_c + pol * s_p + d``,
    each value ``nbit`` bits, least significant first. :meth:`time_major` is
    DADA's order; :meth:`vdif_frames` is VDIF's (each polarisation a thread of
    frames, frames of one time side by side).
    """

    nbit: int
    encoding: str
    ndim: int
    nchan: int
    npol: int
    spf: int
    s_blk: int
    s_t: int
    s_c: int
    s_p: int

    @classmethod
    def time_major(cls, nbit, encoding, nchan, npol, ndim):
        per = nchan * npol * ndim
        return cls(nbit, encoding, ndim, nchan, npol, 1, per, 0, npol * ndim, ndim)

    @classmethod
    def vdif_frames(cls, nbit, encoding, nchan, npol, ndim, spf):
        per_frame = spf * nchan * ndim
        return cls(nbit, encoding, ndim, nchan, npol, spf, npol * per_frame, nchan * ndim, ndim,
                   per_frame)  # fmt: skip

    def nbytes(self, nsamp: int) -> int:
        """Bytes up to and including the last value of sample ``nsamp - 1``."""
        if nsamp <= 0:
            return 0
        s = nsamp - 1
        last = (s // self.spf) * self.s_blk + (s % self.spf) * self.s_t
        last += (self.nchan - 1) * self.s_c + (self.npol - 1) * self.s_p + self.ndim - 1
        return -(-(last + 1) * self.nbit // 8)

    def check(self) -> None:
        if self.nbit not in (2, 4, 8) or self.encoding not in ENCODINGS or self.ndim not in (1, 2):
            raise ConfigError(
                f"the GPU unpack reads 2/4/8-bit {sorted(ENCODINGS)} real or complex values, "
                f"not {self.nbit}-bit {self.encoding!r} ndim={self.ndim}; use --device cpu"
            )
        if self.encoding == "vdif2" and self.nbit != 2:
            raise ConfigError("the VDIF level table is for 2-bit data")
        if self.spf == 1 and (self.nchan * self.npol * self.ndim * self.nbit) % 8:
            raise ConfigError(
                f"{self.nchan} channels x {self.npol} pols x {self.ndim} x {self.nbit} bits is "
                "not a whole number of bytes per sample; the GPU path needs byte-aligned "
                "samples in time-major data (use --device cpu)"
            )


class PackedUnpackTemplate:
    TILE_T = 32
    TILE_CP = 32
    CARRY_THREADS = 128

    def __init__(self, layout: PackedLayout):
        layout.check()
        self.layout = layout
        mod = load_module(
            "unpack_packed.cu",
            (
                ("NBIT", layout.nbit),
                ("ENCODING", ENCODINGS[layout.encoding]),
                ("NDIM", layout.ndim),
                ("TILE_T", self.TILE_T),
                ("TILE_CP", self.TILE_CP),
            ),
        )
        self.frame_kernel = mod.get_function("unpack_packed_frame")
        self.carry_kernel = mod.get_function("carry_tail")

    def instantiate(self, nfft: int, step: int, carry_cap: int) -> PackedUnpackOp:
        if not (0 < step <= nfft) or carry_cap < 1:
            raise ConfigError(f"unpack needs 0 < step <= nfft and a carry, got {step}, {nfft}")
        return PackedUnpackOp(self, nfft, step, carry_cap)


class PackedUnpackOp:
    """Frames ``carry[:carry_len]`` (decoded, (ncp, carry_cap)) then ``raw`` (bytes)."""

    def __init__(self, template: PackedUnpackTemplate, nfft: int, step: int, carry_cap: int):
        self.t, self.nfft, self.step, self.carry_cap = template, nfft, step, carry_cap
        L = template.layout
        self.ncp = L.nchan * L.npol
        self.layout_args = (
            np.int64(L.s_blk),
            np.int32(L.spf),
            np.int32(L.s_t),
            np.int32(L.s_c),
            np.int32(L.s_p),
            np.int32(L.npol),
            np.int32(self.ncp),
        )

    def _common(self, raw, carry, valid, nsamp_raw: int):
        if raw.dtype != np.uint8 or carry.dtype != np.complex64:
            raise ConfigError(f"packed unpack takes uint8 bytes and a complex64 carry, got "
                              f"{raw.dtype}/{carry.dtype}")  # fmt: skip
        if carry.size < self.ncp * self.carry_cap:
            raise ConfigError("the decoded carry must hold (ncp, carry_cap) samples")
        if raw.size < self.t.layout.nbytes(nsamp_raw):
            raise ConfigError(f"{raw.size} bytes cannot hold {nsamp_raw} packed samples")
        if valid is not None and (valid.dtype != np.uint8 or valid.size < nsamp_raw):
            raise ConfigError("the validity mask must be uint8 with one entry per sample")
        return valid if valid is not None else 0

    def __call__(self, raw, nsamp_raw: int, carry, carry_len: int, valid, out, nblock: int,
                 stream=None):  # fmt: skip
        if carry_len > self.carry_cap:
            raise ConfigError(f"carry of {carry_len} samples exceeds its {self.carry_cap}")
        if carry_len + nsamp_raw < (nblock - 1) * self.step + self.nfft:
            raise ConfigError("unpack was asked for more frames than the samples can fill")
        if out.dtype != np.complex64 or out.size < self.ncp * nblock * self.nfft:
            raise ConfigError("unpack output must be complex64 with room for every frame")
        vptr = self._common(raw, carry, valid, nsamp_raw)
        t = self.t
        grid = (-(-self.nfft // t.TILE_T) * nblock, -(-self.ncp // t.TILE_CP))
        args: tuple = (raw, carry, vptr, out) + self.layout_args[:-1]
        args += (np.int32(self.ncp), np.int32(self.nfft), np.int32(self.step), np.int32(nblock),
                 np.int32(self.carry_cap), np.int32(carry_len), np.int64(nsamp_raw))  # fmt: skip
        launch(t.frame_kernel, grid, (t.TILE_T * 8,), args, stream)

    def carry_tail(self, raw, nsamp_raw: int, carry, carry_len: int, valid, nxt, cut: int,
                   new_len: int, stream=None):  # fmt: skip
        """``nxt`` = stream samples ``cut .. cut + new_len`` of carry + raw, decoded."""
        if new_len > self.carry_cap or cut + new_len > carry_len + nsamp_raw:
            raise ConfigError(f"carry of {new_len} samples from {cut} does not fit or exceeds "
                              "the stream")  # fmt: skip
        if nxt.dtype != np.complex64 or nxt.size < self.ncp * self.carry_cap:
            raise ConfigError("the next carry must be complex64 (ncp, carry_cap)")
        vptr = self._common(raw, carry, valid, nsamp_raw)
        if new_len == 0:
            return
        nt = self.t.CARRY_THREADS
        args: tuple = (raw, carry, vptr, nxt) + self.layout_args
        args += (np.int32(self.carry_cap), np.int32(carry_len), np.int64(nsamp_raw),
                 np.int64(cut), np.int32(new_len))  # fmt: skip
        launch(self.t.carry_kernel, (-(-new_len // nt), self.ncp), (nt,), args, stream)


# --- chirp multiply, in place on the spectra


class ChirpTemplate:
    def __init__(self):
        self.kernel = load_module("chirp.cu").get_function("chirp_multiply")

    def instantiate(self, nchan: int, npol: int, nfft: int) -> ChirpOp:
        if nfft % 2 or nfft < 2:
            raise ConfigError(f"the chirp kernel works on pairs of bins: nfft {nfft} must be even")
        return ChirpOp(self, nchan, npol, nfft)


class ChirpOp:
    def __init__(self, template, nchan, npol, nfft):
        self.t, self.nchan, self.npol, self.nfft = template, nchan, npol, nfft

    def __call__(self, spec, chirp, nblock: int, stream=None):
        """``spec`` (nchan, npol, nblock*, nfft) *= ``chirp`` (nchan, nfft), complex64."""
        _check(chirp, np.complex64, (self.nchan, self.nfft), "chirp")
        rows_per_chan = self.npol * nblock
        npairs = self.nchan * rows_per_chan * self.nfft // 2
        if spec.dtype != np.complex64 or spec.size < 2 * npairs:
            raise ConfigError("chirp spectra must be complex64 with nchan*npol*nblock*nfft bins")
        threads = 256
        blocks = int(min(-(-npairs // threads), 132 * 32))
        launch(
            self.t.kernel,
            (blocks,),
            (threads,),
            (
                spec,
                chirp,
                np.int32(self.nfft // 2),
                np.int64(rows_per_chan),
                np.int64(npairs),
            ),
            stream,
        )


# --- overlap discard + detection + folding

FOLD_MODES = {("AA+BB", "linear"): 0, ("AA+BB", "circular"): 0, ("AABBCRCI", "linear"): 1}
FOLD_MODES.update({("AABBCRCI", "circular"): 1, ("IQUV", "linear"): 2, ("IQUV", "circular"): 3})


class FoldTemplate:
    """Detect + fold for one polarisation layout and detection mode."""

    KNOT_LOG2 = 12
    # __launch_bounds__ minimum blocks per SM (fold.cu's MIN_BLOCKS); the
    # benchmark's --fold-min-blocks compares values (docs/benchmarks.md).
    MIN_BLOCKS = 6
    THREADS = 256
    SAMPLES_PER_BLOCK = 16384
    MAX_SMEM = 160 * 1024

    def __init__(self, npol: int, mode: str = "AA+BB", basis: str = "linear"):
        if (mode, basis) not in FOLD_MODES:
            raise ConfigError(
                f"unknown detection {mode!r}/{basis!r}: use AA+BB, AABBCRCI or IQUV with "
                "basis linear or circular"
            )
        if npol not in (1, 2) or (npol == 1 and mode != "AA+BB"):
            raise ConfigError(f"{mode} needs 2 polarisations, the data have {npol}: use AA+BB")
        self.npol, self.mode = npol, mode
        self.npol_out = 1 if mode == "AA+BB" else 4
        defines = (
            ("NPOL", npol),
            ("MODE", FOLD_MODES[mode, basis]),
            ("KNOT_LOG2", self.KNOT_LOG2),
            ("MIN_BLOCKS", self.MIN_BLOCKS),
        )
        self.kernel = load_module("fold.cu", defines).get_function("detect_fold")

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
            self.kernel.max_dynamic_shared_size_bytes = smem
        return FoldOp(self, nchan, nbin, nfft, head, step, smem)


class FoldOp:
    def __init__(self, template, nchan, nbin, nfft, head, step, smem):
        self.t, self.nchan, self.nbin = template, nchan, nbin
        self.nfft, self.head, self.step, self.smem = nfft, head, step, smem

    def __call__(
        self,
        ts,
        nblock: int,
        knots,
        delay,
        acc,
        hits,
        offered,
        first: int,
        tsamp_s: float,
        tsub_s: float | None,
        valid=None,
        stream=None,
    ):
        """Fold the valid middle of ``nblock`` frames of ``ts`` into acc/hits/offered."""
        t = self.t
        nout = nblock * self.step
        nsub_cap = acc.shape[0]
        _check(knots, np.float64, (self.nchan, t.nknot(nout)), "knots")
        _check(delay, np.float64, (self.nchan,), "delay")
        _check(acc, np.float64, (nsub_cap, t.npol_out, self.nchan, self.nbin), "acc")
        _check(hits, np.uint32, (nsub_cap, self.nchan, self.nbin), "hits")
        _check(offered, np.uint64, (nsub_cap, self.nchan), "offered")
        if ts.dtype != np.complex64 or ts.size < self.nchan * t.npol * nblock * self.nfft:
            raise ConfigError("fold input must be complex64 (nchan, npol, nblock, nfft)")
        if valid is not None:
            _check(valid, np.uint8, (nout,), "valid")
        spb = t.SAMPLES_PER_BLOCK
        # Mirrors the kernel's split: whole frames per block, or segments of one.
        if self.step >= spb:
            nx = nblock * -(-self.step // spb)
        else:
            nx = -(-nblock // (spb // self.step))
        grid = (nx, self.nchan)
        launch(
            t.kernel,
            grid,
            (t.THREADS,),
            (
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
            ),
            stream,
            self.smem,
        )
