import numpy as np
import pytest

from repo_script import load_script
from voltstream.errors import ConfigError, FormatError
from voltstream.io.polyco import (
    ConstantPeriod,
    Polyco,
    polyco_entries_from_spin,
    read_polyco,
    write_polyco,
)

F0, F1 = 339.31568728, -1.6e-13  # a fast pulsar with an exaggerated spin-down
EPOCH = (60000, 3600.0)

# A hand-written entry in TEMPO's layout, with Fortran D exponents.
HANDWRITTEN = """\
1937+21     5-Jan-23  120000.00   59949.50000000000         71.021000 -0.123 -6.502
  123456789.250000  641.928222490128    1   60   4  1400.000
  1.00000000000000000D-03  2.00000000000000000D-02 -3.00000000000000000D-04
  4.00000000000000000D-06
"""


def spin_phase(mjd, sec):
    t = (mjd - EPOCH[0]) * 86400.0 + (np.asarray(sec) - EPOCH[1])
    return F0 * t + 0.5 * F1 * t * t


def test_handwritten_entry_is_parsed_and_evaluated():
    pc = Polyco.from_text(HANDWRITTEN, name="hand")
    e = pc.entries[0]
    assert (e.psr, e.tmid_mjd, e.tmid_frac, e.span_min) == ("1937+21", 59949, 0.5, 60.0)
    assert e.dm == pytest.approx(71.021) and e.site == "1" and e.ref_freq_mhz == 1400.0
    # 7.5 minutes after TMID (12:00 UTC)
    dt = 7.5
    c = [1e-3, 2e-2, -3e-4, 4e-6]
    want_frac = 0.25 + 60 * dt * 641.928222490128 + sum(ci * dt**i for i, ci in enumerate(c))
    got = pc.phase(59949, 43200.0 + dt * 60)
    assert got - 123456789 == pytest.approx(want_frac, abs=1e-6)
    want_f = 641.928222490128 + (c[1] + 2 * c[2] * dt + 3 * c[3] * dt**2) / 60
    assert pc.freq_hz(59949, 43200.0 + dt * 60) == pytest.approx(want_f, rel=1e-14)
    assert pc.text == HANDWRITTEN


def test_round_trip_reproduces_spin_model(tmp_path):
    entries = polyco_entries_from_spin(
        "J1939+2134", F0, F1, *EPOCH, 60000, 7200.0, nentries=4, span_min=60, dm=71.02
    )
    path = tmp_path / "polyco.dat"
    text = write_polyco(path, entries)
    pc = read_polyco(path)
    assert pc.text == text and len(pc.entries) == 4
    rng = np.random.default_rng(0)
    sec = 7200.0 - 1800 + rng.random(500) * 4 * 3600.0  # across all four spans
    got = pc.phase(60000, sec)
    want = spin_phase(60000, sec)
    np.testing.assert_allclose(got - want, 0.0, atol=2e-6)
    # frequency = d phase / dt = F0 + F1 t
    t = sec - EPOCH[1]
    np.testing.assert_allclose(pc.freq_hz(60000, sec), F0 + F1 * t, rtol=1e-13)


def test_entry_selection_uses_the_covering_entry():
    a, b = polyco_entries_from_spin("J0", 100.0, 0.0, 60000, 0.0, 60000, 1800.0, 2, 60)
    b.rphase_frac += 0.5  # mark entry b: times it covers are half a turn off
    pc = Polyco([b, a])  # order in the file must not matter
    t = np.array([100.0, 3500.0, 3700.0, 7000.0])
    frac = (pc.phase(60000, t) - 100.0 * t) % 1.0
    np.testing.assert_allclose(frac, [0.0, 0.0, 0.5, 0.5], atol=1e-6)


def test_times_across_midnight_and_sec_beyond_a_day():
    entries = polyco_entries_from_spin("J0", F0, F1, *EPOCH, 60000, 86400.0 - 600, 2, 30)
    pc = Polyco(entries)
    assert entries[1].tmid_mjd == 60001
    # the same instant written as (60000, 86700) and (60001, 300)
    np.testing.assert_allclose(pc.phase(60000, 86700.0), pc.phase(60001, 300.0), atol=1e-9)
    assert pc.phase(60001, 300.0) == pytest.approx(spin_phase(60001, 300.0), abs=2e-6)


def test_no_covering_entry_is_a_clear_error():
    pc = Polyco(polyco_entries_from_spin("J0", 100.0, 0.0, 60000, 0.0, 60000, 1800.0, 1, 60))
    with pytest.raises(ConfigError, match="does not cover MJD"):
        pc.phase(60000, np.array([100.0, 3700.0]))
    with pytest.raises(ConfigError, match="does not cover"):
        pc.freq_hz(59999, 80000.0)


def test_malformed_files(tmp_path):
    lines = HANDWRITTEN.splitlines()
    with pytest.raises(FormatError, match="promises 4 coefficients"):
        Polyco.from_text("\n".join(lines[:3]))
    with pytest.raises(FormatError, match="not a TEMPO polyco header"):
        Polyco.from_text("garbage line\nmore garbage here\n")
    with pytest.raises(FormatError, match="no entries"):
        Polyco.from_text("\n\n")
    with pytest.raises(ConfigError, match="cannot read polyco"):
        read_polyco(tmp_path / "missing.dat")


def test_constant_period():
    p = ConstantPeriod(0.0125, 60000, 43200.5)
    sec = np.array([43200.5, 43200.5 + 0.0125 * 3.25, 43200.5 + 86400])
    np.testing.assert_allclose(p.phase(60000, sec), [0.0, 3.25, 86400 / 0.0125], atol=1e-9)
    assert p.phase(60001, 43200.5) == pytest.approx(86400 / 0.0125)
    np.testing.assert_allclose(p.freq_hz(60000, sec), 80.0)
    assert p.text is None
    with pytest.raises(ConfigError, match="period"):
        ConstantPeriod(0.0, 60000, 0.0)


def test_the_shipped_example_polyco_is_what_its_script_computes_and_covers_today(tmp_path):
    """docs/examples/psr.polyco (the README tour's) is scripts/make_example_polyco.py's
    output, exact for the simulated pulsar's constant period at any date it covers."""
    import time
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    mk = load_script("scripts/make_example_polyco.py")
    shipped = root / "docs" / "examples" / "psr.polyco"
    assert shipped.read_text() == mk.polyco_text()
    pc = read_polyco(shipped)
    assert pc.dm == 26.833 and pc.psr == "SIMPULSAR"
    today = 40587 + int(time.time() // 86400)
    sec = np.linspace(0.0, 86400.0 * 400, 1001)  # today and the 400 days after it
    # Phase zero at 2024-01-01 00:00 UTC, one turn per 0.0333 s, across entries.
    turns = ((today - 60310) * 86400.0 + sec) / 0.0333
    np.testing.assert_allclose(pc.phase(today, sec) - turns, 0.0, atol=1e-5)
    np.testing.assert_allclose(pc.freq_hz(today, sec), 1 / 0.0333, rtol=1e-14)
