"""PSRFITS fold-mode archives: keys by name, quantisation, POLYCO, bad files."""

import numpy as np
import pytest
from astropy.io import fits

from bad_files import random_file, refuses
from voltstream.errors import FormatError
from voltstream.io.polyco import Polyco
from voltstream.io.psrfits import read_psrfits, write_psrfits
from voltstream.observation import FoldedArchive, Observation

RNG = np.random.default_rng(7)

# Two blocks in TEMPO's layout, numbers made up for this test; D exponents as TEMPO writes.
POLYCO = """\
1136+1551  11-JUN-24  120000.00   60472.50000000000            4.864100  0.123 -6.021
   12345678.901234  0.841807155234   7    60   12         1382.500
  0.12345678901234567D-03  0.98765432109876543D-01 -0.11111111111111111D-04
  0.22222222222222222D-07 -0.33333333333333333D-09  0.44444444444444444D-12
  0.00000000000000000D+00  0.00000000000000000D+00  0.00000000000000000D+00
  0.00000000000000000D+00  0.00000000000000000D+00  0.55555555555555555D-30
1136+1551  11-JUN-24  130000.00   60472.54166666666            4.864100  0.123 -5.998
   12348709.406993  0.841807155231   7    60   12         1382.500
 -0.12345678901234567D-03  0.98765432109876543D-01 -0.11111111111111111D-04
  0.22222222222222222D-07 -0.33333333333333333D-09  0.44444444444444444D-12
  0.00000000000000000D+00  0.00000000000000000D+00  0.00000000000000000D+00
  0.00000000000000000D+00  0.00000000000000000D+00 -0.55555555555555555D-30
"""

PRIMARY_KEYS = """HDRVER FITSTYPE DATE OBSERVER PROJID TELESCOP ANT_X ANT_Y ANT_Z FRONTEND
IBEAM NRCVR FD_POLN FD_HAND FD_SANG FD_XYPH BACKEND BECONFIG BE_PHASE BE_DCC BE_DELAY TCYCLE
OBS_MODE DATE-OBS OBSFREQ OBSBW OBSNCHAN CHAN_DM PNT_ID SRC_NAME COORD_MD EQUINOX RA DEC BMAJ
BMIN BPA STT_CRD1 STT_CRD2 TRK_MODE STP_CRD1 STP_CRD2 SCANLEN FD_MODE FA_REQ CAL_MODE CAL_FREQ
CAL_DCYC CAL_PHS CAL_NPHS STT_IMJD STT_SMJD STT_OFFS STT_LST""".split()
SUBINT_KEYS = """INT_TYPE INT_UNIT SCALE POL_TYPE NPOL TBIN NBIN NBIN_PRD PHS_OFFS NBITS
ZERO_OFF NSUBOFFS NCHAN CHAN_BW DM RM NCHNOFFS NSBLK REFFREQ""".split()
SUBINT_COLS = """INDEXVAL TSUBINT OFFS_SUB PERIOD DAT_FREQ DAT_WTS DAT_OFFS DAT_SCL
DATA""".split()
HISTORY_COLS = """DATE_PRO PROC_CMD POL_TYPE NSUB NPOL NBIN NCHAN CHAN_BW DM
DDS_MTHD""".split()
POLYCO_COLS = """DATE_PRO POLYVER NSPAN NCOEF NPBLK NSITE REF_FREQ PRED_PHS REF_MJD REF_PHS
REF_F0 LGFITERR COEFF""".split()


def make_archive(nsub=3, npol=4, nchan=5, nbin=64, pol_type="AABBCRCI", polyco=None):
    obs = Observation(
        nchan=nchan,
        npol=2,
        freq_mhz=1382.5,
        bw_mhz=-32.0,
        tsamp_s=nchan / 32e6,
        start_mjd=60472,
        start_sec=43210.123456789,
        source="J1136+1551",
        telescope="YNAO40m",
    )
    # Profiles on a large, varying baseline with a small range: the hard case for
    # float32 offsets; plus a few flat profiles (zero range).
    base = RNG.uniform(-5e4, 5e4, size=(nsub, npol, nchan, 1))
    data = base + RNG.normal(
        0, RNG.uniform(0.01, 100, size=(nsub, npol, nchan, 1)), size=(nsub, npol, nchan, nbin)
    )
    data[0, 0, 0] = 3.25
    tsub = RNG.uniform(9, 11, size=nsub)
    return FoldedArchive(
        obs=obs,
        data=data,
        weights=RNG.uniform(0.2, 1.0, size=(nsub, nchan)),
        tsubint_s=tsub,
        offs_sub_s=np.cumsum(tsub) - tsub / 2,
        period_s=1.187913 + RNG.normal(0, 1e-9, size=nsub),
        dm=4.8641,
        pol_type=pol_type,
        polyco_text=polyco,
        history=["voltstream fold in.dada --dm 4.8641 --nbin 64"],
    )


