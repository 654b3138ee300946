"""predictor_from_par against REAL PINT: our polycos predict PINT's own model phases.

Runs when PINT (pint-pulsar, in requirements-dev.txt) is importable. Everything runs
offline (astropy with no internet; an empty astropy cache is fine): the models use
EPHEM builtin (astropy's ERFA ephemeris, no .bsp file) and CLK TT(TAI) (no BIPM
file); the geocentre needs no clock file, CHIME and GMRT get a synthetic
gps2utc.clk the way io/par.py tells a real offline site to provide the real one.
None of these choices matters to the check: the polycos and the reference phases
come from the same PINT model and clock chain.

Tolerance (``_tolerance``). A polyco with 12 coefficients over 60 minutes fits
these models to ~1e-10 turns and RPHASE's 9 decimals are absorbed by the constant
coefficient, so entries evaluated in long double should match PINT to ~1e-8 turns
plus PINT's own resolution (F0 x 3.1e-10 s: 1e-7 turns at 339 Hz). The predictor's
``phase()`` returns float64 turns, exact only to a few spacings of the absolute
phase (1.5e-5 turns at 1.6e11 turns); the PSRFITS POLYCO columns are doubles.
"""

import numpy as np
import pytest

pint_toa = pytest.importorskip("pint.toa")

from astropy.config import paths  # noqa: E402
from astropy.utils import data  # noqa: E402

from voltstream import cli  # noqa: E402
from voltstream.errors import ConfigError  # noqa: E402
from voltstream.io.par import load_pint_model, predictor_from_par  # noqa: E402
from voltstream.io.polyco import Polyco  # noqa: E402
from voltstream.io.psrfits import read_psrfits  # noqa: E402

RNG = np.random.default_rng()
CLOCK_INDEX_URL = "https://raw.githubusercontent.com/ipta/pulsar-clock-corrections/main/index.txt"

MSP = """PSR            J1909-3744
RAJ            19:09:47.4366120
DECJ           -37:44:14.46670
PMRA           -9.517
PMDEC          -35.797
PX             0.861
POSEPOCH       55000
F0             339.31568732238830864
F1             -1.6148e-15
PEPOCH         55000
DM             10.3932
EPHEM          builtin
CLK            TT(TAI)
UNITS          TDB
"""

BINARY_MSP = MSP.replace("J1909-3744", "J1909-3744B") + (
    "BINARY         ELL1\n"
    "PB             1.533449474406\n"
    "A1             1.89799106\n"
    "TASC           53630.723214894\n"
    "EPS1           2.7e-08\n"
    "EPS2           -7.4e-08\n"
    "SINI           0.998\n"
    "M2             0.2\n"
    "TZRMJD         60000.123456789\n"
    "TZRSITE        coe\n"
    "TZRFRQ         1400\n"
)

SLOW = """PSRJ           J1136+1551
RAJ            11:36:03.2477
DECJ           +15:51:04.48
F0             0.84181186186
F1             -2.6472e-15
F2             1.5e-27
PEPOCH         56000
DM             4.8451
EPHEM          builtin
CLK            TT(TAI)
UNITS          TDB
"""


def _pint_phase(model, site, freq_mhz, mjd, secs):
    """PINT's absolute phase (integer, fraction; long double) at UTC mjd + secs."""
    toas = pint_toa.get_TOAs_array(
        (np.full(secs.size, float(mjd)), secs / 86400.0),
        obs=site,
        freqs=freq_mhz,
        ephem="builtin",
        include_bipm=False,
    )
    ph = model.phase(toas, abs_phase=True)
    return (
        np.asarray(ph.int.value, dtype=np.longdouble),
        np.asarray(ph.frac.value, dtype=np.longdouble),
    )


def _tolerance(f0_hz, mjd):
    """Turns: the fit's 1e-8 plus PINT's own phase quantisation.

    PINT holds TDB as a long double MJD, whose spacing (3.1e-10 s near MJD 60000 with
    x86 80-bit long double) steps its phase by F0 times that: 1e-7 turns at 339 Hz;
    the time passes through a few such roundings, so three steps are allowed.
    """
    return 1e-8 + 3 * f0_hz * 86400 * float(np.spacing(np.longdouble(mjd)))


