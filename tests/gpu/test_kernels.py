"""Every GPU kernel and the whole GPU fold against the NumPy float64 reference.

Fresh random data per test, outputs poisoned (NaN frames, random accumulators
that are subtracted back out) so an unwritten element fails. Marked ``gpu``:
CI deselects them; ``make gpu-test`` runs them on the GPU machine.
"""

from __future__ import annotations

import numpy as np
import pytest

from voltstream.dsp.dedisperse import Dedisperser
from voltstream.dsp.detect import detect
from voltstream.fold import kernels as fold_kernels
from voltstream.fold.gpu import GpuFolder, gpu_available
from voltstream.fold.gpu_naive import NaiveGpuFolder
from voltstream.fold.reference import Folder, FoldSettings
from voltstream.io.polyco import ConstantPeriod, Polyco, polyco_entries_from_spin
from voltstream.observation import Observation
from voltstream.pipeline.fold import fold_file
from voltstream.pipeline.gpu_file_fold import fold_file_gpu

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def cp():
    import cupy

    assert gpu_available(), "no CUDA device visible to CuPy"
    return cupy


def rel_err(a, b) -> float:
    a, b = np.asarray(a), np.asarray(b)
    assert np.all(np.isfinite(a)), "output has NaN/inf: an element was not written"
    return float(np.linalg.norm(a - b) / max(np.linalg.norm(b), 1e-300))


def frame_ref(stream: np.ndarray, nfft: int, step: int, nblock: int) -> np.ndarray:
    """(ns, ncp) complex -> (ncp, nblock, nfft) overlap-save frames."""
    idx = np.arange(nblock)[:, None] * step + np.arange(nfft)[None, :]
    return stream.T[:, idx]


@pytest.mark.parametrize(
    "dtype,ndim,nchan,npol",
    [
        (np.int8, 2, 32, 2),
        (np.int8, 2, 7, 2),
        (np.int16, 2, 3, 1),
        (np.float32, 2, 5, 2),
        (np.int8, 1, 9, 2),
    ],
)
@pytest.mark.parametrize("carry_len", [0, 37])
def test_unpack_frames_like_numpy(cp, dtype, ndim, nchan, npol, carry_len):
    rng = np.random.default_rng()
    nfft, step = 96, 61  # deliberately not powers of two or tile multiples
    ncp = nchan * npol
    n = 1000 + int(rng.integers(0, 50))
    nblock = (carry_len + n - (nfft - step)) // step
    shape = (n, nchan, npol) + ((2,) if ndim == 2 else ())
    cshape = (carry_len, nchan, npol) + ((2,) if ndim == 2 else ())
    if dtype == np.float32:
        raw = rng.standard_normal(shape).astype(np.float32)
        carry = rng.standard_normal(cshape).astype(np.float32)
    else:
        info = np.iinfo(dtype)
        raw = rng.integers(info.min, info.max + 1, shape).astype(dtype)
        carry = rng.integers(info.min, info.max + 1, cshape).astype(dtype)
    op = fold_kernels.UnpackTemplate(dtype, ndim).instantiate(ncp, nfft, step)
    out = cp.full(ncp * nblock * nfft, np.nan + 1j * np.nan, dtype=np.complex64)
    dev_carry = cp.asarray(carry.reshape(-1)) if carry_len else cp.zeros(ncp * ndim, dtype=dtype)
    op(cp.asarray(raw.reshape(-1)), dev_carry, carry_len, out, nblock)

    def cplx(a):
        a = a.astype(np.float64)
        return a[..., 0] + 1j * a[..., 1] if ndim == 2 else a + 0j

    stream = np.concatenate([cplx(carry), cplx(raw)]).reshape(carry_len + n, ncp)
    ref = frame_ref(stream, nfft, step, nblock)
    np.testing.assert_array_equal(out.get().reshape(ncp, nblock, nfft), ref)