def test_round_trip_within_quantisation(tmp_path):
    a = make_archive()
    path = tmp_path / "a.fits"
    write_psrfits(path, a, extra_history=["pam -e ar"])
    b = read_psrfits(path)
    assert b.data.shape == a.data.shape
    rng = np.ptp(a.data, axis=-1, keepdims=True)
    err = np.abs(b.data - a.data)
    assert np.all(err <= rng / 30000 + 1e-12 * np.abs(a.data))
    np.testing.assert_array_equal(b.data[0, 0, 0], 3.25)
    np.testing.assert_allclose(b.weights, a.weights, rtol=1e-7)
    np.testing.assert_array_equal(b.tsubint_s, a.tsubint_s)
    np.testing.assert_array_equal(b.offs_sub_s, a.offs_sub_s)
    np.testing.assert_array_equal(b.period_s, a.period_s)
    assert b.dm == a.dm and b.pol_type == "AABBCRCI" and b.polyco_text is None
    assert b.history == [*a.history, "pam -e ar"]
    o = b.obs
    assert (o.nchan, o.npol, o.freq_mhz, o.bw_mhz) == (5, 2, 1382.5, -32.0)
    assert (o.start_mjd, o.source, o.telescope) == (60472, "J1136+1551", "YNAO40m")
    assert abs(o.start_sec - a.obs.start_sec) < 1e-9
    assert o.tsamp_s == pytest.approx(a.obs.tsamp_s)
    np.testing.assert_allclose(b.profile(), a.profile(), rtol=1e-6)


def test_read_back_with_astropy_by_the_definition(tmp_path):
    """Decode with astropy alone, as an outside user would: DATA*DAT_SCL + DAT_OFFS."""
    a = make_archive(nsub=2, npol=1, nchan=3, nbin=32, pol_type="AA+BB")
    path = tmp_path / "b.fits"
    write_psrfits(path, a)
    with fits.open(path) as h:
        assert [x.name for x in h] == ["PRIMARY", "HISTORY", "SUBINT", "COHDDISP"]
        p, s = h[0].header, h["SUBINT"]
        for key in PRIMARY_KEYS:
            assert key in p, key
        for key in SUBINT_KEYS:
            assert key in s.header, key
        for c in SUBINT_COLS:
            assert c in s.columns.names, c
        for c in HISTORY_COLS:
            assert c in h["HISTORY"].columns.names, c
        assert p["FITSTYPE"] == "PSRFITS" and p["OBS_MODE"] == "PSR"
        assert p["BACKEND"] == "voltstream" and p["OBSNCHAN"] == 3 and p["OBSBW"] == -32.0
        assert (p["STT_IMJD"], p["STT_SMJD"]) == (60472, 43210)
        assert p["STT_OFFS"] == pytest.approx(0.123456789, abs=1e-9)
        assert p["DATE-OBS"] == "2024-06-11T12:00:10"
        assert 0 <= p["STT_LST"] < 86400
        assert s.header["INT_TYPE"] == "TIME" and s.header["NSBLK"] == 1
        assert s.header["CHAN_BW"] == -32.0 / 3 and s.header["NBIN"] == 32
        assert h["HISTORY"].data["DDS_MTHD"][0] == "COHERENT"
        assert s.columns["DATA"].format == "96I" and s.columns["DATA"].dim == "(32,3,1)"
        row = s.data[1]
        prof = row["DATA"] * row["DAT_SCL"].reshape(1, 3, 1) + row["DAT_OFFS"].reshape(1, 3, 1)
        rng = np.ptp(a.data[1], axis=-1, keepdims=True)
        assert np.all(np.abs(prof - a.data[1]) <= rng / 30000)
        np.testing.assert_allclose(row["DAT_FREQ"], [1393.166667, 1382.5, 1371.833333])


