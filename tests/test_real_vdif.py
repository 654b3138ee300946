"""Real-sampled VDIF (2-bit, as DBBC3/R2DBE send it) folds end to end: each channel is
down-converted to complex baseband (voltstream.dsp.real) before coherent dedispersion.
The converter is checked on a tone (exact frequency, amplitude and phase across block
boundaries) and the whole path on a simulated pulsar against the complex original."""

from __future__ import annotations

import json

import numpy as np
import pytest

from voltstream.cli import main
from voltstream.dsp.real import RealToComplex
from voltstream.io.vdif import open_vdif
from voltstream.observation import Observation
from voltstream.sim.packetize import depacketize_vdif, packetize_vdif


class Samples:
    """A reader over an array of real samples (n, nchan, npol), optionally with losses."""

    def __init__(self, x, lost=()):
        self.x = x
        self.obs = Observation(nchan=x.shape[1], npol=x.shape[2], freq_mhz=100.0, bw_mhz=16.0,
                               tsamp_s=1 / 32e6, ndim=1)  # fmt: skip
        self.nsamp = len(x)
        self.ok = np.ones(len(x), bool)
        self.ok[list(lost)] = False

    def read_blocks(self, n):
        for i in range(0, len(self.x), n):
            ok = self.ok[i : i + n]
            yield self.x[i : i + n] if ok.all() else (self.x[i : i + n], ok)


def converted(reader, block):
    out, ok = [], []
    for b in RealToComplex(reader).read_blocks(block):
        blk, v = b if isinstance(b, tuple) else (b, np.ones(len(b), bool))
        out.append(blk)
        ok.append(v)
    return np.concatenate(out), np.concatenate(ok)


@pytest.mark.parametrize("block", [333, 4096, 1 << 15])
def test_a_real_tone_becomes_one_complex_tone_whatever_the_blocks(block):
    fs, bw, f, n = 32e6, 16e6, 5.3e6, 1 << 15
    t = np.arange(n)
    x = (100 * np.cos(2 * np.pi * f / fs * t + 0.3)).astype(np.float32)[:, None, None]
    out, ok = converted(Samples(x), block)
    assert ok.all() and len(out) == (n - 64) // 2
    z = out[:, 0, 0]
    k = np.arange(len(z))
    ref = z[100] * np.exp(2j * np.pi * (f - bw / 2) / bw * (k - 100))  # f - B/2 at rate B
    assert abs(abs(z[100]) - 50) < 0.01  # the positive-frequency half of amplitude 100
    assert np.abs(z - ref).max() < 1e-3 * 50
    obs = RealToComplex(Samples(x)).obs
    assert obs.ndim == 2 and obs.tsamp_s == pytest.approx(1 / 16e6)


def test_lost_input_samples_mark_every_output_they_touch():
    x = np.random.default_rng(1).normal(0, 10, (4096, 2, 1)).astype(np.float32)
    _, ok = converted(Samples(x, lost=[1000]), 512)
    bad = np.flatnonzero(~ok)
    # Output k covers inputs 2k .. 2k + 64: input 1000 touches k = 468 .. 500.
    assert bad.tolist() == list(range(468, 501))


def _real_from_complex(z: np.ndarray) -> np.ndarray:
    """Complex baseband at rate B -> real samples at rate 2B of the same band (a
    circular upsampling, then a shift of +B/2 and the real part, times 2)."""
    n = len(z)
    spec = np.fft.fft(z, axis=0)
    up = np.zeros((2 * n,) + z.shape[1:], complex)
    up[: n // 2], up[-(n // 2) :] = spec[: n // 2], spec[-(n // 2) :]
    zz = np.fft.ifft(up, axis=0) * 2
    shift = np.exp(0.5j * np.pi * np.arange(2 * n))[:, None, None]
    return 2 * np.real(zz * shift)


def test_two_bit_real_vdif_folds_like_its_complex_original(tmp_path):
    args = ["--nchan", "4", "--chan-bw", "1", "--vdif-payload", "800"]
    pulsar = ["--dm", "5", "--period", "0.02"]
    c = tmp_path / "c.vdif"
    assert main(["simulate", "--format", "vdif", *args, *pulsar, "--duty", "0.1",
                 "--duration", "1", "--output", str(c)]) == 0  # fmt: skip
    _, z = depacketize_vdif(np.fromfile(c, np.uint8).reshape(-1, 832))
    x = _real_from_complex(z.astype(np.complex128))
    x *= 1.0 / x.std()  # 2-bit levels at +-1 and +-3.34: about one sigma per step
    r = tmp_path / "r.vdif"
    # 800 bytes of 2-bit real x 4 channels = 800 samples a frame; 2 MS/s per channel.
    packetize_vdif(x.astype(np.float32), frames_per_second=2500, nbit=2, complex_data=False,
                   samples_per_frame=800).tofile(r)  # fmt: skip
    sidecar = json.loads(c.with_suffix(".vdif.json").read_text())
    sidecar["frames_per_second"] = 2500
    r.with_suffix(".vdif.json").write_text(json.dumps(sidecar))
    f = open_vdif(r)
    assert (f.obs.ndim, f.obs.nbit, f.obs.tsamp_s) == (1, 2, pytest.approx(0.5e-6))
    assert f.valid_samples(0, f.nsamp // 800) is None  # every frame where it belongs
    profiles = {}
    for name, path in (("complex", c), ("real", r)):
        out = tmp_path / f"{name}.fits"
        assert main(["fold", str(path), "--device", "cpu", *pulsar, "--nbin", "64",
                     "-o", str(out)]) == 0  # fmt: skip
        from astropy.io import fits

        with fits.open(out) as hd:
            data = hd["SUBINT"].data["DATA"].astype(float)
        prof = data.sum(axis=(0, 1, 2)) if data.ndim == 4 else data.sum(axis=0).ravel()
        profiles[name] = (prof - np.median(prof)) / prof.std()
    a, b = profiles["complex"], profiles["real"]
    assert np.argmax(a) == pytest.approx(np.argmax(b), abs=1)
    assert np.corrcoef(a, b)[0, 1] > 0.9