@pytest.mark.parametrize("nchan,npol,nblock,nfft", [(32, 2, 3, 512), (3, 1, 5, 64)])
def test_chirp_multiply(cp, nchan, npol, nblock, nfft):
    rng = np.random.default_rng()
    spec = (
        rng.standard_normal((nchan, npol, nblock, nfft))
        + 1j * rng.standard_normal((nchan, npol, nblock, nfft))
    ).astype(np.complex64)
    h = np.exp(1j * rng.uniform(0, 2 * np.pi, (nchan, nfft))).astype(np.complex64)
    dev = cp.asarray(spec)
    fold_kernels.ChirpTemplate().instantiate(nchan, npol, nfft)(dev, cp.asarray(h), nblock)
    ref = spec.astype(np.complex128) * h.astype(np.complex128)[:, None, None, :]
    assert rel_err(dev.get(), ref) < 1e-6


FOLD_CASES = [
    ("AA+BB", "linear", 1),
    ("AA+BB", "linear", 2),
    ("AABBCRCI", "linear", 2),
    ("IQUV", "linear", 2),
    ("IQUV", "circular", 2),
]


@pytest.mark.parametrize("mode,basis,npol", FOLD_CASES)
@pytest.mark.parametrize("with_valid", [False, True])
@pytest.mark.parametrize("spb,tsub", [(16384, 3.3e-4), (100, 3.3e-4), (64, 1.0), (16384, None)])
def test_detect_fold_matches_folder(cp, mode, basis, npol, with_valid, spb, tsub):
    rng = np.random.default_rng()
    nchan, nbin, nfft, head, step, nblock = 6, 64, 256, 37, 171, 9
    nout = nblock * step
    tsamp = 1e-6
    freqs = 1400.0 + np.arange(nchan) * 8.0 - 20.0
    dm = 40.0  # delays of a few hundred samples: some tc < 0 at the start
    pred = ConstantPeriod(float(rng.uniform(2e-4, 5e-4)), 60000, float(rng.uniform(0, 1)))
    # tsub 3.3e-4: several sub-integrations per chunk, boundaries inside blocks;
    # spb < step splits frames into segments, spb > step groups whole frames.
    first = int(rng.integers(0, 300))
    ts = (
        rng.standard_normal((nchan, npol, nblock, nfft))
        + 1j * rng.standard_normal((nchan, npol, nblock, nfft))
    ).astype(np.complex64)
    valid = rng.random(nout) > 0.1 if with_valid else None

    mid = ts[..., head : head + step].reshape(nchan, npol, nout)
    ref = Folder(
        nbin, nchan, 1 if mode == "AA+BB" else 4, tsamp, freqs, 1400.0, dm, pred, tsub, 60000, 10.0
    )
    ref.add(detect(mid.astype(np.complex128), mode, basis=basis), first, valid)

    t = fold_kernels.FoldTemplate(npol, mode, basis)
    t.SAMPLES_PER_BLOCK = spb
    op = t.instantiate(nchan, nbin, nfft, head, step)
    cap = ref.nsub + 2
    acc0 = rng.standard_normal((cap, t.npol_out, nchan, nbin))
    hits0 = rng.integers(0, 1000, (cap, nchan, nbin)).astype(np.uint32)
    off0 = rng.integers(0, 1000, (cap, nchan)).astype(np.uint64)
    acc, hits, off = cp.asarray(acc0), cp.asarray(hits0), cp.asarray(off0)
    nknot = t.nknot(nout)
    o = np.arange(nknot) * t.knot
    tc = (first + o)[None, :] * tsamp - ref.delay_s[:, None]
    ph = pred.phase(60000, 10.0 + tc)
    knots = cp.asarray(np.ascontiguousarray(ph - np.floor(ph[:, :1])))
    dvalid = None if valid is None else cp.asarray(valid.astype(np.uint8))
    op(
        cp.asarray(ts),
        nblock,
        knots,
        cp.asarray(ref.delay_s),
        acc,
        hits,
        off,
        first,
        tsamp,
        tsub,
        valid=dvalid,
    )
    n = ref.nsub
    np.testing.assert_array_equal(hits.get()[:n] - hits0[:n], ref._hits)
    np.testing.assert_array_equal(off.get()[:n] - off0[:n], ref._offered)
    np.testing.assert_array_equal(hits.get()[n:], hits0[n:])
    assert rel_err(acc.get()[:n] - acc0[:n], ref._sums) < 1e-5
    assert ref._hits.sum() > 0.5 * nout  # the test folded real data


