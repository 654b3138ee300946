"""Real-sampled channels on the GPU: real_to_complex.cu against its oracle, dsp/real.py
RealToComplex (random 2/4/8-bit codes over several chunks of odd sizes, a lost frame,
a gap), and the GPU fold of real VDIF and DADA files against the CPU fold of the same
file (which converts with RealToComplex on the host)."""

from __future__ import annotations

import numpy as np
import pytest

from packed_ref import decode_ref
from voltstream.dsp.dedisperse import Dedisperser
from voltstream.dsp.real import TAPS, RealToComplex
from voltstream.fold import kernels as fold_kernels
from voltstream.fold.gpu import gpu_available
from voltstream.fold.gpu_real import RealCarry, signed_taps
from voltstream.fold.reference import FoldSettings
from voltstream.io.polyco import ConstantPeriod
from voltstream.io.vdif import LEVELS_2BIT, open_vdif
from voltstream.observation import Observation
from voltstream.pipeline.fold import fold_file
from voltstream.pipeline.gpu_file_fold import fold_file_gpu
from voltstream.sim.packetize import packetize_vdif

from .test_kernels import compare_archives
from .test_packed import make_layout

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def cp():
    import cupy

    assert gpu_available(), "no CUDA device visible to CuPy"
    return cupy


class Stream:
    """Real samples (n, nchan, npol) and their validity as a reader, for the oracle."""

    def __init__(self, x, ok):
        self.x, self.ok, self.nsamp = x, ok, len(x)
        self.obs = Observation(nchan=x.shape[1], npol=x.shape[2], freq_mhz=100.0, bw_mhz=16.0,
                               tsamp_s=1 / 32e6, ndim=1)  # fmt: skip

    def read_blocks(self, n):
        for i in range(0, len(self.x), n):
            ok = self.ok[i : i + n]
            yield self.x[i : i + n] if ok.all() else (self.x[i : i + n], ok)


REAL_LAYOUTS = [
    # (nbit, encoding, nchan, npol, spf): VDIF frames (spf > 1) or time-major DADA.
    (2, "vdif2", 4, 2, 32),
    (2, "vdif2", 16, 2, 64),  # 32 pairs: one full tile
    (4, "twos", 6, 2, 1),
    (4, "offset", 3, 1, 8),
    (8, "offset", 20, 2, 4),  # 40 pairs: two tiles across
    (8, "twos", 1, 2, 1),
]


@pytest.mark.parametrize("params", REAL_LAYOUTS, ids=lambda p: "-".join(map(str, p)))
def test_real_to_complex_kernel_equals_real_to_complex(cp, params):
    nbit, enc, nchan, npol, spf = params
    rng = np.random.default_rng()
    layout = make_layout(nbit, enc, 1, nchan, npol, spf)
    ncp = nchan * npol
    # Chunks of odd sizes, one shorter than the filter, one all lost (a gap).
    sizes = [int(rng.integers(3000, 5000)), 37, 2 * 1024 + 1, 500, int(rng.integers(1, 9000))]
    gap = 3
    op = fold_kernels.RealToComplexTemplate(layout).instantiate(TAPS - 1)
    taps_d = cp.asarray(signed_taps())
    carry = [cp.full(ncp * (TAPS - 1), np.nan, dtype=np.float32) for _ in range(2)]
    rc = RealCarry()
    xs, oks, outs, out_oks = [], [], [], []
    for i, n in enumerate(sizes):
        data = rng.integers(0, 256, layout.nbytes(n), dtype=np.uint8)
        x = decode_ref(data, layout, n).real.reshape(n, nchan, npol).astype(np.float32)
        ok = np.ones(n, dtype=bool)
        if i == 0:
            ok[1000 : 1000 + max(spf, 16)] = False  # a lost frame
        if i == gap:
            ok[:] = False
        xs.append(np.where(ok[:, None, None], x, 0))  # lost samples read as zeros
        oks.append(ok)
        step = rc.step(None if ok.all() else ok, n)
        out = cp.full(2 * ncp * max(step.nout, 1), np.nan, dtype=np.float32)
        d_ok = None if ok.all() else cp.asarray(ok.astype(np.uint8))
        d_out_ok = None if step.out_valid is None else cp.asarray(step.out_valid.astype(np.uint8))
        d_raw = cp.asarray(data)
        op(d_raw, n, carry[i % 2], step.carry_len, d_ok, taps_d, out, step.nout, step.start,
           d_out_ok)  # fmt: skip
        op.carry_tail(d_raw, n, carry[i % 2], step.carry_len, d_ok, carry[1 - i % 2],
                      2 * step.nout, step.new_len)  # fmt: skip
        got = out.get()[: 2 * ncp * step.nout].view(np.complex64).reshape(step.nout, nchan, npol)
        outs.append(got)
        out_oks.append(np.ones(step.nout, bool) if step.out_valid is None else step.out_valid)
    got, got_ok = np.concatenate(outs), np.concatenate(out_oks)
    want, want_ok = [], []
    for b in RealToComplex(Stream(np.concatenate(xs), np.concatenate(oks))).read_blocks(1234):
        blk, v = b if isinstance(b, tuple) else (b, np.ones(len(b), bool))
        want.append(blk)
        want_ok.append(v)
    want, want_ok = np.concatenate(want), np.concatenate(want_ok)
    assert got.shape == want.shape
    assert np.all(np.isfinite(got)), "an output was not written"
    np.testing.assert_array_equal(got_ok, want_ok)
    assert not got_ok.all() and got_ok.any()
    scale = float(np.abs(want[want_ok]).max())
    np.testing.assert_allclose(got[got_ok], want[want_ok], rtol=0, atol=2e-6 * scale)
    assert not got[~got_ok].any()  # lost outputs are zeros: the fold zeroes lost samples


