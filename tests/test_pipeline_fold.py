import numpy as np
import pytest

from voltstream.errors import ConfigError
from voltstream.fold.reference import FoldSettings, profile_snr
from voltstream.io.polyco import ConstantPeriod, Polyco, polyco_entries_from_spin
from voltstream.observation import Observation
from voltstream.pipeline.fold import fold_file
from voltstream.sim.signal import synthesize

DM = 26.833
PERIOD = 1e-3
NBIN = 128


class MemoryReader:
    """The reader interface: .obs and .read_blocks(nsamp), optionally with masks."""

    def __init__(self, obs, data, valid=None):
        self.obs = obs
        self.data = data
        self.valid = valid

    def read_blocks(self, nsamp):
        for a in range(0, self.data.shape[0], nsamp):
            block = self.data[a : a + nsamp]
            if self.valid is None:
                yield block
            else:
                yield block, self.valid[a : a + nsamp]


def make_obs(bw):
    return Observation(
        nchan=4,
        npol=2,
        freq_mhz=1400.0,
        bw_mhz=bw,
        tsamp_s=0.25e-6,
        start_mjd=60123,
        start_sec=4567.125,
    )


def pulsar(obs, seconds=0.08, seed=1, phase=0.25):
    return synthesize(
        obs,
        seconds,
        signal="pulsar",
        dm=DM,
        period_s=PERIOD,
        duty=0.05,
        pulse_phase=phase,
        pulse_amplitude=1.0,
        seed=seed,
    )


def fwhm_bins(prof):
    p = prof - np.median(prof)
    return int(np.count_nonzero(p > p.max() / 2))


@pytest.mark.parametrize("bw", [16.0, -16.0])
def test_simulated_pulsar_is_recovered_at_its_phase_and_width(bw):
    obs = make_obs(bw)
    x = pulsar(obs)
    pred = ConstantPeriod(PERIOD, obs.start_mjd, obs.start_sec)
    calls = []
    arch = fold_file(
        MemoryReader(obs, x),
        FoldSettings(DM, pred, NBIN, 0.04, block_samples=50_000),
        progress=lambda a, b: calls.append((a, b)),
    )
    assert arch.data.shape == (2, 1, 4, NBIN) and arch.dm == DM
    assert calls[-1][0] == x.shape[0] and calls[-1][1] > 0.95 * x.shape[0]
    assert arch.history and "DM=26.833" in arch.history[0]
    prof = arch.profile()
    # intrinsic: Gaussian of FWHM 0.05 turns centred on 0.25, i.e. between bins 31 and 32
    assert np.argmax(prof) in (31, 32)
    assert 5 <= fwhm_bins(prof) <= 8
    assert profile_snr(prof) > 100
    # every channel and sub-integration aligned
    for s in range(arch.nsub):
        for c in range(4):
            assert abs(np.argmax(arch.data[s, 0, c]) - 31.5) <= 2
    assert np.all(arch.weights > 0.95)
    np.testing.assert_allclose(arch.period_s, PERIOD)


def test_without_coherent_dedispersion_the_pulse_is_smeared():
    # A control for the test above: folded at DM 0 the same data give a much
    # weaker profile, so a pass there really needs the dedispersion.
    obs = make_obs(16.0)
    x = pulsar(obs)
    pred = ConstantPeriod(PERIOD, obs.start_mjd, obs.start_sec)
    good = fold_file(MemoryReader(obs, x), FoldSettings(DM, pred, NBIN, None))
    bad = fold_file(MemoryReader(obs, x), FoldSettings(0.0, pred, NBIN, None))
    assert profile_snr(bad.profile()) < 0.5 * profile_snr(good.profile())