class MemReader:
    """An in-memory reader: raw int8 TFP samples, optionally with lost samples."""

    def __init__(self, obs, raw, valid=None):
        self.obs, self.raw, self.valid, self.nsamp = obs, raw, valid, raw.shape[0]

    def read_raw(self, start, n):
        return self.raw[start : start + n]

    def read_blocks(self, nsamp, start=0):
        for s in range(start, self.nsamp, nsamp):
            r = self.raw[s : s + nsamp].astype(np.float32)
            blk = (r[..., 0] + 1j * r[..., 1]).astype(np.complex64)
            yield blk if self.valid is None else (blk, self.valid[s : s + nsamp])


class BlocksOnly(MemReader):
    """Offers only complex64 blocks (with validity), like a network reader."""

    def __getattribute__(self, name):
        if name == "read_raw":
            raise AttributeError(name)
        return super().__getattribute__(name)


def lost_packet_polyco_case(nffts: int, nlost: int, seed: int = 20261125):
    """Random 8-bit baseband with `nlost` lost packets of 64 samples, folded with a
    two-entry polyco of a random spinning pulsar: (obs, dm, dd, raw, valid, pred, tsub).

    Seeded: unseeded, about one draw in a few hundred put a sample's float32 phase on
    the other side of a bin edge from the float64 reference's, beyond the archives'
    2e-5 tolerance (seen once in session 5's GPU runs)."""
    dm = 35.727
    rng, obs, dd, raw = random_voltages(
        4, -16.0, dm, lambda dd, _: nffts * dd.nfft + 3001, freq=800.0, seed=seed
    )
    n = len(raw)
    valid = np.ones(n, dtype=bool)
    for s in rng.integers(0, n - 64, nlost):
        valid[s : s + 64] = False
    entries = polyco_entries_from_spin(
        "J0000+0000",
        float(rng.uniform(300, 700)),
        -1e-12,
        obs.start_mjd,
        obs.start_sec,
        obs.start_mjd,
        obs.start_sec + 10.0,
        nentries=2,
        span_min=1.0,
    )
    return obs, dm, dd, raw, valid, Polyco(entries), n * obs.tsamp_s / 2.5


def make_obs(nchan, bw, freq=1400.0):
    return Observation(
        nchan=nchan,
        npol=2,
        freq_mhz=freq,
        bw_mhz=bw,
        tsamp_s=nchan / abs(bw) * 1e-6,
        start_mjd=60000,
        start_sec=1234.5,
    )


def random_voltages(nchan, bw, dm, nsamples, freq=1400.0, seed=None):
    """Random 8-bit complex voltages of ``nsamples(dd)`` samples (it is given the
    dedisperser, whose FFT length sizes most cases): (rng, obs, dd, raw)."""
    rng = np.random.default_rng(seed)
    obs = make_obs(nchan, bw, freq)
    dd = Dedisperser(dm, obs.chan_freqs_mhz, obs.chan_bw_mhz)
    n = nsamples(dd, rng)
    return rng, obs, dd, rng.integers(-128, 128, (n, obs.nchan, obs.npol, 2)).astype(np.int8)


