"""`voltstream filterbank`'s files as a peer reads them, and the verb end to end.

`your` (PyPI; SIGPROC and PSRFITS search-mode readers) opens every .fil and .fits
written here: its header fields equal the plan's and its samples equal the rows the
NumPy reference quantised. Then the real CLI on files `voltstream simulate` made, one
with an invalid VDIF frame (counted, flagged, a PSRFITS row of weight 0), and bad
options refused in one line with exit status 2."""

from __future__ import annotations

import json

import numpy as np
import pytest
import your
from astropy.io import fits
from your.formats.psrfits import PsrfitsFile

from cli_process import reaped, run_cli
from voltstream.io.baseband import open_baseband
from voltstream.io.dada import DadaWriter
from voltstream.observation import Observation
from voltstream.pipeline.filterbank import make_filterbank, open_writer
from voltstream.search.filterbank import FilterbankPlan, FilterbankSettings

#: These tests check the NumPy reference's files: on a machine with a GPU too (the
#: default --device is auto); tests/gpu/test_filterbank_gpu.py checks the GPU's.
CPU = ["--device", "cpu"]


def filterbank_cli(*args):
    return run_cli("filterbank", *CPU, *args)


def dada_input(tmp_path, chan_bw):
    """Noise and a tone in coarse channel 1, 4 channels x 2 pols, 8-bit, a start with
    a fraction of a second."""
    obs = Observation(nchan=4, npol=2, freq_mhz=1400.0, bw_mhz=4 * chan_bw,
                      tsamp_s=1e-6 / abs(chan_bw), start_mjd=60123, start_sec=4567.123456789,
                      source="J0534+2200")  # fmt: skip
    rng = np.random.default_rng(11)
    n = 40000
    q = rng.normal(0, 12, (n, 4, 2, 2))
    q[:, 1, :, 0] += 30 * np.cos(2 * np.pi * 0.3 * np.arange(n))[:, None]
    q[:, 1, :, 1] += 30 * np.sin(2 * np.pi * 0.3 * np.arange(n))[:, None]
    path = tmp_path / "in.dada"
    with DadaWriter(path, obs) as w:
        w.write(np.clip(np.rint(q), -127, 127).astype(np.int8))
    return path


def reference_rows(path, settings, out, file_format):
    """Writes ``out`` as the CLI does and returns the rows the reference quantised."""
    reader = open_baseband(path)
    plan = FilterbankPlan(reader.obs, settings)
    rows = []
    writer = open_writer(str(out), file_format, plan, "test")
    try:
        make_filterbank(reader, plan, writer,
                        on_row=lambda d, s, o, ok: rows.append((d, s, o, ok)))  # fmt: skip
    finally:
        writer.close()
    return plan, rows


@pytest.mark.parametrize("chan_bw", [2.0, -2.0])
@pytest.mark.parametrize("file_format,suffix", [("sigproc", "fil"), ("psrfits", "fits")])
@pytest.mark.parametrize("pol,nbits", [("I", 8), ("I", 32), ("IQUV", 8)])
def test_your_reads_what_we_write(tmp_path, chan_bw, file_format, suffix, pol, nbits):
    path = dada_input(tmp_path, chan_bw)
    out = tmp_path / f"out.{suffix}"
    settings = FilterbankSettings(16, 16 * 0.5e-6 * 2, pol, nbits, nsblk=200)
    plan, rows = reference_rows(path, settings, out, file_format)
    data = np.concatenate([r[0] for r in rows])
    nsamp = len(data)
    assert nsamp == 40000 // 32 and len(rows) == 7

    y = your.Your(str(out))
    h = y.your_header
    assert h.nchans == 64 and h.nbits == nbits
    assert h.fch1 == pytest.approx(plan.chan_freqs_mhz[0], abs=1e-9)
    assert h.foff == pytest.approx(chan_bw / 16, rel=1e-12)  # negative: descending
    assert h.tsamp == pytest.approx(16e-6, rel=1e-12)
    start = plan.out_obs
    assert h.tstart == pytest.approx(60123 + 4567.123456789 / 86400, abs=2e-11)
    assert (start.start_mjd, start.start_sec) == (60123, 4567.123456789)
    assert h.native_nspectra >= nsamp

    tone = plan.chan_freqs_mhz  # the tone: coarse channel 1, +0.3 of its width
    sky = 1400.0 - 4 * chan_bw / 2 + chan_bw * 1.5 + np.sign(chan_bw) * 0.3 * abs(chan_bw)
    assert abs(tone[data[:, 0].astype(float).mean(axis=0).argmax()] - sky) < abs(chan_bw) / 16

    if file_format == "sigproc":
        got = y.get_data(0, nsamp, npoln=4 if pol == "IQUV" else 1)
        want = data if pol == "IQUV" else data[:, 0]
        assert got.dtype == want.dtype and np.array_equal(got, want)
    else:
        # `your`'s PSRFITS reader applies DAT_SCL, DAT_OFFS and DAT_WTS; Your.get_data
        # then rounds to the file's type, which for 8 bits wraps values our per-channel
        # scales give (docs/search.md), so the 8-bit check reads through the reader.
        got = PsrfitsFile.get_data(y, 0, nsamp)[:, 0] if nbits == 8 else y.get_data(0, nsamp)
        want = np.concatenate([
            r[0][:, 0].astype(np.float32) * r[1][0] + r[2][0] for r in rows
        ])  # fmt: skip
        np.testing.assert_array_equal(got, want)
        with fits.open(out) as hdul:
            sub = hdul["SUBINT"]
            assert hdul[0].header["OBS_MODE"] == "SEARCH"
            assert (hdul[0].header["STT_IMJD"], hdul[0].header["STT_SMJD"]) == (60123, 4567)
            assert hdul[0].header["STT_OFFS"] == pytest.approx(0.123456789, abs=1e-12)
            assert sub.header["NSBLK"] == 200 and sub.header["NSTOT"] == nsamp
            assert sub.header["NPOL"] == (4 if pol == "IQUV" else 1)
            assert sub.header["CHAN_BW"] == pytest.approx(chan_bw / 16)
            np.testing.assert_allclose(sub.data["DAT_FREQ"][0], plan.chan_freqs_mhz)
            np.testing.assert_allclose(sub.data["OFFS_SUB"], (np.arange(7) + 0.5) * 200 * 16e-6)


