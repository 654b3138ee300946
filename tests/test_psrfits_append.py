"""The appending PSRFITS writer (io/psrfits_append.py, issue 16): a file grown one
sub-integration at a time reads back exactly as one written at once, is a whole,
readable archive after every append (what a kill -9 of the merger leaves), and astropy
reads it by the definition."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from test_psrfits import make_archive
from voltstream.errors import FormatError
from voltstream.io.psrfits import read_psrfits, write_psrfits
from voltstream.io.psrfits_append import AppendingArchive


def first_row(a):
    return replace(
        a, data=a.data[:1], weights=a.weights[:1], tsubint_s=a.tsubint_s[:1],
        offs_sub_s=a.offs_sub_s[:1], period_s=a.period_s[:1],
    )  # fmt: skip


def test_rows_appended_read_back_as_the_archive_written_at_once(tmp_path):
    whole = make_archive(nsub=5)
    write_psrfits(tmp_path / "once.fits", whole)
    once = read_psrfits(tmp_path / "once.fits")
    grown = AppendingArchive(tmp_path / "grown.fits", first_row(whole))
    for k in range(1, 5):
        # Whole after every row: what a reader (or a kill -9) finds at any moment.
        assert read_psrfits(tmp_path / "grown.fits").nsub == k
        grown.append(
            whole.data[k], whole.weights[k], whole.tsubint_s[k], whole.offs_sub_s[k],
            whole.period_s[k],
        )  # fmt: skip
    back = read_psrfits(tmp_path / "grown.fits")
    assert back.nsub == 5
    np.testing.assert_array_equal(back.data, once.data)
    np.testing.assert_array_equal(back.weights, once.weights)
    np.testing.assert_array_equal(back.offs_sub_s, once.offs_sub_s)
    np.testing.assert_array_equal(back.period_s, once.period_s)
    np.testing.assert_array_equal(back.tsubint_s, once.tsubint_s)
    # Every column of every row, byte for byte (LST_SUB, DAT_FREQ, RA_SUB too).
    from astropy.io import fits

    with fits.open(tmp_path / "once.fits") as a, fits.open(tmp_path / "grown.fits") as b:
        assert a["SUBINT"].data.tobytes() == b["SUBINT"].data.tobytes()


def test_the_grown_file_is_valid_fits_by_the_definition(tmp_path):
    from astropy.io import fits

    whole = make_archive(nsub=3)
    grown = AppendingArchive(tmp_path / "g.fits", first_row(whole))
    for k in (1, 2):
        grown.append(whole.data[k], whole.weights[k], 10.0, 10.0 * k + 5, whole.period_s[k])
    assert (tmp_path / "g.fits").stat().st_size % 2880 == 0
    with fits.open(tmp_path / "g.fits") as hdul:
        hdul.verify("exception")
        sub = hdul["SUBINT"]
        assert sub.header["NAXIS2"] == 3 and len(sub.data) == 3
        np.testing.assert_array_equal(sub.data["INDEXVAL"], [0, 1, 2])
        assert hdul[0].header["SCANLEN"] == pytest.approx(whole.tsubint_s[0] + 20.0)


def test_rows_of_another_shape_are_refused(tmp_path):
    whole = make_archive(nsub=2)
    grown = AppendingArchive(tmp_path / "g.fits", first_row(whole))
    with pytest.raises(FormatError, match="channels"):
        grown.append(whole.data[1][:, :2], whole.weights[1][:2], 1.0, 1.0, 1.0)
    with pytest.raises(FormatError, match="one row"):
        AppendingArchive(tmp_path / "h.fits", whole)
    assert read_psrfits(tmp_path / "g.fits").nsub == 1  # untouched by the refusal


def test_a_reopened_archive_goes_on_after_its_last_row(tmp_path):
    """A merger started again: its archive reopened, the next rows after the last."""
    whole = make_archive(nsub=4)
    write_psrfits(tmp_path / "once.fits", whole)
    grown = AppendingArchive(tmp_path / "g.fits", first_row(whole))
    grown.append(whole.data[1], whole.weights[1], whole.tsubint_s[1], whole.offs_sub_s[1],
                 whole.period_s[1])  # fmt: skip
    with open(tmp_path / "g.fits", "ab") as f:
        f.write(b"\x01" * 1000)  # an append cut short by a kill -9
    again = AppendingArchive.reopen(tmp_path / "g.fits")
    assert again.nrows == 2
    for k in (2, 3):
        again.append(whole.data[k], whole.weights[k], whole.tsubint_s[k], whole.offs_sub_s[k],
                     whole.period_s[k])  # fmt: skip
    from astropy.io import fits

    with fits.open(tmp_path / "once.fits") as a, fits.open(tmp_path / "g.fits") as b:
        b.verify("exception")
        assert a["SUBINT"].data.tobytes() == b["SUBINT"].data.tobytes()
