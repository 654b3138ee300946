"""The host side of the GPU's real-to-complex stage (fold/gpu_real.py), without a GPU:
its bookkeeping across chunks (carry, the mixer's phase, which outputs a lost input
touched) and the sum real_to_complex.cu computes (signed taps, one sign per output),
checked against dsp/real.py RealToComplex, the stage's oracle, chunk sizes apart."""

from __future__ import annotations

import numpy as np
import pytest

from voltstream.dsp.real import TAPS, RealToComplex, complex_observation
from voltstream.fold.gpu_real import RealCarry, signed_taps
from voltstream.observation import Observation


class Samples:
    """A reader of real samples (n, nchan, npol) with lost samples, in blocks."""

    def __init__(self, x, ok):
        self.x, self.ok = x, ok
        self.obs = Observation(nchan=x.shape[1], npol=x.shape[2], freq_mhz=100.0, bw_mhz=16.0,
                               tsamp_s=1 / 32e6, ndim=1, start_sec=3.0)  # fmt: skip
        self.nsamp = len(x)

    def read_blocks(self, n):
        for i in range(0, len(self.x), n):
            ok = self.ok[i : i + n]
            yield self.x[i : i + n] if ok.all() else (self.x[i : i + n], ok)


def oracle(x, ok, block):
    """RealToComplex's outputs and their validity, blocks joined."""
    out, valid = [], []
    for b in RealToComplex(Samples(x, ok)).read_blocks(block):
        blk, v = b if isinstance(b, tuple) else (b, np.ones(len(b), bool))
        out.append(blk)
        valid.append(v)
    return np.concatenate(out), np.concatenate(valid)


def kernel_model(x, ok, chunks):
    """What the GPU stage computes, chunk by chunk, as real_to_complex.cu sums it:
    RealCarry's steps, lost inputs read as 0, the signed taps split into even (real)
    and odd (imaginary) ones, the sign of output k, lost outputs written as 0."""
    rc, st = RealCarry(), signed_taps()
    carry = np.zeros((0,) + x.shape[1:], np.float32)
    outs, valids, a = [], [], 0
    for n in chunks:
        xin, okin = x[a : a + n], ok[a : a + n]
        a += n
        step = rc.step(None if okin.all() else okin, n)
        assert step.carry_len == len(carry)
        xs = np.concatenate([carry, np.where(okin[:, None, None], xin, 0)]).astype(np.float32)
        out = np.zeros((step.nout,) + x.shape[1:], np.complex64)
        for k in range(step.nout):
            seg = xs[2 * k : 2 * k + TAPS][::-1]  # seg[j] = input 2k + TAPS - 1 - j
            re = np.tensordot(st[0::2], seg[0::2], axes=1)
            im = np.tensordot(st[1::2], seg[1::2], axes=1)
            sign = -1 if ((step.start % 4 >> 1) + k) & 1 else 1
            out[k] = sign * (re + 1j * im)
        v = np.ones(step.nout, bool) if step.out_valid is None else step.out_valid
        out[~v] = 0
        outs.append(out)
        valids.append(v)
        carry = xs[2 * step.nout :]
        assert len(carry) == step.new_len <= TAPS - 1
    return np.concatenate(outs), np.concatenate(valids)


@pytest.mark.parametrize("chunks", [[300, 1, 64, 7, 2000, 129, 500], [1000] * 3, [63, 2, 3001]])
def test_the_kernels_sum_across_chunks_equals_real_to_complex(chunks):
    rng = np.random.default_rng()
    n = sum(chunks)
    x = rng.integers(-2, 2, (n, 3, 2)).astype(np.float32) + 0.5
    ok = np.ones(n, bool)
    ok[1500:1520] = False  # a lost frame
    ok[int(rng.integers(0, n))] = False
    want, want_ok = oracle(x, ok, 777)
    got, got_ok = kernel_model(x, ok, chunks)
    assert len(got) == len(want) == (n - (TAPS - 1) + 1) // 2
    np.testing.assert_array_equal(got_ok, want_ok)
    assert not got_ok.all()
    np.testing.assert_allclose(got[got_ok], want[want_ok], rtol=0, atol=2e-6)
    assert not got[~got_ok].any()  # lost outputs are zeros, as the fold wants them


def test_real_carry_counts_like_the_converter():
    rc = RealCarry()
    s = rc.step(None, 10)  # too few inputs for one output: all carried
    assert (s.nout, s.carry_len, s.new_len, s.start) == (0, 0, 10, 0)
    s = rc.step(None, 60)  # 70 inputs: outputs 0..3 (inputs up to 2*3 + 64)
    assert (s.nout, s.carry_len, s.new_len, s.start) == (3, 10, 64, 0)
    s = rc.step(None, 1)  # 65 carried + 1: one output from carry index 0
    assert (s.nout, s.carry_len, s.start) == (1, 64, 6)
    assert RealCarry.max_out(1000) >= max(
        (c + 1000 - TAPS + 2) // 2 for c in range(TAPS)
    )  # the carry never holds TAPS inputs


def test_lost_input_marks_the_outputs_it_touches_and_is_carried():
    rc = RealCarry()
    valid = np.ones(100, bool)
    valid[99] = False  # the last input: carried, touches the next chunk's outputs
    s = rc.step(valid, 100)
    assert s.nout == 18 and (s.out_valid is None or s.out_valid.all())
    s = rc.step(None, 100)
    # Input 99 feeds outputs k with 2k <= 99 <= 2k + 64: k = 18 .. 49, here 0 .. 31.
    assert np.flatnonzero(~s.out_valid).tolist() == list(range(32))


def test_complex_observation_is_the_converters():
    x = np.zeros((10, 2, 1), np.float32)
    r = Samples(x, np.ones(10, bool))
    assert complex_observation(r.obs) == RealToComplex(r).obs
    o = complex_observation(r.obs)
    assert (o.ndim, o.tsamp_s) == (2, 2 * r.obs.tsamp_s)
    assert o.start_sec == pytest.approx(3.0 + 32 / 32e6)


def test_signed_taps_are_the_converters_float32_taps():
    from voltstream.dsp.real import halfband_lowpass

    h = halfband_lowpass().astype(np.float32)
    st = signed_taps()
    assert st.dtype == np.float32 and len(st) == TAPS
    np.testing.assert_array_equal(np.abs(st), np.abs(h))
    assert st[0] * h[0] > 0 and st[1] * h[1] > 0 and st[2] * h[2] < 0 and st[3] * h[3] < 0