def simulate(tmp_path, *extra):
    out = tmp_path / "sim.vdif"
    r = run_cli("simulate", "--format", "vdif", "--nchan", "4", "--chan-bw", "1",
                "--signal", "pulsar", "--dm", "10", "--period", "0.01", "--duration", "0.05",
                "-o", str(out), *extra)  # fmt: skip
    assert r.returncode == 0, r.stderr
    return out


def invalidate_frame(path, k):
    """Sets the invalid bit of frame ``k`` (word 0 bit 31)."""
    raw = bytearray(path.read_bytes())
    flen = int.from_bytes(raw[8:12], "little") & 0xFFFFFF
    raw[k * flen * 8 + 3] |= 0x80
    path.write_bytes(bytes(raw))
    return int.from_bytes(raw[8:12], "little") & 0xFFFFFF


def test_cli_on_a_simulated_file(tmp_path):
    vdif = simulate(tmp_path)
    out, rep = tmp_path / "sim.fil", tmp_path / "r.json"
    r = filterbank_cli(str(vdif), "--fine-channels", "8", "--tsamp", "32e-6", "-o",
                str(out), "--report", str(rep))  # fmt: skip
    assert r.returncode == 0, r.stderr
    report = json.loads(rep.read_text())["filterbank"]
    assert report["samples_in"] == 50000 and report["lost_in"] == 0
    assert report["samples_out"] == 50000 // 32 and report["lost_out"] == 0
    assert (report["nchans"], report["tsamp_s"], report["foff_mhz"]) == (32, 32e-6, 0.125)
    assert report["fch1_mhz"] == pytest.approx(1420.0 - 2.0)
    assert "50000 samples in (0 lost) -> 1562 samples out" in r.stdout
    y = your.Your(str(out))
    assert y.your_header.nspectra == 1562 and y.your_header.nchans == 32


def test_cli_flags_and_counts_an_invalid_frame(tmp_path):
    vdif = simulate(tmp_path)
    invalidate_frame(vdif, 20)  # time-major, 2 threads: samples 10000-10999 of pol 0
    out, rep = tmp_path / "lost.fits", tmp_path / "r.json"
    r = filterbank_cli(str(vdif), "--fine-channels", "4", "--nsblk", "64",
                "-o", str(out), "--report", str(rep))  # fmt: skip
    assert r.returncode == 0, r.stderr
    report = json.loads(rep.read_text())["filterbank"]
    assert report["lost_in"] == 1000 and report["lost_out"] == 250
    assert report["rows_zero_weight"] >= 2  # 256 inputs a row: whole rows in the frame
    with fits.open(out) as hdul:
        wts = hdul["SUBINT"].data["DAT_WTS"][:, 0]
        data = hdul["SUBINT"].data["DATA"]
    dead = np.flatnonzero(wts == 0)
    assert len(dead) == report["rows_zero_weight"] and (data[dead] == 128).all()
    fil = tmp_path / "lost.fil"
    r = filterbank_cli(str(vdif), "--fine-channels", "4", "-o", str(fil))
    assert r.returncode == 0 and "(250 flagged lost" in r.stdout
    got = your.Your(str(fil)).get_data(0, 12500)
    flagged = (got == 128).all(axis=1)  # every channel at the quantiser's zero
    assert list(np.flatnonzero(flagged)) == list(range(2500, 2750))