def compare_archives(g, c):
    assert g.data.shape == c.data.shape
    assert rel_err(g.data, c.data) < 2e-5, rel_err(g.data, c.data)
    np.testing.assert_allclose(g.weights, c.weights, rtol=1e-12, atol=0)
    np.testing.assert_allclose(g.tsubint_s, c.tsubint_s, rtol=1e-12)
    np.testing.assert_allclose(g.offs_sub_s, c.offs_sub_s, rtol=1e-12)
    assert g.excluded_samples == c.excluded_samples


def compare_lost_packet_fold(g, c, valid):
    """A GPU fold of data with lost packets (``valid`` false) equals the CPU's, and the
    lost samples were excluded and weighted down."""
    compare_archives(g, c)
    assert g.excluded_samples == int((~valid).sum()) > 0
    assert np.any(g.weights < 1) and np.all(g.weights <= 1)


@pytest.mark.parametrize("dm,bw", [(3.0, 8.0), (26.833, -8.0), (120.0, 8.0), (478.8, -4.0)])
@pytest.mark.parametrize("variant", ["fused", "naive"])
def test_fold_file_gpu_matches_cpu(cp, dm, bw, variant):
    rng, obs, dd, raw = random_voltages(
        8, bw, dm, lambda dd, rng: 3 * dd.nfft + int(rng.integers(1000, 5000))
    )
    n = len(raw)
    period = float(rng.uniform(1e-3, 3e-3))
    pred = ConstantPeriod(period, obs.start_mjd, obs.start_sec)
    tsub = n * obs.tsamp_s / 3.7
    cpu = fold_file(MemReader(obs, raw), FoldSettings(dm, pred, 128, tsub, "AA+BB"))
    # An odd GPU chunk, unrelated to the CPU block size: framing must not care.
    chunk = dd.step + 1231
    gpu = fold_file_gpu(
        MemReader(obs, raw),
        FoldSettings(dm, pred, 128, tsub, "AA+BB", block_samples=chunk),
        variant=variant,
    )
    compare_archives(gpu, cpu)


@pytest.mark.parametrize("mode,basis", [("AABBCRCI", "linear"), ("IQUV", "circular")])
def test_fold_with_lost_packets_and_polyco(cp, mode, basis):
    obs, dm, dd, raw, valid, pred, tsub = lost_packet_polyco_case(nffts=4, nlost=6)
    cpu = fold_file(
        BlocksOnly(obs, raw, valid), FoldSettings(dm, pred, 256, tsub, mode, basis=basis)
    )
    for variant in ("fused", "naive"):
        gpu = fold_file_gpu(
            BlocksOnly(obs, raw, valid),
            FoldSettings(dm, pred, 256, tsub, mode, block_samples=dd.step * 2 + 77, basis=basis),
            variant=variant,
        )
        compare_lost_packet_fold(gpu, cpu, valid)


def test_streaming_double_buffer_from_pinned(cp):
    """Many chunks through the pinned/double-buffered path equal one CPU run."""
    import cupyx

    rng = np.random.default_rng()
    obs = make_obs(32, 128.0)
    dm = 26.833
    pred = ConstantPeriod(0.0013, obs.start_mjd, obs.start_sec)
    eng = GpuFolder.from_settings(
        obs, FoldSettings(dm, pred, 64, None), dtype=np.int8, ndim=2, chunk_samples=20000
    )
    chunks = []
    for _ in range(7):
        c = cupyx.empty_pinned((20000, 32, 2, 2), dtype=np.int8)
        c[...] = rng.integers(-128, 128, c.shape)
        chunks.append(c)
    for c in chunks:
        eng.feed(c, pinned=True)
    gpu = eng.finish()
    raw = np.concatenate(chunks)
    cpu = fold_file(MemReader(obs, raw), FoldSettings(dm, pred, 64, None))
    compare_archives(gpu, cpu)
    naive = NaiveGpuFolder.from_settings(obs, FoldSettings(dm, pred, 64, None), chunk_samples=20000)
    for c in chunks:
        naive.feed(c)
    compare_archives(naive.finish(), cpu)
