"""Archive plots: a real PNG with the three panels, for every pol type and sideband."""

import struct
import time
import warnings

import numpy as np
import pytest

from voltstream.errors import VoltstreamError
from voltstream.monitor.plots import plot_archive, total_intensity
from voltstream.observation import FoldedArchive, Observation

RNG = np.random.default_rng(11)


def make_archive(pol_type="AA+BB", npol=1, nsub=6, nchan=8, nbin=128, bw=-64.0):
    obs = Observation(
        nchan=nchan, npol=2, freq_mhz=1382.5, bw_mhz=bw, tsamp_s=nchan / abs(bw) * 1e-6,
        start_mjd=60472, start_sec=43210.5, source="J1932+1059", telescope="YNAO40m",
    )  # fmt: skip
    phase = (np.arange(nbin) + 0.5) / nbin
    pulse = np.exp(-0.5 * ((phase - 0.3) / 0.02) ** 2)
    data = RNG.normal(100.0, 1.0, size=(nsub, npol, nchan, nbin)) + 20 * pulse
    weights = RNG.uniform(0.5, 1.0, size=(nsub, nchan))
    weights[:, 2] = 0.0  # a flagged channel must not break the images
    return FoldedArchive(
        obs=obs, data=data, weights=weights, tsubint_s=np.full(nsub, 10.0),
        offs_sub_s=10.0 * np.arange(nsub) + 5.0, period_s=np.full(nsub, 0.226518),
        dm=3.18, pol_type=pol_type,
    )  # fmt: skip


def png_size(path):
    raw = path.read_bytes()
    assert raw[:8] == b"\x89PNG\r\n\x1a\n"
    assert raw[12:16] == b"IHDR" and raw[-8:-4] == b"IEND"
    return struct.unpack(">II", raw[16:24])


@pytest.mark.parametrize(
    "pol_type,npol,bw", [("AA+BB", 1, -64.0), ("AABBCRCI", 4, 64.0), ("IQUV", 4, -16.0)]
)
def test_plot_is_a_png(tmp_path, pol_type, npol, bw):
    path = tmp_path / "a.png"
    t0 = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        plot_archive(make_archive(pol_type, npol, bw=bw), path, title=f"test {pol_type}")
    assert time.perf_counter() - t0 < 5.0
    width, height = png_size(path)
    assert 400 <= width <= 2000 and 600 <= height <= 3000 and height > width
    assert 10_000 < path.stat().st_size < 2_000_000


def test_panels_and_labels(tmp_path, monkeypatch):
    from matplotlib.figure import Figure

    seen = {}
    real_savefig = Figure.savefig

    def capture(self, *a, **kw):
        seen["fig"] = self
        return real_savefig(self, *a, **kw)

    monkeypatch.setattr(Figure, "savefig", capture)
    a = make_archive(bw=-64.0)
    plot_archive(a, tmp_path / "b.png")
    ax_p, ax_f, ax_t = seen["fig"].axes
    assert "Intensity" in ax_p.get_ylabel()
    assert ax_f.get_ylabel() == "Frequency (MHz)" and "(s)" in ax_t.get_ylabel()
    assert "phase" in ax_t.get_xlabel().lower()
    # Lower sideband: the image still spans the band bottom-up in MHz.
    lo, hi = ax_f.images[0].get_extent()[2:]
    assert (lo, hi) == (1382.5 - 32.0, 1382.5 + 32.0)
    assert tuple(ax_t.images[0].get_extent()[2:]) == (0.0, 60.0)
    # The profile drawn is the archive's, and its peak sits at the pulse phase.
    x, y = ax_p.lines[0].get_data()
    np.testing.assert_allclose(y, a.profile())
    assert abs(x[np.argmax(y)] - 0.3) < 0.02
    img = np.ma.filled(ax_f.images[0].get_array(), np.nan)
    assert img.shape == (8, 128)
    assert np.all(np.isnan(img[5])) and np.all(np.isfinite(np.delete(img, 5, axis=0)))
    # Channel 2 is row 5 once sorted by frequency; its pulse sits at phase 0.3 too.
    assert abs(x[np.argmax(img[0])] - 0.3) < 0.02
    assert "J1932+1059" in seen["fig"].get_suptitle()


def test_total_intensity_sums_aa_bb():
    a = make_archive("AABBCRCI", 4)
    np.testing.assert_array_equal(total_intensity(a), a.data[:, 0] + a.data[:, 1])


def test_unwritable_path(tmp_path):
    with pytest.raises(VoltstreamError, match="cannot write plot"):
        plot_archive(make_archive(), tmp_path / "missing" / "x.png")
