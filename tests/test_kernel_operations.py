"""CPU checks of the Template/Operation layer (``dsp/cuda.py``): every Operation
launches the kernel it names with as many arguments as that kernel's CUDA signature
has, and refuses buffers of the wrong dtype or shape by name. The compiler is
replaced by a recorder, so no GPU is needed; tests/gpu runs the same operations for
real against their NumPy references."""

from __future__ import annotations

import re

import numpy as np
import pytest

from voltstream.dsp import cuda
from voltstream.dsp.packed import PackedLayout
from voltstream.errors import ConfigError
from voltstream.fengine.kernels import FEngineTemplate
from voltstream.fold import kernels as fold_kernels


class Recorder:
    """Stands in for a compiled kernel: keeps each launch."""

    def __init__(self, name: str, launches: list) -> None:
        self.name, self.launches = name, launches

    def __call__(self, grid, block, args, shared_mem=0):
        self.launches.append((self.name, grid, block, args, shared_mem))


class FakeModule:
    def __init__(self, source: str, launches: list) -> None:
        self.source, self.launches = source, launches

    def get_function(self, name: str) -> Recorder:
        assert f" {name}(" in cuda.kernel_source(self.source).replace("\n", " "), name
        return Recorder(name, self.launches)


@pytest.fixture
def launches(monkeypatch):
    got: list = []
    monkeypatch.setattr(cuda, "load_module", lambda name, defines=(): FakeModule(name, got))
    return got


def n_params(source: str, kernel: str) -> int:
    """Parameters of ``__global__ ... kernel(...)`` in ``source``."""
    text = re.sub(r"//[^\n]*", "", cuda.kernel_source(source))  # comments hold parentheses
    m = re.search(rf"\b{kernel}\s*\(([^)]*)\)\s*\{{", text, re.S)
    assert m, kernel
    return len([p for p in m.group(1).split(",") if p.strip()])


def check_launch(launch, source: str) -> None:
    name, grid, block, args, _ = launch
    assert len(args) == n_params(source, name), name
    assert all(g >= 1 for g in grid) and all(b >= 1 for b in block), (name, grid, block)


def test_unpack_and_chirp_launch_their_kernels(launches):
    rng = np.random.default_rng()
    ncp, nfft, step, nblock = 6, 64, 48, 3
    op = fold_kernels.UnpackTemplate(np.int8, 2).instantiate(ncp, nfft, step)
    raw = rng.integers(-100, 100, (200, ncp, 2)).astype(np.int8)
    out = np.empty(ncp * nblock * nfft, np.complex64)
    op(raw, raw[:0], 0, out, nblock)
    check_launch(launches[-1], "unpack.cu")
    with pytest.raises(ConfigError, match="out must be complex64"):
        op(raw, raw[:0], 0, out.astype(np.complex128), nblock)
    with pytest.raises(ConfigError, match="raw must be int8"):
        op(raw.astype(np.int16), raw[:0], 0, out, nblock)
    with pytest.raises(ConfigError, match="0 < step <= nfft"):
        fold_kernels.UnpackTemplate(np.int8, 2).instantiate(ncp, nfft, nfft + 1)
    chirp_op = fold_kernels.ChirpTemplate().instantiate(3, 2, nfft)
    chirp = np.ones((3, nfft), np.complex64)
    chirp_op(out, chirp, nblock)
    check_launch(launches[-1], "chirp.cu")
    with pytest.raises(ConfigError, match=r"chirp must be complex64 shaped \(3, 64\)"):
        chirp_op(out, chirp[:, :32], nblock)


def test_packed_unpack_launches_both_kernels(launches):
    layout = PackedLayout.time_major(2, "vdif2", 4, 2, 2)
    op = fold_kernels.PackedUnpackTemplate(layout).instantiate(64, 48, 64)
    raw = np.zeros(layout.nbytes(300), np.uint8)
    carry = np.zeros(8 * 64, np.complex64)
    out = np.empty(8 * 4 * 64, np.complex64)
    valid = np.ones(300, np.uint8)
    op(raw, 300, carry, 10, valid, out, 4)
    check_launch(launches[-1], "unpack_packed.cu")
    op.carry_tail(raw, 300, carry, 10, None, carry.copy(), 192, 40)
    check_launch(launches[-1], "unpack_packed.cu")
    with pytest.raises(ConfigError, match="valid must be uint8"):
        op(raw, 300, carry, 10, valid.astype(bool), out, 4)
    with pytest.raises(ConfigError, match="needs a carry"):
        fold_kernels.PackedUnpackTemplate(layout).instantiate(64, 48, 0)


