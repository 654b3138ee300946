""".par files: the no-PINT error, our glue from PINT's polyco table, and the label reader.

PINT is not a test dependency: the PINT path runs against a small fake ``pint``
package injected into ``sys.modules``. It mimics the parts of PINT's API we call
(``pint.models.get_model``, ``pint.polycos.Polycos.generate_polycos`` and its
``polycoTable`` rows, TEMPO method: whole-minute TMIDs, Phase(int, frac) with frac in
[-0.5, 0.5), F0 of the model, coefficients fitted in minutes), so these tests check
OUR conversion into Polyco entries, not PINT's timing.
"""

import sys
import types

import astropy.units as u
import numpy as np
import pytest
from astropy.table import Table

from voltstream.errors import ConfigError, FormatError
from voltstream.io.par import predictor_from_par, read_par_text
from voltstream.io.polyco import Polyco
from voltstream.io.psrfits import read_psrfits, write_psrfits
from voltstream.observation import FoldedArchive, Observation

RNG = np.random.default_rng()


# --- no PINT -----------------------------------------------------------------


def test_no_pint_raises_config_error(tmp_path, monkeypatch):
    for name in ("pint", "pint.models", "pint.polycos"):
        monkeypatch.setitem(sys.modules, name, None)
    par = tmp_path / "a.par"
    par.write_text("PSRJ J0437-4715\nF0 173.6879\nDM 2.64\n")
    with pytest.raises(ConfigError) as exc:
        predictor_from_par(par, 60000, 100.0, 60.0, 1400.0)
    assert str(exc.value) == (
        "reading .par files needs PINT (pip install pint-pulsar); "
        "or make a polyco with TEMPO and pass --polyco"
    )


# --- the PINT path, against a fake pint (tests our glue only) -----------------


class _SpinModel:
    """Truth: phase = F0 T + F1 T^2 / 2, T in seconds from PEPOCH (longdouble)."""

    def __init__(self, psr, f0, f1, pepoch_mjd, pepoch_sec, dm):
        self.PSR = types.SimpleNamespace(value=psr)
        self.F0 = types.SimpleNamespace(value=f0)
        self.DM = types.SimpleNamespace(value=dm)
        self.f1, self.pep_mjd, self.pep_sec = f1, pepoch_mjd, pepoch_sec

    def phase_ld(self, mjd_ld):
        t = (np.asarray(mjd_ld, dtype=np.longdouble) - self.pep_mjd) * 86400 - self.pep_sec
        return np.longdouble(self.F0.value) * t + np.longdouble(self.f1) * t * t / 2

    def phase_at(self, mjd_int, sec):
        t = (np.longdouble(mjd_int) - self.pep_mjd) * 86400 + (
            np.asarray(sec, dtype=np.longdouble) - self.pep_sec
        )
        return np.longdouble(self.F0.value) * t + np.longdouble(self.f1) * t * t / 2


def _fake_pint(model, calls):
    class Entry:
        def __init__(self, rint, rfrac, f0, ncoeff, coeffs):
            one = u.dimensionless_unscaled
            self.rphase = types.SimpleNamespace(
                int=np.array([rint], dtype=np.longdouble) * one,
                frac=np.array([rfrac], dtype=np.longdouble) * one,
            )
            self.f0, self.ncoeff, self.coeffs = np.longdouble(f0), ncoeff, coeffs

    class Polycos:
        @classmethod
        def generate_polycos(cls, m, mjd_start, mjd_end, obs, seg, ncoeff, freq, **kw):
            from astropy.utils import data, iers

            calls.append(
                (obs, seg, ncoeff, freq, iers.conf.auto_download, data.conf.allow_internet)
            )
            start, end = np.longdouble(mjd_start), np.longdouble(mjd_end)
            tmids = np.arange(int(start * 24) * 60, int(end * 24) * 60 + seg, seg)
            rows = []
            for tmid in np.asarray(tmids, dtype=np.longdouble) / 1440:
                ref = m.phase_ld(tmid)
                rint = np.round(ref)
                nodes = np.linspace(tmid - seg / 2880, tmid + seg / 2880, 20)
                dt = (nodes - tmid) * 1440
                red = (m.phase_ld(nodes) - ref) - dt * np.longdouble(m.F0.value) * 60
                coeffs = np.polyfit(dt.astype(float), red.astype(float), ncoeff - 1)[::-1]
                e = Entry(rint, ref - rint, m.F0.value, ncoeff, coeffs)
                rows.append(
                    {
                        "psr": m.PSR.value,
                        "tmid": tmid,
                        "dm": m.DM.value,
                        "logrms": -7.5,
                        "mjd_span": seg,
                        "obs": obs,
                        "obsfreq": freq,
                        "entry": e,
                    }
                )
            out = cls()
            out.polycoTable = Table(rows=rows)
            return out

    pint = types.ModuleType("pint")
    models = types.ModuleType("pint.models")
    polycos = types.ModuleType("pint.polycos")
    models.get_model = lambda path: model
    polycos.Polycos = Polycos
    pint.models, pint.polycos = models, polycos
    return {"pint": pint, "pint.models": models, "pint.polycos": polycos}


