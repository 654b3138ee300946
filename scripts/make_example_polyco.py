"""Writes docs/examples/psr.polyco: a TEMPO polyco for the README tour's simulated
pulsar (`voltstream simulate --signal pulsar`: period 0.0333 s, DM 26.833, no spin-down),
computed here, never edited by hand (tests/test_readme_tour.py checks the shipped file is
what this writes).

The simulator puts phase zero at its first sample, which is whenever it runs, so the
file must cover any date a user may run the tour on: entries of 60 days (86400
minutes, the span field's I5 holds it) from 2024-01-01 to mid 2040, each exact for a
constant period (F0 = 1 / 0.0333 Hz and zero coefficients: the phase is linear in
time), all on one phase reference (phase zero at 2024-01-01 00:00 UTC).

    python scripts/make_example_polyco.py [OUT]
"""

from __future__ import annotations

import sys
from pathlib import Path

PERIOD_S = 0.0333
DM = 26.833
EPOCH_MJD = 60310  # 2024-01-01
SPAN_MIN = 86400  # 60 days
ENTRIES = 100
FREQ_MHZ = 1420.0  # the simulator's band centre


def polyco_text() -> str:
    from voltstream.io.polyco import polyco_entries_from_spin, write_polyco

    entries = polyco_entries_from_spin(
        "SIMPULSAR", 1.0 / PERIOD_S, 0.0, EPOCH_MJD, 0.0, EPOCH_MJD, SPAN_MIN * 60 / 2,
        nentries=ENTRIES, span_min=SPAN_MIN, dm=DM, ref_freq_mhz=FREQ_MHZ,
    )  # fmt: skip
    return write_polyco(None, entries)


def main(argv: list[str]) -> int:
    root = Path(__file__).resolve().parents[1]
    out = Path(argv[0]) if argv else root / "docs" / "examples" / "psr.polyco"
    out.write_text(polyco_text())
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