def write_real_vdif(tmp_path, rng, nbit, nchan, nsamp, spf, threads, drop=None):
    """A real-sampled VDIF file of ``threads`` threads (as a DBBC3 writes them)."""
    if nbit == 2:
        draw = lambda shape: LEVELS_2BIT[rng.integers(0, 4, shape)]  # noqa: E731
    else:
        lim = 1 << (nbit - 1)
        draw = lambda shape: rng.integers(-lim, lim, shape)  # noqa: E731
    x = draw((nsamp, nchan, threads)).astype(np.float64)
    fps = 10000
    pk = packetize_vdif(x, frames_per_second=fps, nbit=nbit, samples_per_frame=spf,
                        complex_data=False)  # fmt: skip
    if drop is not None:
        pk = np.delete(pk, drop, axis=0)
    path = tmp_path / f"real{nbit}t{threads}.vdif"
    pk.tofile(path)
    return path, nchan * fps * spf / 2 / 1e6  # total bandwidth, MHz


def _settings(rng, obs, nsamp, block=None):
    pred = ConstantPeriod(float(rng.uniform(1e-3, 3e-3)), obs.start_mjd, obs.start_sec)
    tsub = nsamp * obs.tsamp_s / 2.5
    return (FoldSettings(26.833, pred, 128, tsub, "AA+BB"),
            FoldSettings(26.833, pred, 128, tsub, "AA+BB", block_samples=block))  # fmt: skip


@pytest.mark.parametrize(
    "nbit,threads,select,drop",
    [(2, 4, [0, 1], None), (2, 2, None, None), (2, 2, None, 9), (4, 2, None, None),
     (8, 4, [3, 1], 7)],  # frame 7: time 1, thread 3 (selected)
)  # fmt: skip
def test_real_vdif_gpu_fold_equals_cpu(cp, tmp_path, nbit, threads, select, drop):
    rng = np.random.default_rng()
    nchan, spf = 4, 256
    path, bw = write_real_vdif(tmp_path, rng, nbit, nchan, 96 * spf, spf, threads, drop)
    opts = dict(freq_mhz=1400.0, bw_mhz=bw, frames_per_second=10000)
    f = open_vdif(path, select=select, **opts) if select else open_vdif(path, **opts)
    assert f.obs.ndim == 1 and f.obs.npol == 2
    real = RealToComplex(f)
    obs = real.obs
    assert real.nsamp > 2 * Dedisperser(26.833, obs.chan_freqs_mhz, obs.chan_bw_mhz).nfft
    cpu_s, gpu_s = _settings(rng, obs, real.nsamp, block=3 * spf + 17)
    cpu = fold_file(real, cpu_s)
    # The GPU fold takes the file as it is (the CLI hands it RealToComplex's wrapper).
    gpu = fold_file_gpu(f if drop is None else RealToComplex(f), gpu_s)
    compare_archives(gpu, cpu)
    assert "source_s" in gpu.stage_seconds  # the file source's path: packed bytes to the GPU
    # ... through the live fold's runner (pipeline/gpu.py StageRunner): its counters.
    assert gpu.pipeline["blocks"] > 0 and gpu.pipeline["max_copies_in_flight"] >= 1
    assert gpu.pipeline["samples_fed"] == f.nsamp
    if drop is not None:
        assert gpu.excluded_samples == cpu.excluded_samples > 0
        assert np.any(gpu.weights < 1)


def test_real_dada_gpu_fold_equals_cpu(cp, tmp_path):
    from test_dada_psrdada import psrdada_header
    from voltstream.io.dada import open_dada
    from voltstream.pipeline.file_source import FileSource

    rng = np.random.default_rng()
    n, nchan, npol = 40_000, 2, 2
    q = rng.integers(-60, 60, (n, nchan, npol), dtype=np.int8)
    path = tmp_path / "edd.dada"
    head = psrdada_header(4096, NCHAN=nchan, NPOL=npol, NDIM=1, NBIT=8, TSAMP=0.25, BW=4.0,
                          FREQ=1400.0, SOURCE="J0000+0000", UTC_START="2024-06-11-12:34:56",
                          OBS_OFFSET=0)  # fmt: skip
    path.write_bytes(head + q.tobytes())
    r = open_dada(path)
    assert r.obs.ndim == 1
    with FileSource(r, 1 << 14, readers=2, depth=4) as src:  # the as-stored path takes it
        assert src.layout.ndim == 1
    real = RealToComplex(r)
    cpu_s, gpu_s = _settings(rng, real.obs, real.nsamp, block=5003)
    compare_archives(fold_file_gpu(real, gpu_s), fold_file(real, cpu_s))
