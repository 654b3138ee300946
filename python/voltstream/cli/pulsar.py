"""The pulsar a fold folds: its phase predictor from the command line, and the demos'
pulsar and their verdict on its fold (one place for the one-node and the cluster demo)."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from voltstream.fold.reference import FoldedArchive
    from voltstream.observation import Observation


def fold_predictor(args: argparse.Namespace, obs: Observation, span_s: float) -> Any:
    """Pulse phase for fold: --period (phase zero at the start), --par (polycos made
    with PINT over the span) or --polyco."""
    from voltstream.io.polyco import ConstantPeriod, read_polyco

    if args.period:
        return ConstantPeriod(args.period, obs.start_mjd, obs.start_sec)
    if args.par:
        from voltstream.io.par import predictor_from_par, quiet_pint_logging

        quiet_pint_logging()  # PINT logs every TOA step at DEBUG to stderr by default
        return predictor_from_par(args.par, obs.start_mjd, obs.start_sec, span_s, obs.freq_mhz)
    return read_polyco(args.polyco)


#: The demo's pulsar: a 33.3 ms pulsar at DM 26.833 (a DM from the paper's Table 3),
#: seen in the paper's configuration: 32 channels of 4 MHz, 2 pols, 8-bit complex.
DEMO_PULSAR = {"dm": 26.833, "period": 0.0333, "duty": 0.03, "pulse_phase": 0.25}


def pulsar_check(archive: FoldedArchive, psr: dict) -> tuple[float, float, float, list[str]]:
    """The demos' verdict on a fold of `DEMO_PULSAR`: (S/N, peak phase, phase error,
    problems): detected (S/N >= 10) within 0.02 turns of where it was simulated."""
    from voltstream.fold.reference import profile_snr

    prof = archive.profile()
    snr = profile_snr(prof)
    peak_phase = (int(np.argmax(prof)) + 0.5) / archive.nbin
    phase_err = (peak_phase - psr["pulse_phase"] + 0.5) % 1.0 - 0.5
    problems = []
    if snr < 10 or abs(phase_err) > 0.02:
        problems.append(
            f"pulsar not detected at the right phase (S/N {snr:.1f}, phase error {phase_err:+.3f})"
        )
    return snr, peak_phase, phase_err, problems