def _entry_errors(pred, mjd, secs, want_int, want_frac):
    """Each time's nearest entry, evaluated in long double, minus PINT's phase (turns)."""
    tmid = np.array([(e.tmid_mjd - mjd) * 86400.0 + e.tmid_frac * 86400.0 for e in pred.entries])
    err = np.empty(secs.size)
    for i, s in enumerate(secs):
        e = pred.entries[int(np.argmin(np.abs(tmid - s)))]
        dt = np.longdouble(e.dt_min(mjd, s))
        assert abs(dt) <= e.span_min / 2 + 1e-9
        poly = np.polynomial.polynomial.polyval(dt, e.coeffs.astype(np.longdouble))
        rest = np.longdouble(e.rphase_frac) + 60 * dt * np.longdouble(e.f0_hz) + poly
        err[i] = float((np.longdouble(e.rphase_int) - want_int[i]) + (rest - want_frac[i]))
    return err


@pytest.fixture
def local_clocks(tmp_path, monkeypatch):
    """PINT's clock data offline, as the module docstring of io/par.py says to provide it.

    gps2utc.clk (topocentric sites need it) goes into $PINT_CLOCK_OVERRIDE; it is
    synthetic (zero correction): its value does not matter here, since the polycos
    and the reference phases both use it. PINT also reads the clock repository's
    index.txt through astropy's cache first: an index listing no files is imported
    into an empty temporary cache.
    """
    clocks = tmp_path / "clock"
    clocks.mkdir()
    (clocks / "gps2utc.clk").write_text("# UTC(GPS) UTC\n40000.0 0.0\n70000.0 0.0\n")
    monkeypatch.setenv("PINT_CLOCK_OVERRIDE", str(clocks))
    index = tmp_path / "index.txt"
    index.write_text("# lists no files: PINT uses $PINT_CLOCK_OVERRIDE alone\n")
    (tmp_path / "cache").mkdir()
    with paths.set_temp_cache(tmp_path / "cache"):
        data.import_file_to_cache(CLOCK_INDEX_URL, str(index))
        yield


@pytest.mark.parametrize(
    ("par_text", "site"),
    [(MSP, "coe"), (BINARY_MSP, "coe"), (SLOW, "coe"), (BINARY_MSP, "chime"), (SLOW, "gmrt")],
    ids=["msp-coe", "binary-msp-coe", "slow-coe", "binary-msp-chime", "slow-gmrt"],
)
def test_polycos_match_pint_model_phase(tmp_path, request, par_text, site):
    if site != "coe":  # the geocentre needs no clock file at all
        request.getfixturevalue("local_clocks")
    par = tmp_path / "p.par"
    par.write_text(par_text)
    mjd = 60000 + int(RNG.integers(0, 900))
    start = float(RNG.uniform(0, 86400))
    duration = float(RNG.uniform(600, 4 * 3600))
    freq = float(RNG.uniform(300, 3000))
    pc = predictor_from_par(par, mjd, start, duration, freq, site=site)
    assert pc.par_text == par_text and pc.psr == par_text.split()[1]
    assert all(e.site == site and e.ref_freq_mhz == freq for e in pc.entries)
    tol = _tolerance(pc.entries[0].f0_hz, mjd)
    assert all(10**e.log10_rms < tol for e in pc.entries)
    secs = start + np.sort(RNG.uniform(0, duration, 300))
    want_int, want_frac = _pint_phase(load_pint_model(par), site, freq, mjd, secs)
    for pred in (pc, Polyco.from_text(pc.text)):  # in memory, and as the POLYCO HDU holds it
        err = _entry_errors(pred, mjd, secs, want_int, want_frac)
        assert np.max(np.abs(err)) < tol, (np.max(np.abs(err)), tol)
        got = np.asarray(pred.phase(mjd, secs), dtype=np.longdouble)
        spacing = np.spacing(np.max(np.abs(got)).astype(np.float64))
        full = ((got - want_int) - want_frac).astype(np.float64)
        assert np.max(np.abs(full)) < tol + 4 * spacing
    # The apparent spin frequency: PINT's phase slope over +-1 s around each time.
    h = 1.0
    hi_int, hi_frac = _pint_phase(load_pint_model(par), site, freq, mjd, secs[:20] + h)
    lo_int, lo_frac = _pint_phase(load_pint_model(par), site, freq, mjd, secs[:20] - h)
    slope = (((hi_int - lo_int) + (hi_frac - lo_frac)) / (2 * h)).astype(np.float64)
    np.testing.assert_allclose(pc.freq_hz(mjd, secs[:20]), slope, rtol=1e-9)


