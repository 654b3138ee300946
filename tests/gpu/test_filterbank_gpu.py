"""The GPU search filterbank (search/gpu_filterbank.py) against the NumPy reference
(search/filterbank.py FilterbankReference): host complex blocks, packed 8- and 2-bit
chunks fed as a capture's (feed_block, feed_gap), real-sampled chunks converted on
the GPU, with lost samples and coherent dedispersion; and `voltstream filterbank
--listen --device gpu` over loopback against the file filterbank of the same stream."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

from cli_process import reaped, run_cli
from voltstream.device import gpu_available
from voltstream.dsp.packed import PackedLayout
from voltstream.dsp.real import RealToComplex, complex_observation
from voltstream.observation import Observation
from voltstream.search.filterbank import FilterbankPlan, FilterbankReference, FilterbankSettings
from voltstream.search.gpu_filterbank import GpuFilterbank

pytestmark = pytest.mark.gpu

OBS = Observation(nchan=4, npol=2, freq_mhz=1400.0, bw_mhz=-8.0, tsamp_s=0.5e-6)
VDIF2 = np.array([-3.3359, -1.0, 1.0, 3.3359])


@pytest.fixture(scope="module", autouse=True)
def _gpu():
    assert gpu_available(), "no CUDA device visible to CuPy"


def _compare(got, want):
    x, ok = got
    y, yok = want
    assert x.shape == y.shape and x.dtype == np.float32
    np.testing.assert_array_equal(ok, yok)
    scale = float(np.abs(y).max()) or 1.0
    np.testing.assert_allclose(x, y, rtol=2e-4, atol=2e-5 * scale)


def _cat(parts):
    """(samples, valid) batches as one."""
    return np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts])


def _lost(rng, n, p=0.002):
    v = rng.random(n) > p
    return v if not v.all() else None


CASES = [  # (fine channels, tsamp, pol, dm)
    (1, None, "I", None),
    (16, 64e-6, "I", None),
    (8, 20e-6, "AABB", None),
    (32, None, "IQUV", None),
    (16, 32e-6, "I", 40.0),
    (4, 6e-6, "IQUV", 12.0),
]


@pytest.mark.parametrize("m,tsamp,pol,dm", CASES)
def test_host_blocks_equal_the_reference(m, tsamp, pol, dm):
    rng = np.random.default_rng(m)
    plan = FilterbankPlan(OBS, FilterbankSettings(m, tsamp, pol, 8, dm))
    ref, eng = FilterbankReference(plan), GpuFilterbank(plan, chunk_samples=20000)
    got, want = [], []
    for i in range(7):
        n = int(rng.integers(1, 45000))  # chunks split at the engine's 20000 too
        x = rng.integers(-60, 60, (n, 4, 2, 2)).astype(np.float32)
        z = (x[..., 0] + 1j * x[..., 1]).astype(np.complex64)
        valid = _lost(rng, n) if i != 4 else np.zeros(n, bool)
        want.append(ref.feed(z, valid))
        got.append(eng.feed(z, valid))
    got.append(eng.finish())
    _compare(_cat(got), _cat(want))
    for name in ("samples_in", "lost_in", "samples_out", "lost_out"):
        assert getattr(eng, name) == getattr(ref, name), name
    assert ref.lost_out > 0 and eng.samples_written == ref.samples_out


def _pack(values: np.ndarray, layout: PackedLayout, codes_of) -> np.ndarray:
    """(n, nchan, npol, ndim) values -> the layout's bytes (codes_of: value -> code)."""
    n = values.shape[0]
    s, c, p, d = np.meshgrid(np.arange(n), np.arange(layout.nchan), np.arange(layout.npol),
                             np.arange(layout.ndim), indexing="ij")  # fmt: skip
    v = (s // layout.spf) * layout.s_blk + (s % layout.spf) * layout.s_t
    v = v + layout.chan_offset(c) + p * layout.s_p + d
    bits = np.zeros(layout.nbytes(n) * 8, np.uint8)
    code = codes_of(values).astype(np.int64)
    for b in range(layout.nbit):
        bits[(v * layout.nbit + b).ravel()] = ((code >> b) & 1).ravel()
    return np.packbits(bits, bitorder="little")


def _feed_packed(eng, data, n, valid):
    import cupyx

    pinned = cupyx.empty_pinned(data.shape, np.uint8)
    pinned[:] = data
    ev = eng.feed_block([(pinned.ctypes.data, pinned.nbytes, 0)], n, 0, valid)
    ev.synchronize()  # the host buffer may go once its copy is done
    return pinned


@pytest.mark.parametrize("nbit", [8, 2])
@pytest.mark.parametrize("m,tsamp,pol,dm", [CASES[0], CASES[1], CASES[3], CASES[4]])
def test_packed_chunks_equal_the_reference(nbit, m, tsamp, pol, dm):
    rng = np.random.default_rng(nbit * 100 + m)
    chunk = 16384
    if nbit == 8:
        layout = PackedLayout.time_major(8, "twos", 4, 2, 2)
        draw = lambda n: rng.integers(-100, 100, (n, 4, 2, 2)).astype(np.float64)  # noqa: E731
        codes = lambda v: v.astype(np.int64) & 0xFF  # noqa: E731
    else:
        layout = PackedLayout.vdif_frames(2, "vdif2", 4, 2, 2, 512)
        draw = lambda n: VDIF2[rng.integers(0, 4, (n, 4, 2, 2))]  # noqa: E731
        codes = lambda v: np.searchsorted(VDIF2, v)  # noqa: E731
    got = []
    plan = FilterbankPlan(OBS, FilterbankSettings(m, tsamp, pol, 8, dm))
    ref = FilterbankReference(plan)
    eng = GpuFilterbank(plan, packed=layout, chunk_samples=chunk,
                        on_output=lambda x, ok: got.append((x, ok)))  # fmt: skip
    want, keep = [], []
    for i in range(6):
        if i == 3:  # a gap: packets that never came
            n = 5000
            want.append(ref.feed(np.zeros((n, 4, 2), np.complex64), np.zeros(n, bool)))
            eng.feed_gap(n)
            continue
        n = chunk if i % 2 else 512 * int(rng.integers(1, 31))
        vals = draw(n)
        valid = _lost(rng, n)
        z = (vals[..., 0] + 1j * vals[..., 1]).astype(np.complex64)
        want.append(ref.feed(z, valid))
        keep.append(_feed_packed(eng, _pack(vals, layout, codes), n, valid))
    eng.synchronize()
    _compare(_cat(got), _cat(want))
    assert (eng.samples_in, eng.lost_in, eng.lost_out) == (ref.samples_in, ref.lost_in,
                                                          ref.lost_out)  # fmt: skip


class _Real:
    """Real samples (n, nchan, npol) as a reader, for the CPU's RealToComplex."""

    def __init__(self, obs, x, valid):
        self.obs, self.x, self.valid = obs, x, valid

    def read_blocks(self, n):
        for a in range(0, self.x.shape[0], n):
            yield self.x[a : a + n], self.valid[a : a + n]


@pytest.mark.parametrize("dm", [None, 20.0])
def test_real_sampled_chunks_equal_the_cpu_conversion_then_the_reference(dm):
    rng = np.random.default_rng(7)
    real_obs = Observation(nchan=4, npol=2, freq_mhz=1400.0, bw_mhz=-8.0, tsamp_s=0.25e-6,
                           ndim=1)  # fmt: skip
    cobs = complex_observation(real_obs)
    plan = FilterbankPlan(cobs, FilterbankSettings(8, 16e-6, "I", 8, dm))
    layout = PackedLayout.time_major(8, "twos", 4, 2, 1)
    n_total, chunk = 6 * 8192, 8192
    x = rng.integers(-90, 90, (n_total, 4, 2)).astype(np.float32)
    valid = rng.random(n_total) > 0.0005
    ref = FilterbankReference(plan)
    # A block whose every sample is valid comes alone, without its mask.
    items = RealToComplex(_Real(real_obs, x, valid)).read_blocks(3000)
    pairs = [it if isinstance(it, tuple) else (it, None) for it in items]
    want = [ref.feed(b, v) for b, v in pairs]
    want.append(ref.finish())
    got = []
    eng = GpuFilterbank(plan, packed=layout, chunk_samples=chunk,
                        on_output=lambda y, ok: got.append((y, ok)))  # fmt: skip
    keep = []
    for a in range(0, n_total, chunk):
        blk = x[a : a + chunk]
        keep.append(_feed_packed(eng, _pack(blk[..., None], layout, lambda v: v.astype(
            np.int64) & 0xFF), blk.shape[0], valid[a : a + chunk]))  # fmt: skip
    eng.synchronize()
    _compare(_cat(got), _cat(want))


def test_live_gpu_filterbank_equals_the_file_filterbank(tmp_path):
    """`filterbank --listen --device gpu` of a simulated VDIF stream over loopback and
    the CPU filterbank of the same stream written to a file: the same samples (read
    by our reader: `your`, the CI's peer, is not on the GPU machine)."""
    from loopback import free_bind, wait_bound

    bind = free_bind()
    live, rep = tmp_path / "live.fil", tmp_path / "live.json"
    fmt = ["--format", "vdif", "--nchan", "4", "--chan-bw", "1"]
    opts = ["--fine-channels", "8", "--tsamp", "16e-6", "--nbits", "32"]
    proc = subprocess.Popen(
        [sys.executable, "-m", "voltstream.cli", "filterbank", "--listen", bind, *fmt,
         "--duration", "30", "--idle-timeout", "3", "--engine", "socket", "--no-status",
         "--device", "gpu", "--packets-per-chunk", "16", *opts, "-o", str(live),
         "--report", str(rep)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    sim = ["--signal", "pulsar", "--dm", "10", "--period", "0.01", "--duration", "0.05"]
    with reaped(proc):
        wait_bound(bind)
        sent = run_cli("simulate", *fmt, *sim, "--dest", bind, "--rate", "0.05")
        assert sent.returncode == 0, sent.stderr
        out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    report = json.loads(rep.read_text())
    assert report["capture"]["totals"]["received"] == 100 and report["capture"]["lost"] == 0
    assert report["capture"]["pipeline"]["registered_bytes"] > 0
    fb = report["filterbank"]
    assert fb["samples_in"] == 50000 and fb["samples_out"] == 50000 // 16
    vdif = tmp_path / "sim.vdif"
    r = run_cli("simulate", *fmt, *sim, "-o", str(vdif))
    assert r.returncode == 0, r.stderr
    cpu = tmp_path / "cpu.fil"
    r = run_cli("filterbank", str(vdif), *opts, "--device", "cpu", "-o", str(cpu))
    assert r.returncode == 0, r.stderr
    from voltstream.io.sigproc import read_filterbank

    a = np.asarray(read_filterbank(live).data[:3125], dtype=np.float64)
    b = np.asarray(read_filterbank(cpu).data[:3125], dtype=np.float64)
    assert a.shape == b.shape == (3125, 32)
    np.testing.assert_allclose(a, b, rtol=2e-4, atol=1e-5 * np.abs(b).max())
