"""The packed (2/4/8-bit code) unpack kernel and the GPU fold of VDIF files.

The kernel is checked against a NumPy decoder written from the layout formula
(not from the kernel), on random bytes, random decoded carries, random lost
samples and poisoned outputs; the fold of real VDIF files (every bit width,
real and complex, a missing frame) against the CPU fold of the same file.
"""

from __future__ import annotations

import numpy as np
import pytest

from packed_ref import decode_ref
from voltstream.dsp import packed
from voltstream.dsp.dedisperse import Dedisperser
from voltstream.fold import kernels as fold_kernels
from voltstream.fold.gpu import gpu_available
from voltstream.fold.reference import FoldSettings
from voltstream.io.polyco import ConstantPeriod
from voltstream.io.vdif import LEVELS_2BIT, open_vdif
from voltstream.pipeline.fold import fold_file
from voltstream.pipeline.gpu_file_fold import fold_file_gpu
from voltstream.sim.packetize import packetize_vdif

from .test_kernels import compare_archives, frame_ref

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def cp():
    import cupy

    assert gpu_available(), "no CUDA device visible to CuPy"
    return cupy


LAYOUTS = [
    # (nbit, encoding, ndim, nchan, npol, spf): spf > 1 is VDIF's frame-major order.
    (2, "vdif2", 2, 4, 2, 16),
    (2, "vdif2", 1, 8, 2, 32),
    (2, "twos", 1, 4, 1, 1),
    (4, "offset", 2, 3, 2, 8),
    (4, "twos", 1, 6, 2, 1),
    (4, "twos", 2, 5, 2, 1),
    (8, "offset", 2, 7, 2, 4),
    (8, "twos", 1, 3, 1, 1),
]


# Channels in blocks (a band in several streams): (cpb, s_cb) added to the layout above.
BLOCKED = [((8, "twos", 2, 6, 2, 4), (2, 50_000)), ((2, "vdif2", 2, 8, 1, 16), (4, 9_000))]


def make_layout(nbit, enc, ndim, nchan, npol, spf, blocks=None):
    if spf == 1:
        layout = packed.PackedLayout.time_major(nbit, enc, nchan, npol, ndim)
    else:
        layout = packed.PackedLayout.vdif_frames(nbit, enc, nchan, npol, ndim, spf)
    if blocks is not None:
        import dataclasses

        layout = dataclasses.replace(layout, cpb=blocks[0], s_cb=blocks[1])
    return layout


@pytest.mark.parametrize(
    "params", LAYOUTS + BLOCKED, ids=lambda p: "-".join(map(str, p if len(p) > 2 else p[0]))
)
@pytest.mark.parametrize("carry_len", [0, 41])
@pytest.mark.parametrize("lost", [False, True])
def test_packed_unpack_and_carry_like_numpy(cp, params, carry_len, lost):
    rng = np.random.default_rng()
    layout = make_layout(*params) if len(params) > 2 else make_layout(*params[0], params[1])
    ncp = layout.nchan * layout.npol
    nfft, step = 96, 61  # not powers of two nor tile multiples
    n = layout.spf * (40 + int(rng.integers(0, 8)))
    nblock = (carry_len + n - (nfft - step)) // step
    data = rng.integers(0, 256, layout.nbytes(n), dtype=np.uint8)
    carry = (rng.standard_normal((ncp, nfft)) + 1j * rng.standard_normal((ncp, nfft))).astype(
        np.complex64
    )
    valid = np.ones(n, dtype=np.uint8)
    if lost:
        for s in rng.integers(0, n - 20, 3):
            valid[s : s + 20] = 0
    op = fold_kernels.PackedUnpackTemplate(layout).instantiate(nfft, step, nfft)
    out = cp.full(ncp * nblock * nfft, np.nan + 1j * np.nan, dtype=np.complex64)
    d_raw, d_carry = cp.asarray(data), cp.asarray(carry.reshape(-1))
    d_valid = cp.asarray(valid) if lost else None
    op(d_raw, n, d_carry, carry_len, d_valid, out, nblock)

    samples = decode_ref(data, layout, n) * valid[:, None]
    stream = np.concatenate([carry[:, :carry_len].T.astype(np.complex128), samples])
    ref = frame_ref(stream, nfft, step, nblock)
    np.testing.assert_array_equal(out.get().reshape(ncp, nblock, nfft), ref)

    cut = nblock * step
    new_len = carry_len + n - cut
    nxt = cp.full(ncp * nfft, np.nan + 1j * np.nan, dtype=np.complex64)
    op.carry_tail(d_raw, n, d_carry, carry_len, d_valid, nxt, cut, new_len)
    got = nxt.get().reshape(ncp, nfft)[:, :new_len]
    np.testing.assert_array_equal(got, stream[cut:].T)


def test_packed_layout_errors():
    with pytest.raises(Exception, match="whole number of bytes"):
        packed.PackedLayout.time_major(2, "vdif2", 1, 1, 1).check()
    with pytest.raises(Exception, match="2-bit"):
        packed.PackedLayout.time_major(4, "vdif2", 4, 2, 2).check()


def write_vdif(tmp_path, rng, nbit, complex_data, nchan, nsamp, spf, drop=None):
    if nbit == 2:
        draw = lambda shape: LEVELS_2BIT[rng.integers(0, 4, shape)].astype(np.float64)  # noqa: E731
    else:
        lim = 1 << (nbit - 1)
        draw = lambda shape: rng.integers(-lim, lim, shape).astype(np.float64)  # noqa: E731
    shape = (nsamp, nchan, 2)
    x = draw(shape) + 1j * draw(shape) if complex_data else draw(shape)
    fps = 10000  # 2.56 MHz channels at 256 samples a frame: nfft of a few thousand
    pk = packetize_vdif(x, frames_per_second=fps, nbit=nbit, samples_per_frame=spf)
    if drop is not None:
        pk = np.delete(pk, drop, axis=0)
    path = tmp_path / f"b{nbit}c{int(complex_data)}.vdif"
    pk.tofile(path)
    bw = nchan / (1 / (fps * spf)) / 1e6 / (1 if complex_data else 2)
    return open_vdif(path, freq_mhz=1400.0, bw_mhz=bw, frames_per_second=fps)


# Complex data only: coherent dedispersion needs complex channels (the fold
# refuses real ones); real layouts are covered by the kernel test above.
@pytest.mark.parametrize("nbit,drop", [(2, 9), (2, None), (4, None), (8, 4)])
def test_vdif_gpu_fold_equals_cpu(cp, tmp_path, nbit, drop):
    complex_data = True
    rng = np.random.default_rng()
    nchan, spf = 4, 256
    f = write_vdif(tmp_path, rng, nbit, complex_data, nchan, 48 * spf, spf, drop)
    obs, nsamp = f.obs, f.nsamp
    assert nsamp > 2 * Dedisperser(26.833, obs.chan_freqs_mhz, obs.chan_bw_mhz).nfft
    pred = ConstantPeriod(float(rng.uniform(1e-3, 3e-3)), obs.start_mjd, obs.start_sec)
    tsub = nsamp * obs.tsamp_s / 2.5
    cpu = fold_file(f, FoldSettings(26.833, pred, 128, tsub, "AA+BB"))
    gpu = fold_file_gpu(
        f, FoldSettings(26.833, pred, 128, tsub, "AA+BB", block_samples=3 * spf + 17)
    )
    compare_archives(gpu, cpu)
    if drop is not None:
        assert gpu.excluded_samples == cpu.excluded_samples == spf > 0
        assert np.any(gpu.weights < 1)