def test_phase_zero_is_pinned_to_pepoch(tmp_path):
    """Without TZRMJD, two observations' polycos agree on phase zero (not PINT's first TOA)."""
    par = tmp_path / "p.par"
    par.write_text(SLOW)
    mjd = 60000 + int(RNG.integers(0, 900))
    a = predictor_from_par(par, mjd, 1000.0, 600.0, 1400.0)
    b = predictor_from_par(par, mjd, 40000.0, 600.0, 1400.0)
    # Extend one by a model through the other's time: both from one PINT model.
    model = load_pint_model(par)
    assert float(model.TZRMJD.value) == 56000.0 and model.TZRSITE.value == "@"
    for pc, t in ((a, 1300.0), (b, 40300.0)):
        want_int, want_frac = _pint_phase(model, "coe", 1400.0, mjd, np.array([t]))
        err = _entry_errors(pc, mjd, np.array([t]), want_int, want_frac)
        assert abs(err[0]) < _tolerance(pc.entries[0].f0_hz, mjd)


def test_missing_ephemeris_and_clock_are_named(tmp_path, monkeypatch):
    (tmp_path / "cache").mkdir()
    monkeypatch.setenv("PINT_CLOCK_OVERRIDE", str(tmp_path))  # holds no clock file
    par = tmp_path / "p.par"
    with paths.set_temp_cache(tmp_path / "cache"):  # empty, and no internet
        par.write_text(SLOW.replace("EPHEM          builtin", "EPHEM          DE436"))
        with pytest.raises(ConfigError, match=r"ephemeris de436 \(de436\.bsp\) is not avail"):
            predictor_from_par(par, 60500, 0.0, 60.0, 1400.0)
        par.write_text(SLOW.replace("TT(TAI)", "TT(BIPM1999)"))
        with pytest.raises(ConfigError, match=r"index\.txt.*import_file_to_cache"):
            predictor_from_par(par, 60500, 0.0, 60.0, 1400.0)
        index = tmp_path / "index.txt"
        index.write_text("# no files\n")
        data.import_file_to_cache(CLOCK_INDEX_URL, str(index))
        with pytest.raises(ConfigError, match=r"tai2tt_bipm1999\.clk.*PINT_CLOCK_OVERRIDE"):
            predictor_from_par(par, 60500, 0.0, 60.0, 1400.0)


def test_fold_with_par_writes_psrparam_and_polyco(tmp_path):
    """`voltstream fold --par`: PSRPARAM holds the .par, POLYCO polycos that match PINT."""
    raw = tmp_path / "x.dada"
    period = 1 / 339.31568732238830864
    sim = ["simulate", "--output", str(raw), "--duration", "0.05", "--period", f"{period!r}"]
    assert cli.main([*sim, "--dm", "10.3932"]) == 0
    par = tmp_path / "p.par"
    par.write_text(MSP)
    out = tmp_path / "a.fits"
    fold = ["fold", str(raw), "--par", str(par), "--dm", "10.3932", "-o", str(out)]
    assert cli.main([*fold, "--nbin", "32", "--device", "cpu"]) == 0
    a = read_psrfits(out)
    assert a.par_text.split() == MSP.split()
    assert a.coherent_nfft and a.coherent_nfft > 0
    back = Polyco.from_text(a.polyco_text)
    assert back.psr == "J1909-3744" and all(e.site == "coe" for e in back.entries)
    assert back.entries[0].ref_freq_mhz == pytest.approx(a.obs.freq_mhz)
    mjd, start = a.obs.start_mjd, a.obs.start_sec
    secs = start + np.linspace(0, float(np.sum(a.tsubint_s)), 50)
    model = load_pint_model(par)
    want_int, want_frac = _pint_phase(model, "coe", back.entries[0].ref_freq_mhz, mjd, secs)
    err = _entry_errors(back, mjd, secs, want_int, want_frac)
    # PSRFITS keeps REF_MJD and REF_PHS as one double each: TMID is off by up to a
    # spacing of the MJD (0.6 us near MJD 60000), RPHASE by a spacing of itself.
    f0, tmid = back.entries[0].f0_hz, back.entries[0].tmid_mjd
    rphase = max(abs(e.rphase_int) for e in back.entries)
    tol = _tolerance(f0, mjd) + f0 * 86400 * np.spacing(float(tmid)) + 2 * np.spacing(rphase)
    assert np.max(np.abs(err)) < tol, (np.max(np.abs(err)), tol)
