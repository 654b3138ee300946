"""One plan per fold (fold/plan.py): the Dedisperser is built in one place, and its
numbers reach the engines, the cluster's merge plan and the archive's COHDDISP table."""

from __future__ import annotations

import ast
from pathlib import Path

import numpy as np
from astropy.io import fits

from voltstream.dsp.dedisperse import Dedisperser, dispersion_delay_s
from voltstream.fold.plan import FoldPlan
from voltstream.fold.reference import FoldSettings
from voltstream.io.polyco import ConstantPeriod
from voltstream.io.psrfits import write_psrfits
from voltstream.observation import Observation
from voltstream.pipeline.fold import StreamFold, fold_file

PACKAGE = Path(__file__).resolve().parents[1] / "python" / "voltstream"
RNG = np.random.default_rng()


def _constructions(name: str) -> list[str]:
    """Every ``name(...)`` call in the package's source, as path:line."""
    where = []
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Call):
                f = node.func
                called = f.id if isinstance(f, ast.Name) else getattr(f, "attr", None)
                if called == name:
                    where.append(f"{path.relative_to(PACKAGE)}:{node.lineno}")
    return where


def test_the_dedisperser_is_built_only_by_the_fold_plan():
    where = _constructions("Dedisperser")
    assert len(where) == 1 and where[0].startswith("fold/plan.py:"), (
        f"Dedisperser built at {where}: build a FoldPlan (fold/plan.py) and use its numbers"
    )


def _obs(nchan: int = 8, freq: float = 1400.0, bw: float = -32.0) -> Observation:
    return Observation(nchan=nchan, npol=2, freq_mhz=freq, bw_mhz=bw,
                       tsamp_s=abs(nchan / (bw * 1e6)))  # fmt: skip


def test_plan_numbers_are_its_dedispersers():
    obs = _obs()
    dm = float(RNG.uniform(5, 80))
    pred = ConstantPeriod(0.05, obs.start_mjd, obs.start_sec)
    plan = FoldPlan(obs, FoldSettings(dm, pred, 32, None))
    dd = Dedisperser(dm, obs.chan_freqs_mhz, obs.chan_bw_mhz)
    assert (plan.nfft, plan.step, plan.overlap) == (dd.nfft, dd.step, dd.overlap)
    assert (plan.head, plan.tail) == (dd.discard_head, dd.discard_tail)
    np.testing.assert_array_equal(plan.dedisperser.response, dd.response)
    folder = plan.new_folder()
    np.testing.assert_array_equal(
        folder.delay_s, dispersion_delay_s(dm, obs.chan_freqs_mhz, obs.freq_mhz)
    )
    assert plan.new_folder() is not folder  # a folder holds sums: one per engine


def test_a_subband_plan_is_cut_as_the_whole_band():
    band = _obs(nchan=16, freq=1400.0, bw=64.0)
    sub = _obs(nchan=4, freq=float(band.chan_freqs_mhz[2:6].mean()), bw=16.0)
    dm = float(RNG.uniform(5, 80))
    s = FoldSettings(dm, ConstantPeriod(0.05, 60000, 0.0), 32, 1.0)
    whole = FoldPlan(band, s)
    plan = FoldPlan(sub, s, band_freqs_mhz=band.chan_freqs_mhz, f_ref_mhz=band.freq_mhz)
    alone = FoldPlan(sub, s)
    assert (plan.nfft, plan.head, plan.tail) == (whole.nfft, whole.head, whole.tail)
    assert plan.overlap > alone.overlap  # the band's lowest channel smears most
    np.testing.assert_array_equal(
        plan.new_folder().delay_s, dispersion_delay_s(dm, sub.chan_freqs_mhz, band.freq_mhz)
    )


class _Memory:
    """A reader of complex samples held in memory."""

    def __init__(self, obs: Observation, x: np.ndarray) -> None:
        self.obs, self.x = obs, x

    def read_blocks(self, n: int):
        for a in range(0, self.x.shape[0], n):
            yield self.x[a : a + n]


def test_the_archive_records_its_folds_plan(tmp_path):
    """The fold's archive carries its plan's FFT length and cut, and the PSRFITS writer
    records those, not numbers of its own."""
    obs = _obs(nchan=4, bw=-16.0)
    s = FoldSettings(30.0, ConstantPeriod(0.01, obs.start_mjd, obs.start_sec), 16, None)
    plan = FoldPlan(obs, s)
    n = 4 * plan.nfft
    x = (RNG.standard_normal((n, 4, 2)) + 1j * RNG.standard_normal((n, 4, 2))).astype(np.complex64)
    arch = fold_file(_Memory(obs, x), s)
    assert arch.coherent_nfft == plan.nfft
    assert arch.coherent_discard == (plan.head, plan.tail)
    assert f"nfft={plan.nfft} overlap={plan.overlap}" in arch.history[-1]
    write_psrfits(tmp_path / "a.fits", arch)
    with fits.open(tmp_path / "a.fits") as h:
        d = h["COHDDISP"].data
        assert set(d["NCHIRP"]) == {plan.nfft}
        assert set(d["NCYC_POS"]) == {plan.head} and set(d["NCYC_NEG"]) == {plan.tail}
    # A node's plan (the whole band's cut) is what the file says, not a recomputation.
    arch.coherent_discard = (plan.head + 3, plan.tail + 5)
    write_psrfits(tmp_path / "b.fits", arch)
    with fits.open(tmp_path / "b.fits") as h:
        d = h["COHDDISP"].data
        assert set(d["NCYC_POS"]) == {plan.head + 3} and set(d["NCYC_NEG"]) == {plan.tail + 5}


def test_stream_fold_uses_the_plan_it_is_given():
    obs = _obs(nchan=4, bw=16.0)
    s = FoldSettings(10.0, ConstantPeriod(0.01, obs.start_mjd, obs.start_sec), 16, None)
    plan = FoldPlan(obs, s, f_ref_mhz=1500.0)
    fold = StreamFold(obs, s, plan)
    assert fold.plan is plan and fold.dd is plan.dedisperser
    assert fold.folder.f_ref_mhz == 1500.0


def test_the_cluster_merge_plan_has_the_whole_bands_plan():
    from voltstream.cluster.driver import plan_observation

    band = _obs(nchan=8, freq=1400.0, bw=32.0)
    halves = [
        _obs(nchan=4, freq=float(band.chan_freqs_mhz[i : i + 4].mean()), bw=16.0) for i in (0, 4)
    ]
    s = FoldSettings(40.0, ConstantPeriod(0.01, 60000, 0.0), 16, 1.0)
    cp = plan_observation([("n0", "a", halves[0]), ("n1", "b", halves[1])], s, "out.fits", 1.0)
    whole = FoldPlan(band, s)
    assert cp.merge.coherent_nfft == whole.nfft
    assert cp.merge.coherent_discard == (whole.head, whole.tail)
    assert all(j.settings.nfft == whole.nfft for j in cp.jobs)