def test_lost_samples_are_excluded_and_lower_weights():
    obs = make_obs(-16.0)
    x = pulsar(obs, seed=4).copy()
    valid = np.ones(x.shape[0], bool)
    valid[170_000:190_000] = False  # a burst of lost packets, in sub-integration 1
    x[170_000:190_000] = 50.0  # whatever the reader left there must not matter
    pred = ConstantPeriod(PERIOD, obs.start_mjd, obs.start_sec)
    arch = fold_file(
        MemoryReader(obs, x, valid), FoldSettings(DM, pred, NBIN, 0.04, block_samples=30_000)
    )
    assert arch.excluded_samples == 20_000
    assert np.all(arch.weights[0] > 0.95)
    assert np.all(arch.weights[1] < 0.93) and np.all(arch.weights[1] > 0.8)
    prof = arch.profile()
    assert np.argmax(prof) in (31, 32) and profile_snr(prof) > 80
    assert arch.data.max() < 5


def test_polyco_predictor_and_coherence_products():
    obs = make_obs(16.0)
    x = pulsar(obs, seconds=0.05, seed=5, phase=0.6)
    # a polyco whose phase 0 is the first sample and whose period is PERIOD
    entries = polyco_entries_from_spin(
        "J0000+0000",
        1 / PERIOD,
        0.0,
        obs.start_mjd,
        obs.start_sec,
        obs.start_mjd,
        obs.start_sec,
        1,
        30,
    )
    pc = Polyco(entries)
    arch = fold_file(MemoryReader(obs, x), FoldSettings(DM, pc, NBIN, None, pol_mode="AABBCRCI"))
    assert arch.pol_type == "AABBCRCI" and arch.data.shape[1] == 4
    assert arch.polyco_text == pc.text
    prof = arch.profile()
    assert abs(np.argmax(prof) - (0.6 * NBIN - 0.5)) <= 1
    # unpolarised noise: the cross products carry no pulse
    cross = arch.data[0, 2:].sum(axis=1)
    assert np.abs(cross).max() < 0.2 * (prof.max() - np.median(prof))


def test_input_shorter_than_one_fft_is_refused():
    obs = make_obs(16.0)
    x = pulsar(obs, seconds=0.002)
    pred = ConstantPeriod(PERIOD, obs.start_mjd, obs.start_sec)
    with pytest.raises(ConfigError, match="shorter than one dedispersion FFT"):
        fold_file(MemoryReader(obs, x), FoldSettings(DM, pred, NBIN, None))
    with pytest.raises(ConfigError, match="needs 2 polarisations"):
        one = Observation(nchan=4, npol=1, freq_mhz=1400.0, bw_mhz=16.0, tsamp_s=0.25e-6)
        fold_file(
            MemoryReader(one, x[..., :1]), FoldSettings(DM, pred, NBIN, None, pol_mode="IQUV")
        )
    with pytest.raises(ConfigError, match="critically sampled"):
        wrong = Observation(nchan=4, npol=2, freq_mhz=1400.0, bw_mhz=16.0, tsamp_s=0.5e-6)
        fold_file(MemoryReader(wrong, x), FoldSettings(DM, pred, NBIN, None))


def test_gpu_engines_are_made_from_the_settings():
    """The drivers make every GPU engine by ``from_settings``: the engine gets the plan
    of the settings (fold/plan.py) and a driver's own chunk wins over the settings'."""
    from voltstream.fold.gpu import _FolderBase

    seen = {}

    class Recorder(_FolderBase):
        def __init__(self, *args, **kw):  # records instead of building (no GPU here)
            seen.update(args=args, kw=kw)

    obs = Observation(nchan=4, npol=2, freq_mhz=1400.0, bw_mhz=16.0, tsamp_s=0.25e-6)
    s = FoldSettings(12.5, "pred", 64, 2.0, "IQUV", "circular", nfft=4096, block_samples=1000)
    Recorder.from_settings(obs, s, packed="layout")
    (plan,) = seen["args"]
    assert plan.obs is obs and plan.settings is s and plan.nfft == 4096
    assert plan.f_ref_mhz is None and plan.band_freqs_mhz is None
    assert seen["kw"] == dict(chunk_samples=1000, packed="layout")
    band = np.arange(8) * 4.0 + 1386.0
    Recorder.from_settings(obs, s, chunk_samples=7, band_freqs_mhz=band, f_ref_mhz=1400.0)
    (plan,) = seen["args"]
    assert seen["kw"]["chunk_samples"] == 7 and plan.f_ref_mhz == 1400.0
    assert plan.band_freqs_mhz is band
