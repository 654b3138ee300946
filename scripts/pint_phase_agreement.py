"""Phase agreement of io/par.py's polycos with real PINT (the figures in its docstring).

Run (needs pint-pulsar; offline, e.g. under `unshare -n`):
    PYTHONPATH=python:. python scripts/pint_phase_agreement.py
Per model and site: the worst |our polyco - PINT model.phase| in turns over 5
observations x 1000 random times (entries in long double, the re-read text, and
float64 Polyco.phase), then ours against PINT's own Polycos.generate_polycos with
the same clock chain (a synthetic constant TT(BIPM2023) file), and with CLK TT(TAI),
which PINT's generator ignores.
"""

import os
import pathlib
import tempfile

import numpy as np
import pint.logging
from astropy.config import paths
from astropy.utils import data
from pint.polycos import Polycos
from tests import test_par_pint as T

from voltstream.io.par import load_pint_model, predictor_from_par
from voltstream.io.polyco import Polyco


def against_model(d: pathlib.Path, rng) -> None:
    cases = [
        ("msp", T.MSP, "coe"),
        ("binary", T.BINARY_MSP, "coe"),
        ("binary", T.BINARY_MSP, "chime"),
        ("slow", T.SLOW, "coe"),
        ("slow", T.SLOW, "gmrt"),
    ]
    for name, par_text, site in cases:
        par = d / "p.par"
        par.write_text(par_text)
        worst = np.zeros(4)
        for _ in range(5):
            mjd, start, dur = 60000 + int(rng.integers(0, 900)), rng.uniform(0, 86400), 4 * 3600.0
            pc = predictor_from_par(par, mjd, start, dur, 1400.0, site=site)
            secs = start + np.sort(rng.uniform(0, dur, 1000))
            wi, wf = T._pint_phase(load_pint_model(par), site, 1400.0, mjd, secs)
            got = np.asarray(pc.phase(mjd, secs), dtype=np.longdouble)
            now = [
                np.max(np.abs(T._entry_errors(pc, mjd, secs, wi, wf))),
                np.max(np.abs(T._entry_errors(Polyco.from_text(pc.text), mjd, secs, wi, wf))),
                np.max(np.abs(((got - wi) - wf).astype(float))),
                max(10**e.log10_rms for e in pc.entries),
            ]
            worst = np.maximum(worst, now)
        print(
            f"{name:7s} {site:6s} F0={pc.entries[0].f0_hz:9.4f} |phase|~{float(abs(wi[0])):.1e}: "
            f"entries {worst[0]:.2e}  text {worst[1]:.2e}  float64 phase() {worst[2]:.2e}  "
            f"fit rms {worst[3]:.2e}"
        )


def against_pint_polycos(d: pathlib.Path, rng) -> None:
    clocks = d / "clock"
    (clocks / "tai2tt_bipm2023.clk").write_text(
        "# TAI TT(BIPM2023)\n40000.0 32.1840275\n70000.0 32.1840275\n"
    )
    for clk in ("TT(BIPM2023)", "TT(TAI)"):
        for name, text in (("msp", T.MSP), ("binary", T.BINARY_MSP), ("slow", T.SLOW)):
            par = d / "p.par"
            par.write_text(text.replace("TT(TAI)", clk))
            mjd, start, dur = 60321, 20000.0, 3 * 3600.0
            ours = predictor_from_par(par, mjd, start, dur, 1400.0)
            # PINT's generator stops at the end's hour: ask an hour more.
            theirs = Polycos.generate_polycos(
                load_pint_model(par),
                mjd + start / 86400,
                mjd + (start + dur) / 86400 + 1 / 24,
                "coe",
                60,
                12,
                1400.0,
                progress=False,
            )
            secs = start + np.sort(rng.uniform(0, dur, 500))
            ph = theirs.eval_abs_phase(
                np.longdouble(mjd) + np.asarray(secs, dtype=np.longdouble) / 86400
            )
            err = T._entry_errors(
                ours,
                mjd,
                secs,
                np.asarray(ph.int, dtype=np.longdouble),
                np.asarray(ph.frac, dtype=np.longdouble),
            )
            print(
                f"CLK {clk:13s} {name:7s}: ours - PINT Polycos: max |d| "
                f"{np.max(np.abs(err)):.2e} turns, mean {np.mean(err):+.2e}"
            )


def main() -> None:
    pint.logging.setup("ERROR")
    rng = np.random.default_rng(7)
    d = pathlib.Path(tempfile.mkdtemp())
    (d / "clock").mkdir()
    (d / "cache").mkdir()
    # Offline clock data as io/par.py documents: synthetic files, an empty index.
    (d / "clock" / "gps2utc.clk").write_text("# UTC(GPS) UTC\n40000.0 0.0\n70000.0 0.0\n")
    os.environ["PINT_CLOCK_OVERRIDE"] = str(d / "clock")
    (d / "index.txt").write_text("# no global files\n")
    with paths.set_temp_cache(d / "cache"):
        data.import_file_to_cache(T.CLOCK_INDEX_URL, str(d / "index.txt"))
        against_model(d, rng)
        against_pint_polycos(d, rng)


if __name__ == "__main__":
    main()