def test_pint_glue_reproduces_the_model_phases(tmp_path, monkeypatch):
    f0 = float(RNG.uniform(0.5, 700.0))
    f1 = -float(10 ** RNG.uniform(-16, -13))
    start_mjd, start_sec = 60000 + int(RNG.integers(0, 500)), float(RNG.uniform(0, 86400))
    model = _SpinModel(
        "J1136+1551",
        f0,
        f1,
        start_mjd - int(RNG.integers(0, 2)),
        float(RNG.uniform(0, 86400)),
        float(RNG.uniform(1, 300)),
    )
    calls = []
    for name, mod in _fake_pint(model, calls).items():
        monkeypatch.setitem(sys.modules, name, mod)
    par_text = f"PSRJ J1136+1551\nF0 {f0!r}\nF1 {f1!r}\nDM {model.DM.value!r}\n"
    par = tmp_path / "m.par"
    par.write_text(par_text)
    duration = float(RNG.uniform(600, 3 * 3600))
    freq = float(RNG.uniform(300, 3000))
    pc = predictor_from_par(par, start_mjd, start_sec, duration, freq, span_min=30, ncoeff=8)
    assert calls == [("coe", 30, 8, freq, False, False)]
    assert pc.par_text == par_text and pc.psr == "J1136+1551" and pc.dm == model.DM.value
    assert len(pc.entries) >= 2 and all(e.coeffs.size == 8 for e in pc.entries)
    assert all(e.site == "coe" and e.ref_freq_mhz == freq for e in pc.entries)
    secs = start_sec + np.sort(RNG.uniform(0, duration, 200))
    want = model.phase_at(start_mjd, secs)
    for pred in (pc, Polyco.from_text(pc.text)):  # in memory and as written for POLYCO
        err = (np.asarray(pred.phase(start_mjd, secs), dtype=np.longdouble) - want).astype(float)
        assert np.max(np.abs(err)) < 1e-6
        f_want = f0 + f1 * ((start_mjd - model.pep_mjd) * 86400 + secs - model.pep_sec)
        np.testing.assert_allclose(pred.freq_hz(start_mjd, secs), f_want, rtol=1e-11)
    # The archive then carries both: POLYCO from .text, PSRPARAM from .par_text.
    obs = Observation(4, 2, freq, -16.0, 4 / 16e6, start_mjd, start_sec, source=pc.psr)
    a = FoldedArchive(
        obs=obs,
        data=RNG.normal(size=(1, 1, 4, 16)),
        weights=np.ones((1, 4)),
        tsubint_s=np.array([duration]),
        offs_sub_s=np.array([duration / 2]),
        period_s=np.array([1 / f0]),
        dm=model.DM.value,
        polyco_text=pc.text,
        par_text=pc.par_text,
    )
    write_psrfits(tmp_path / "a.fits", a)
    b = read_psrfits(tmp_path / "a.fits")
    assert b.par_text == par_text
    back = Polyco.from_text(b.polyco_text)
    err = (np.asarray(back.phase(start_mjd, secs), dtype=np.longdouble) - want).astype(float)
    assert np.max(np.abs(err)) < 1e-5  # PSRFITS keeps REF_MJD as one double


def test_pint_failure_is_config_error(tmp_path, monkeypatch):
    model = _SpinModel("J0000+0000", 1.0, 0.0, 60000, 0.0, 1.0)
    mods = _fake_pint(model, [])

    def broken(*a, **k):
        raise ValueError("no clock file for site xyz")

    mods["pint.polycos"].Polycos.generate_polycos = classmethod(broken)
    for name, mod in mods.items():
        monkeypatch.setitem(sys.modules, name, mod)
    par = tmp_path / "m.par"
    par.write_text("PSRJ J0000+0000\nF0 1.0\n")
    with pytest.raises(ConfigError, match="PINT could not make polycos.*no clock file"):
        predictor_from_par(par, 60000, 0.0, 60.0, 1400.0, site="xyz")
    with pytest.raises(ConfigError, match="cannot read .par file"):
        predictor_from_par(tmp_path / "absent.par", 60000, 0.0, 60.0, 1400.0)


# --- the PINT-free label reader ------------------------------------------------


def test_read_par_text(tmp_path):
    f0, dm = float(RNG.uniform(0.5, 700)), float(RNG.uniform(1, 1000))
    mant, exp = f0 / 10 ** int(np.floor(np.log10(f0))), int(np.floor(np.log10(f0)))
    text = (
        "# comment F0 999\n"
        "C  TEMPO comment\n"
        f"PSRJ  J{RNG.integers(0, 24):02d}00+1551\n"
        "PSRB  B1133+16\n"
        f"F0    {mant!r}D{exp:+03d}  1  0.000001\n"
        f"DM    {dm!r}\n"
    )
    par = tmp_path / "a.par"
    par.write_text(text)
    got = read_par_text(par)
    assert got["psr"] == text.split("\n")[2].split()[1] and got["text"] == text
    assert got["f0_hz"] == pytest.approx(f0, rel=1e-14) and got["dm"] == dm
    p0 = float(RNG.uniform(0.001, 5))
    par.write_text(f"PSR  1133+16\nP0 {p0!r}\n")
    got = read_par_text(par)
    assert got["psr"] == "1133+16" and got["f0_hz"] == pytest.approx(1 / p0) and got["dm"] is None
    par.write_text("hello world\n")
    with pytest.raises(FormatError, match="neither PSR"):
        read_par_text(par)
    par.write_text("PSRJ J0000+0000\nF0 fast\n")
    with pytest.raises(FormatError, match="F0 is 'fast'"):
        read_par_text(par)
    with pytest.raises(ConfigError, match="cannot read .par file"):
        read_par_text(tmp_path / "absent.par")
