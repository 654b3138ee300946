"""Diagnostic plots of a folded archive, in the layout pulsar observers expect.

One PNG, three panels sharing the pulse-phase axis, as in Figure 6 of the
coherent-dedispersion pipeline paper: the integrated profile, phase against
frequency and phase against time. Images show total intensity, each row
averaged with the archive's weights and its median removed, so a weak pulse
stands out over bandpass and gain changes.

Rendering uses matplotlib's Agg canvas directly (no pyplot): no display is
needed, and the process-wide backend other code may rely on is left alone.
"""

from __future__ import annotations

import os
import warnings

import numpy as np

from voltstream.errors import VoltstreamError
from voltstream.observation import FoldedArchive

__all__ = ["plot_archive", "total_intensity"]


def total_intensity(archive: FoldedArchive) -> np.ndarray:
    """(nsub, nchan, nbin) total intensity for any of the archive's pol types."""
    d = archive.data
    if archive.pol_type == "AABBCRCI" or (archive.pol_type == "AABB" and d.shape[1] >= 2):
        return d[:, 0] + d[:, 1]
    return d[:, 0]


def _weighted_rows(values: np.ndarray, weights: np.ndarray, axis: int) -> np.ndarray:
    """Weighted mean over ``axis``; rows with no weight become NaN (drawn blank)."""
    w = np.expand_dims(weights, -1)
    num = (values * w).sum(axis=axis)
    den = w.sum(axis=axis)
    out = np.where(den > 0, num / np.where(den > 0, den, 1), np.nan)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # all-NaN rows stay NaN
        return out - np.nanmedian(out, axis=-1, keepdims=True)


def plot_archive(
    archive: FoldedArchive, path_png: str | os.PathLike, title: str | None = None
) -> None:
    """Write the profile / phase-frequency / phase-time figure of ``archive`` to a PNG."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    obs = archive.obs
    nsub, _, nchan, nbin = archive.data.shape
    inten = total_intensity(archive)
    weights = np.asarray(archive.weights, dtype=np.float64)
    profile = archive.profile()
    phase_edges = np.linspace(0.0, 1.0, nbin + 1)
    phase = (phase_edges[:-1] + phase_edges[1:]) / 2

    # Channels sorted by sky frequency, so a lower sideband draws the right way up.
    freqs = obs.chan_freqs_mhz
    order = np.argsort(freqs)
    freq_img = _weighted_rows(inten, weights, axis=0)[order]
    half = abs(obs.chan_bw_mhz) / 2
    f_lo, f_hi = freqs[order[0]] - half, freqs[order[-1]] + half

    time_img = _weighted_rows(inten, weights, axis=1)
    t_start = float(archive.offs_sub_s[0] - archive.tsubint_s[0] / 2)
    t_end = float(archive.offs_sub_s[-1] + archive.tsubint_s[-1] / 2)
    if not t_end > t_start:
        t_end = t_start + 1.0

    fig = Figure(figsize=(6.0, 9.0), dpi=100, layout="constrained")
    FigureCanvasAgg(fig)
    ax_p, ax_f, ax_t = fig.subplots(3, 1, sharex=True, height_ratios=[1, 1.4, 1.4])

    ax_p.plot(phase, profile, color="black", lw=1.0, drawstyle="steps-mid")
    ax_p.set_ylabel("Intensity (arbitrary units)")
    ax_p.set_title("Integrated profile", fontsize=9)

    imshow = dict(aspect="auto", origin="lower", cmap="gray_r", interpolation="nearest")
    ax_f.imshow(freq_img, extent=(0.0, 1.0, f_lo, f_hi), **imshow)
    ax_f.set_ylabel("Frequency (MHz)")
    ax_f.set_title("Phase vs frequency", fontsize=9)

    ax_t.imshow(time_img, extent=(0.0, 1.0, t_start, t_end), **imshow)
    ax_t.set_ylabel("Time from start (s)")
    ax_t.set_xlabel("Pulse phase (turns)")
    ax_t.set_title("Phase vs time", fontsize=9)
    ax_t.set_xlim(0.0, 1.0)

    if title is None:
        period_ms = float(np.mean(archive.period_s)) * 1e3
        title = (
            f"{obs.source}  {obs.telescope}  MJD {obs.start_mjd_float:.5f}\n"
            f"{obs.freq_mhz:g} MHz, BW {obs.bw_mhz:g} MHz, {nchan} chan, {nsub} subint, "
            f"DM {archive.dm:g}, P {period_ms:.6g} ms"
        )
    fig.suptitle(title, fontsize=10)
    try:
        fig.savefig(os.fspath(path_png), format="png")
    except OSError as exc:
        raise VoltstreamError(
            f"cannot write plot {path_png}: {exc.strerror or exc}; check the directory"
        ) from exc