def test_polyco_table_only_when_given(tmp_path):
    a = make_archive(polyco=POLYCO)
    path = tmp_path / "p.fits"
    write_psrfits(path, a)
    with fits.open(path) as h:
        t = h["POLYCO"]
        for c in POLYCO_COLS:
            assert c in t.columns.names, c
        d = t.data
        assert len(d) == 2 and list(d["NCOEF"]) == [12, 12] and list(d["NSPAN"]) == [60, 60]
        assert list(d["NPBLK"]) == [2, 2] and d["NSITE"][0] == "7"
        assert d["REF_MJD"][1] == 60472.54166666666 and d["REF_FREQ"][0] == 1382.5
        assert d["REF_F0"][0] == 0.841807155234 and d["LGFITERR"][0] == -6.021
        assert d["REF_PHS"][1] == 12348709.406993
        assert (
            d["COEFF"][0][1] == 0.98765432109876543e-1
            and d["COEFF"][1][11] == -0.55555555555555555e-30
        )
        assert np.all((d["PRED_PHS"] >= 0) & (d["PRED_PHS"] < 1))
    b = read_psrfits(path)
    # PSRFITS has no column for the Doppler factor; everything else survives, and
    # the reconstructed polyco predicts the same phases (within TMID's D precision).
    got, want = Polyco.from_text(b.polyco_text), Polyco.from_text(POLYCO)
    for g, w in zip(got.entries, want.entries, strict=True):
        assert (g.psr, g.date, g.utc, g.site, g.span_min) == (
            w.psr,
            w.date,
            w.utc,
            w.site,
            w.span_min,
        )
        assert (g.dm, g.f0_hz, g.ref_freq_mhz, g.log10_rms) == (
            w.dm,
            w.f0_hz,
            w.ref_freq_mhz,
            w.log10_rms,
        )
        np.testing.assert_array_equal(g.coeffs, w.coeffs)
        assert g.doppler == 0.0
    secs = 41500 + np.linspace(0, 7000, 50)
    phase_err = got.phase(60472, secs) - want.phase(60472, secs)
    assert np.max(np.abs(phase_err)) < 1e-5
    plain = tmp_path / "n.fits"
    write_psrfits(plain, make_archive())
    with fits.open(plain) as h:
        assert "POLYCO" not in [x.name for x in h]


def test_bad_polyco_text(tmp_path):
    a = make_archive(polyco=POLYCO.replace("  60   12  ", "  60   13  ", 1))
    with pytest.raises(FormatError, match="coefficients"):
        write_psrfits(tmp_path / "x.fits", a)
    assert not (tmp_path / "x.fits").exists()


def test_primary_overrides(tmp_path):
    path = tmp_path / "o.fits"
    over = {"ANT_X": -2.0e6, "ANT_Y": 5.0e6, "ANT_Z": 3.0e6, "RA": "11:36:03.2477", "PROJID": "P1"}
    write_psrfits(path, make_archive(), primary=over)
    p = fits.getheader(path, 0)
    assert p["ANT_Y"] == 5.0e6 and p["PROJID"] == "P1" and p["STT_CRD1"] == "11:36:03.2477"
    ra = fits.getdata(path, "SUBINT")["RA_SUB"][0]
    assert ra == pytest.approx((11 + 36 / 60 + 3.2477 / 3600) * 15)


@pytest.mark.parametrize(
    "change,match",
    [
        (dict(pol_type="IQUV", npol=1), "does not fit npol"),
        (dict(pol_type="AB"), "does not fit npol"),
    ],
)
def test_inconsistent_archive_rejected(tmp_path, change, match):
    with pytest.raises(FormatError, match=match):
        write_psrfits(tmp_path / "x.fits", make_archive(**change))


def test_bad_archive_values(tmp_path):
    a = make_archive()
    a.data[1, 2, 3, 4] = np.nan
    with pytest.raises(FormatError, match="NaN"):
        write_psrfits(tmp_path / "x.fits", a)
    a = make_archive()
    a.weights = a.weights[:, :2]
    with pytest.raises(FormatError, match="weights has shape"):
        write_psrfits(tmp_path / "x.fits", a)


def test_not_psrfits(tmp_path):
    refuses(read_psrfits, random_file(tmp_path / "junk.fits", 5000), "not a FITS file")
    plain = tmp_path / "image.fits"
    fits.PrimaryHDU(RNG.normal(size=(4, 4))).writeto(plain)
    refuses(read_psrfits, plain, "not PSRFITS")
    search = tmp_path / "search.fits"
    hdr = fits.Header({"FITSTYPE": "PSRFITS", "OBS_MODE": "SEARCH"})
    fits.PrimaryHDU(header=hdr).writeto(search)
    with pytest.raises(FormatError, match="only fold-mode"):
        read_psrfits(search)
    nosub = tmp_path / "nosub.fits"
    fits.PrimaryHDU(header=fits.Header({"FITSTYPE": "PSRFITS", "OBS_MODE": "PSR"})).writeto(nosub)
    with pytest.raises(FormatError, match="no SUBINT"):
        read_psrfits(nosub)
    with pytest.raises(FormatError, match="no such file"):
        read_psrfits(tmp_path / "absent.fits")