@pytest.mark.parametrize(
    "args,words",
    [
        (["--tsamp", "-1"], "--tsamp: must be positive"),
        (["--tsamp", "nan"], "--tsamp: must be positive"),
        (["--fine-channels", "12"], "power of two"),
        (["--fine-channels", "8", "--tsamp", "12e-6"], "not a whole number of fine samples"),
    ],
)
def test_bad_options_one_line_exit_2(tmp_path, args, words):
    vdif = simulate(tmp_path)
    r = filterbank_cli(str(vdif), "-o", str(tmp_path / "x.fil"), *args)
    assert r.returncode == 2 and words in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and "Traceback" not in r.stderr


def test_empty_names_do_not_end_the_header(tmp_path):
    """SIGPROC's readers take a zero-length string for the header's end: a file with no
    source name or raw data file name must still read from its first sample."""
    path = dada_input(tmp_path, 2.0)
    reader = open_baseband(path)
    reader.obs.source = ""
    plan = FilterbankPlan(reader.obs, FilterbankSettings(4))
    rows = []
    writer = open_writer(str(tmp_path / "e.fil"), "sigproc", plan, history="")
    make_filterbank(reader, plan, writer, on_row=lambda d, s, o, ok: rows.append(d))
    writer.close()
    data = np.concatenate(rows)[:, 0]
    assert np.array_equal(your.Your(str(tmp_path / "e.fil")).get_data(0, len(data)), data)


def test_listen_makes_the_file_a_recording_of_the_stream_makes(tmp_path):
    """`filterbank --listen` on the simulator's stream over loopback writes the samples
    `filterbank FILE` writes from the simulator's file of the same stream."""
    import subprocess
    import sys

    from loopback import free_bind, wait_bound

    bind = free_bind()
    live, rep = tmp_path / "live.fil", tmp_path / "live.json"
    fmt = ["--format", "vdif", "--nchan", "4", "--chan-bw", "1"]
    proc = subprocess.Popen(
        [sys.executable, "-m", "voltstream.cli", "filterbank", *CPU, "--listen", bind, *fmt,
         "--duration", "30", "--idle-timeout", "3", "--engine", "socket", "--no-status",
         "--fine-channels", "8", "-o", str(live), "--report", str(rep)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    with reaped(proc):
        wait_bound(bind)
        sent = run_cli("simulate", *fmt, "--signal", "pulsar", "--dm", "10", "--period",
                       "0.01", "--duration", "0.05", "--dest", bind, "--rate", "0.05")  # fmt: skip
        assert sent.returncode == 0, sent.stderr
        out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    report = json.loads(rep.read_text())
    assert report["capture"]["totals"]["received"] == 100 and report["capture"]["lost"] == 0
    assert report["filterbank"]["samples_in"] == 50000
    assert report["filterbank"]["samples_out"] == 6250
    vdif = simulate(tmp_path)
    r = filterbank_cli(str(vdif), "--fine-channels", "8", "-o", str(tmp_path / "f.fil"))
    assert r.returncode == 0, r.stderr
    a, b = your.Your(str(live)), your.Your(str(tmp_path / "f.fil"))
    assert np.array_equal(a.get_data(0, 6250), b.get_data(0, 6250))


def test_listen_with_nothing_arriving_is_no_data(tmp_path):
    from loopback import free_bind

    out = tmp_path / "none.fil"
    r = filterbank_cli("--listen", free_bind(), "--format", "vdif", "--idle-timeout",
                "0.5", "--engine", "socket", "--no-status", "-o", str(out))  # fmt: skip
    assert r.returncode == 3 and not out.exists(), r.stderr


def test_cli_on_a_simulated_dada_file_with_dm(tmp_path):
    dada = tmp_path / "sim.dada"
    r = run_cli("simulate", "--format", "ynao", "--signal", "pulsar", "--duration", "0.02",
                "-o", str(dada))  # fmt: skip
    assert r.returncode == 0, r.stderr
    out, rep = tmp_path / "sim.fits", tmp_path / "r.json"
    r = filterbank_cli(str(dada), "--fine-channels", "4", "--tsamp", "4e-6", "--dm",
                "5", "-o", str(out), "--report", str(rep))  # fmt: skip
    assert r.returncode == 0, r.stderr
    report = json.loads(rep.read_text())["filterbank"]
    obs = open_baseband(dada).obs
    head = report["first_input_sample"]
    # The filter's head comes first; its tail and the overlap it holds at the end
    # are all that is not written (less than one FFT of input samples).
    assert head > 0 and 0 < report["not_written"] < 80000 - 16 * report["samples_out"] + 1
    assert report["tstart_sec"] == pytest.approx(obs.start_sec + head * obs.tsamp_s, abs=1e-9)
    y = your.Your(str(out))
    assert y.your_header.nchans == 128 and y.your_header.tsamp == pytest.approx(4e-6)
    day = report["tstart_mjd"] + report["tstart_sec"] / 86400
    assert y.your_header.tstart == pytest.approx(day, abs=2e-11)
    with fits.open(out) as hdul:
        assert hdul[0].header["CHAN_DM"] == 5.0
        assert hdul["SUBINT"].header["NSTOT"] == report["samples_out"]