def test_fold_launches_with_its_shared_memory(launches):
    t = fold_kernels.FoldTemplate(2, "IQUV")
    nchan, nbin, nfft, head, step, nblock, cap = 4, 32, 64, 8, 48, 2, 3
    op = t.instantiate(nchan, nbin, nfft, head, step)
    nout = nblock * step
    bufs = dict(
        ts=np.zeros(nchan * 2 * nblock * nfft, np.complex64),
        knots=np.zeros((nchan, t.nknot(nout))),
        delay=np.zeros(nchan),
        acc=np.zeros((cap, 4, nchan, nbin)),
        hits=np.zeros((cap, nchan, nbin), np.uint32),
        offered=np.zeros((cap, nchan), np.uint64),
    )
    op(bufs["ts"], nblock, bufs["knots"], bufs["delay"], bufs["acc"], bufs["hits"],
       bufs["offered"], 0, 1e-6, None, valid=np.ones(nout, np.uint8))  # fmt: skip
    check_launch(launches[-1], "fold.cu")
    assert launches[-1][4] == 4 * nbin * 5  # shared memory: 4 Stokes + hits per bin
    bad = dict(bufs, hits=bufs["hits"].astype(np.int32))
    with pytest.raises(ConfigError, match="hits must be uint32"):
        op(bad["ts"], nblock, bad["knots"], bad["delay"], bad["acc"], bad["hits"],
           bad["offered"], 0, 1e-6, None)  # fmt: skip


@pytest.mark.parametrize("out_bits", [8, 4])
def test_fengine_kernels_launch_with_checked_buffers(launches, out_bits):
    nchan, taps, nspec, nsend, sph = 16, 4, 12, 2, 4
    op = FEngineTemplate(10, taps, out_bits).instantiate(nchan)
    raw = np.zeros((2, 64), np.uint8)
    starts = np.zeros((2, nspec), np.int64)
    fir = np.zeros((2, nspec, 2 * nchan), np.float32)
    op.fir(raw, starts, np.zeros(taps * 2 * nchan, np.float32), fir)
    check_launch(launches[-1], "fengine.cu")
    with pytest.raises(ConfigError, match="weights must be float32"):
        op.fir(raw, starts, np.zeros(taps * 2 * nchan), fir)
    spec = np.zeros((2, nspec, nchan + 1), np.complex64)
    rot = op.rotation(np.zeros((2, nspec)), np.zeros((2, nspec)), 1e6)
    gains = np.ones((2, nchan), np.complex64)
    slots, ids = np.array([0, 2], np.int32), np.array([7, 9], np.int64)
    shape = (nsend, nchan, sph) + ((2, 2) if out_bits == 8 else (2,))
    out = np.zeros(shape, np.int8 if out_bits == 8 else np.uint8)
    sat = np.zeros((nsend, 2), np.uint64)
    op.post(spec, rot, gains, slots, ids, out, sat, None)
    check_launch(launches[-1], "fengine.cu")
    with pytest.raises(ConfigError, match="slot_ids must be int64"):
        op.post(spec, rot, gains, slots, ids.astype(np.int32), out, sat, 5)


def test_a_buffer_must_be_contiguous():
    spec = cuda.Buffer(np.float64, (4, 4))
    spec.check("x", np.zeros((4, 4)))
    with pytest.raises(ConfigError, match="x must be C-contiguous"):
        spec.check("x", np.zeros((4, 8))[:, ::2])
    with pytest.raises(ConfigError, match="at least 10 values"):
        cuda.Buffer(np.uint8, min_size=10).check("y", np.zeros(9, np.uint8))