# --- COHDDISP and PSRPARAM ---------------------------------------------------

PAR = """\
PSRJ           J1136+1551
RAJ            11:36:03.2477
DECJ           +15:51:04.48
F0             {f0!r}  1
F1             -3.7D-15
PEPOCH         60000
DM             {dm!r}
# a comment line kept verbatim
EPHEM          DE421
"""


def test_cohddisp_always_written_and_read_back(tmp_path):
    from voltstream.dsp.dedisperse import Dedisperser

    a = make_archive(nsub=2, npol=1, nchan=5, nbin=32, pol_type="AA+BB")
    a.dm = float(RNG.uniform(1.0, 8.0))
    a.coherent_nfft = int(RNG.choice([4096, 8192, 16384]))
    path = tmp_path / "c.fits"
    write_psrfits(path, a)
    ref = Dedisperser(a.dm, a.obs.chan_freqs_mhz, a.obs.chan_bw_mhz, a.coherent_nfft)
    with fits.open(path) as h:
        t = h["COHDDISP"]
        hd, d = t.header, t.data
        assert hd["DM"] == a.dm and hd["DOPPLER"] == 1.0 and hd["DOMAIN"] == "FREQ"
        assert hd["NCHAN"] == 5 and hd["NFFT"] == a.coherent_nfft
        assert len(d) == 5 and list(d["OUT_NCHAN"]) == [1] * 5
        np.testing.assert_array_equal(d["FREQ"], h["SUBINT"].data["DAT_FREQ"][0])
        np.testing.assert_array_equal(d["OUT_FREQ"], d["FREQ"])
        assert np.all(d["BW"] == -32.0 / 5) and np.all(d["OUT_BW"] == -32.0 / 5)
        assert np.all(d["NCHIRP"] == a.coherent_nfft)
        assert np.all(d["NCYC_POS"] == ref.discard_head) and ref.discard_head > 0
        assert np.all(d["NCYC_NEG"] == ref.discard_tail) and ref.discard_tail > 0
    b = read_psrfits(path)
    assert b.coherent_nfft == a.coherent_nfft and b.dm == a.dm and b.par_text is None
    a.coherent_nfft = None
    write_psrfits(path, a)
    with fits.open(path) as h:
        assert np.all(h["COHDDISP"].data["NCHIRP"] == 0) and h["COHDDISP"].header["NFFT"] == 0
    assert read_psrfits(path).coherent_nfft is None


def test_psrparam_only_when_par_given(tmp_path):
    f0, dm = float(RNG.uniform(0.5, 700)), float(RNG.uniform(1, 500))
    par = PAR.format(f0=f0, dm=dm) + "\n\n"  # trailing blank lines are not rows
    a = make_archive(polyco=POLYCO)
    a.par_text = par
    path = tmp_path / "p.fits"
    write_psrfits(path, a)
    with fits.open(path) as h:
        names = [x.name for x in h]
        assert {"POLYCO", "PSRPARAM", "COHDDISP"} <= set(names)
        t = h["PSRPARAM"]
        assert t.columns.names == ["PARAM"] and t.columns["PARAM"].format == "128A"
        rows = [str(r) for r in t.data["PARAM"]]
    want = [ln for ln in par.splitlines() if ln.strip()]
    assert rows == want and f"{f0!r}" in rows[3] and rows[7].startswith("# a comment")
    b = read_psrfits(path)
    assert b.par_text == "".join(ln + "\n" for ln in want)
    long = "F2  " + "1" * 200
    a.par_text = par + long + "\n"
    write_psrfits(path, a)
    with fits.open(path) as h:
        assert str(h["PSRPARAM"].data["PARAM"][-1]) == long
    a.par_text = None
    write_psrfits(path, a)
    with fits.open(path) as h:
        assert "PSRPARAM" not in [x.name for x in h]
    a.par_text = "PSRJ J0000+0000\nF0 1.0 \u00b11\n"
    with pytest.raises(FormatError, match="ASCII"):
        write_psrfits(path, a)
