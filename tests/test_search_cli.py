"""`voltstream search FILE.fil` end to end, as a user runs it: `simulate --signal frb`
writes a DADA file, `filterbank` makes a .fil of it, `search` finds the burst at its
DM, time and expected S/N, once even when it sits on a gulp boundary; noise gives
no candidate above 7 sigma; bad options are one line and exit status 2."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest

from cli_process import run_cli
from voltstream.dsp.dedisperse import dispersion_delay_s
from voltstream.io.sigproc import read_filterbank
from voltstream.search.candidates import read_candidates
from voltstream.search.single_pulse import SearchSettings, search_filterbank

# 32 x 0.5 MHz at 1400 MHz, split into 512 channels of 32 us: 0.2 s is 6250 samples.
BAND = ["--format", "ynao", "--chan-bw", "0.5", "--freq", "1400", "--duration", "0.2"]
FRB = ["--signal", "frb", "--dm", "500", "--width", "0.000256", "--fluence", "1.6",
       "--sefd", "10", "--burst-times", "0.1", "--seed", "1"]  # fmt: skip
FB = ["--fine-channels", "16", "--tsamp", "3.2e-5"]
DMS = ["--dm-min", "400", "--dm-max", "600"]
WIDTH = 256e-6


def _make_fil(tmp: Path, signal: list[str]) -> tuple[Path, str]:
    dada, fil = tmp / "x.dada", tmp / "x.fil"
    sim = run_cli("simulate", *BAND, *signal, "--output", str(dada))
    assert sim.returncode == 0, sim.stderr
    fb = run_cli("filterbank", str(dada), *FB, "-o", str(fil))
    assert fb.returncode == 0, fb.stderr
    dada.unlink()
    return fil, sim.stdout


@pytest.fixture(scope="module")
def burst_fil(tmp_path_factory) -> tuple[Path, float]:
    fil, out = _make_fil(tmp_path_factory.mktemp("frb"), FRB)
    snr = re.search(r"matched-filter S/N ([0-9.]+)", out)
    assert snr is not None, out
    return fil, float(snr.group(1))


def _t_top(fil: Path) -> float:
    """The burst's arrival at the highest channel, s from the file's first sample."""
    f = read_filterbank(fil)
    return 0.1 + dispersion_delay_s(500.0, float(f.freqs_mhz.max()), 1400.0)


def test_the_burst_is_found_at_its_dm_time_and_expected_snr(burst_fil, tmp_path):
    fil, expected = burst_fil
    cand, report = tmp_path / "c.cand", tmp_path / "r.json"
    r = run_cli("search", str(fil), *DMS, "--candidates", str(cand), "--report", str(report))
    assert r.returncode == 0, r.stderr
    cands = read_candidates(cand)
    top = max(cands, key=lambda c: c.snr)
    assert abs(top.dm - 500.0) < 5.0
    assert abs(top.time_s - _t_top(fil)) < WIDTH
    assert abs(top.snr / expected - 1) < 0.2, (top.snr, expected)
    assert [c for c in cands if c.snr > 8] == [top]  # one burst, one candidate
    rep = json.loads(report.read_text())["search"]
    assert rep["n_candidates"] == len(cands) and rep["dm_trials"] > 1
    assert rep["top_candidates"][0]["snr"] == pytest.approx(top.snr, rel=1e-5)
    assert f"S/N {top.snr:6.2f}" in r.stdout and "1 gulp(s)" in r.stdout


@pytest.mark.parametrize("shift", [0, -3, 4])
def test_a_burst_on_a_gulp_boundary_is_found_once(burst_fil, tmp_path, shift):
    fil, expected = burst_fil
    f = read_filterbank(fil)
    # Gulps' own parts start at multiples of the gulp: put one at the burst's arrival.
    gulp = int(round(_t_top(fil) / f.tsamp_s)) + shift
    one, cand = tmp_path / "one.cand", tmp_path / "c.cand"
    boxcars = ["--max-width", "0.00105"]  # 32 samples: what a gulp of 2750 allows
    r = run_cli("search", str(fil), *DMS, *boxcars, "-o", str(one))
    assert r.returncode == 0 and "1 gulp(s)" in r.stdout, r.stderr
    r = run_cli("search", str(fil), *DMS, *boxcars, "--gulp", repr(gulp * f.tsamp_s),
                "-o", str(cand))  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert re.search(r"\b([2-9]) gulp\(s\)", r.stdout), r.stdout
    strong = [c for c in read_candidates(cand) if c.snr > 8]
    assert len(strong) == 1, strong
    assert abs(strong[0].time_s - _t_top(fil)) < WIDTH
    assert abs(strong[0].snr / expected - 1) < 0.2
    # Each giant counted once: as many members as the search in one gulp finds.
    (ref,) = [c for c in read_candidates(one) if c.snr > 8]
    assert abs(strong[0].members / ref.members - 1) < 0.1, (strong[0], ref)


def test_pure_noise_gives_no_candidate_above_7_sigma(tmp_path):
    fil, _ = _make_fil(tmp_path, ["--signal", "noise", "--seed", "11"])
    r = run_cli("search", str(fil), *DMS, "--threshold", "7", "--report", str(tmp_path / "r.json"))
    assert r.returncode == 0, r.stderr
    rep = json.loads((tmp_path / "r.json").read_text())["search"]
    # Every S/N value counted as independent: the mean count above 7 sigma is tiny.
    assert rep["expected_false_alarms"] < 0.05
    assert read_candidates(tmp_path / "x.cand") == [] and rep["n_candidates"] == 0
    # and the same data through the in-memory reference agrees: nothing there either.
    f = read_filterbank(fil)
    st = SearchSettings(dm_min=400, dm_max=600, threshold=7)
    assert (
        search_filterbank(np.asarray(f.data, float), f.freqs_mhz, f.tsamp_s, settings=st).candidates
        == []
    )


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--dm-max", "nan"], "--dm-max"),
        (["--threshold", "-1"], "--threshold"),
        (["--dm-min", "-5"], "--dm-min"),
        (["--dm-min", "600", "--dm-max", "400"], "--dm-min 600 is above --dm-max 400"),
        (["--gulp", "0"], "--gulp"),
        (["--gulp", "0.0001"], "give at least"),
        (["--max-width", "inf"], "--max-width"),
        (["--dm-max", "1e6"], "lower --dm-max"),
    ],
)
def test_bad_options_are_one_line_and_exit_2(burst_fil, tmp_path, argv, message):
    fil, _ = burst_fil
    r = run_cli("search", str(fil), "-o", str(tmp_path / "c.cand"), *argv)
    assert r.returncode == 2 and message in r.stderr, r.stderr
    assert len(r.stderr.strip().splitlines()) <= 2 and "Traceback" not in r.stderr


def test_a_file_that_is_not_sigproc_is_one_line_and_exit_2(tmp_path):
    bad = tmp_path / "x.fil"
    bad.write_bytes(b"DADA" * 100)
    r = run_cli("search", str(bad))
    assert r.returncode == 2 and "not a SIGPROC filterbank" in r.stderr, r.stderr
    assert "Traceback" not in r.stderr
    r = run_cli("search", str(tmp_path / "missing.fil"))
    assert r.returncode == 2 and "missing.fil" in r.stderr and "Traceback" not in r.stderr


def test_lost_8_bit_samples_are_masked_and_counted(tmp_path):
    from voltstream.io.sigproc import SigprocWriter
    from voltstream.observation import Observation

    obs = Observation(nchan=64, npol=1, freq_mhz=1400.0, bw_mhz=16.0, tsamp_s=64e-6)
    codes = np.random.default_rng(2).normal(128, 16, (20000, 1, 64)).round().clip(0, 255)
    codes[7000:7300] = 128  # how filterbank writes lost samples
    w = SigprocWriter(tmp_path / "n.fil", obs, 1)
    w.write_row(codes.astype(np.uint8))
    w.close()
    r = run_cli("search", str(tmp_path / "n.fil"), "--dm-max", "100", "--gulp", "0.4",
                "--threshold", "7", "--report", str(tmp_path / "r.json"))  # fmt: skip
    assert r.returncode == 0, r.stderr
    rep = json.loads((tmp_path / "r.json").read_text())["search"]
    assert rep["lost_samples"] == 300 and rep["gulps"] > 1
    assert rep["n_candidates"] == 0
