"""DADA files as PSRDADA, DSPSR and EDD write them, read and folded through the CLI:
headers with comments (whole lines and after values), blank lines, any key order,
HDR_SIZE 8192, no DADA_VERSION; real-sampled bands (NDIM 1); other sample orders;
observations cut into several files; and our writer's header as PSRDADA reads it."""

from __future__ import annotations

import dataclasses
import re

import numpy as np
import pytest
from astropy.io import fits

from cli_process import run_cli
from voltstream.dsp.real import ComplexToReal
from voltstream.io.baseband import open_baseband
from voltstream.io.dada import DadaWriter, open_dada
from voltstream.observation import Observation
from voltstream.sim.signal import quantize_int8, synthesize

PULSAR = {"dm": 20.0, "period_s": 0.02, "duty": 0.05, "pulse_phase": 0.25}
FOLD = ["--device", "cpu", "--dm", "20", "--period", "0.02", "--nbin", "64"]


def psrdada_header(hdr_size: int, **keys: object) -> bytes:
    """A header laid out as PSRDADA's templates are (header.dada, dada_dbdisk's files):
    comment lines, a comment after most values, blank lines, HEADER not first, no
    DADA_VERSION; padded with NULs to ``hdr_size``."""
    lines = [
        "# DADA header: observation parameters (PSRDADA specification, appendix B)",
        f"TELESCOPE    {keys.pop('TELESCOPE', 'Effelsberg')}   # name of the telescope",
        "HEADER       DADA                # Distributed aquisition and data analysis",
        "HDR_VERSION  1.0                 # Version of this ASCII header",
        f"HDR_SIZE     {hdr_size}                # Size of the header in bytes",
        "",
        "# the observation",
    ]
    for k, v in keys.items():
        lines.append(f"{k:<12} {v:<20}# {k.lower()} as the backend sets it")
    lines += ["", "INSTRUMENT   EDD   # instrument", "# end of header"]
    text = ("\n".join(lines) + "\n").encode("ascii")
    assert len(text) < hdr_size
    return text.ljust(hdr_size, b"\0")


def fold_profile(path, tmp_path, *extra):
    out = tmp_path / "out.fits"
    r = run_cli("fold", str(path), *FOLD, "-o", str(out), *extra, timeout=300)
    assert r.returncode == 0, r.stderr
    assert "Traceback" not in r.stderr
    with fits.open(out) as hd:
        data = hd["SUBINT"].data["DATA"].astype(float)
    prof = data.sum(axis=(0, 1, 2)) if data.ndim == 4 else data.sum(axis=0).ravel()
    return (prof - np.median(prof)) / prof.std(), r


def complex_pulsar(nchan: int, chan_bw: float, seconds: float) -> tuple[Observation, np.ndarray]:
    obs = Observation(nchan=nchan, npol=2, freq_mhz=1400.0, bw_mhz=nchan * chan_bw,
                      tsamp_s=1e-6 / chan_bw, source="J0000+0000")  # fmt: skip
    return obs, synthesize(obs, seconds, signal="pulsar", seed=3, **PULSAR)


def assert_pulsar_found(profile, nbin=64):
    peak = int(np.argmax(profile))
    assert abs(peak - PULSAR["pulse_phase"] * nbin) <= 2, peak
    off = np.abs((np.arange(nbin) - peak + nbin // 2) % nbin - nbin // 2) > 6
    snr = (profile[peak] - np.median(profile[off])) / profile[off].std()
    assert snr > 20, snr  # well above the noise of the off-pulse bins


def test_a_psrdada_header_with_comments_opens_and_folds(tmp_path):
    obs, z = complex_pulsar(nchan=2, chan_bw=1.0, seconds=0.8)
    q, _ = quantize_int8(z)  # (n, nchan, npol, 2)
    path = tmp_path / "2024-06-11-12:34:56_0000000000000000.000000.dada"
    head = psrdada_header(
        8192, NBIT=8, NDIM=2, NPOL=2, NCHAN=2, FREQ=1400.0, BW=2.0, TSAMP=1.0,
        SOURCE="J0000+0000", UTC_START="2024-06-11-12:34:56", OBS_OFFSET=0,
        FILE_SIZE=q.nbytes, FILE_NUMBER=0, ORDER="TFP", BYTES_PER_SECOND=8000000,
    )  # fmt: skip
    path.write_bytes(head + q.tobytes())
    r = open_dada(path)
    assert (r.hdr_size, r.nsamp, r.obs.ndim, r.obs.tsamp_s) == (8192, len(q), 2, 1e-6)
    assert r.header["NBIT"] == "8" and r.header["HEADER"] == "DADA"
    assert np.array_equal(r.read_raw(0, r.nsamp), q)  # every sample as written
    profile, _ = fold_profile(path, tmp_path)
    assert_pulsar_found(profile)
    ins = run_cli("inspect", str(path))
    assert ins.returncode == 0 and "order: TFP" in ins.stdout, ins.stderr


def test_a_real_sampled_wide_band_folds_through_the_real_to_complex_path(tmp_path):
    # EDD / MeerKAT packetiser style: NCHAN 1, NDIM 1, the band sampled real at 2 B.
    obs, z = complex_pulsar(nchan=1, chan_bw=2.0, seconds=0.8)
    x = ComplexToReal()(z)  # (2n, 1, 2) real, at 4 MS/s
    q = np.clip(np.rint(x * (20 / x.std())), -127, 127).astype(np.int8)
    path = tmp_path / "edd.dada"
    head = psrdada_header(
        4096, NCHAN=1, NPOL=2, NDIM=1, NBIT=8, TSAMP=0.25, BW=2.0, FREQ=1400.0,
        SOURCE="J0000+0000", UTC_START="2024-06-11-12:34:56", OBS_OFFSET=0,
    )  # fmt: skip
    path.write_bytes(head + q[..., None].tobytes())
    r = open_dada(path)
    assert (r.obs.ndim, r.obs.nchan, r.nsamp) == (1, 1, len(q))
    block = next(r.read_blocks(1000))
    assert block.dtype == np.float32 and np.array_equal(block, q[:1000].astype(np.float32))
    profile, run = fold_profile(path, tmp_path)
    assert "real samples" in run.stderr  # the log says it converted them
    assert_pulsar_found(profile)


def test_channel_major_order_reads_as_time_major_and_others_are_refused(tmp_path):
    obs, z = complex_pulsar(nchan=2, chan_bw=1.0, seconds=0.01)
    q, _ = quantize_int8(z)
    keys = dict(NBIT=8, NDIM=2, NPOL=2, NCHAN=2, FREQ=1400.0, BW=2.0, TSAMP=1.0,
                SOURCE="J0000+0000", UTC_START="2024-06-11-12:34:56", OBS_OFFSET=0)  # fmt: skip
    fpt = tmp_path / "fpt.dada"
    stored = np.ascontiguousarray(q.transpose(1, 2, 0, 3))  # channel, pol, time, re/im
    fpt.write_bytes(psrdada_header(4096, ORDER="FPT", FILE_SIZE=q.nbytes, **keys)
                    + stored.tobytes())  # fmt: skip
    r = open_dada(fpt)
    assert r.nsamp == len(q) and np.array_equal(r.read_raw(5, 100), q[5:105])
    bad = tmp_path / "tspf.dada"
    bad.write_bytes(psrdada_header(4096, ORDER="TSPF", **keys) + q.tobytes())
    run = run_cli("fold", str(bad), *FOLD, "-o", str(tmp_path / "o.fits"))
    assert run.returncode == 2 and "Traceback" not in run.stderr
    lines = run.stderr.strip().splitlines()
    assert len(lines) == 1 and "ORDER TSPF is not supported" in lines[0], run.stderr


def test_three_files_of_one_observation_fold_as_one(tmp_path):
    obs, z = complex_pulsar(nchan=2, chan_bw=1.0, seconds=0.9)
    q, _ = quantize_int8(z)
    obs = dataclasses.replace(obs, start_mjd=60472, start_sec=3600.0)
    parts = np.array_split(q, 3)
    offset, paths = 0, []
    for i, part in enumerate(parts):
        p = tmp_path / f"2024-06-12-01:00:00_{offset:016d}.000000.dada"
        with DadaWriter(p, obs, {"OBS_OFFSET": offset, "FILE_NUMBER": i}) as w:
            w.write(part)
        paths.append(p)
        offset += part.nbytes
    # A file of another observation in the same folder is not taken.
    other = dataclasses.replace(obs, start_sec=7200.0)
    with DadaWriter(tmp_path / "other.dada", other, {"OBS_OFFSET": parts[0].nbytes}) as w:
        w.write(parts[1])
    seq = open_baseband(paths[0], sequence=True)
    assert seq.nsamp == len(q)
    assert np.array_equal(seq.read_raw(0, seq.nsamp), q)  # across both file boundaries
    assert np.array_equal(seq.read_raw(len(parts[0]) - 3, 6), q[len(parts[0]) - 3 :][:6])
    profile, run = fold_profile(paths[0], tmp_path)
    assert f"{len(q)} samples folded" in run.stdout
    assert all(p.name in run.stderr for p in paths) and "other.dada" not in run.stderr
    assert_pulsar_found(profile)
    # The second file opens its own rest of the observation, from its own start.
    rest = open_baseband(paths[1], sequence=True)
    assert rest.nsamp == len(parts[1]) + len(parts[2])
    # Without the middle file, the first is read alone and the log names the rest.
    paths[1].unlink()
    alone = run_cli("inspect", str(paths[0]))
    assert alone.returncode == 0 and f"nsamp: {len(parts[0])}" in alone.stdout
    assert "after a gap" in alone.stderr and paths[2].name in alone.stderr


def test_our_header_reads_as_psrdada_reads_it(tmp_path):
    """PSRDADA's ascii_header_get finds ``KEY`` and scans one blank-free word after it:
    every key its tools use is there, once, with such a value."""
    obs, _ = complex_pulsar(nchan=2, chan_bw=1.0, seconds=0.001)
    path = tmp_path / "ours.dada"
    with DadaWriter(path, obs) as w:
        w.write(np.zeros((10, 2, 2, 2), np.int8))
    text = path.read_bytes()[:4096].split(b"\0", 1)[0].decode("ascii")
    words = {}
    for line in text.splitlines():
        key, value = line.split(None, 1)
        assert key not in words and re.fullmatch(r"\S+", value.strip()), line
        words[key] = value.strip()
    for key in ("HEADER", "HDR_VERSION", "HDR_SIZE", "TELESCOPE", "INSTRUMENT", "SOURCE",
                "FREQ", "BW", "TSAMP", "NBIT", "NDIM", "NPOL", "NCHAN", "UTC_START",
                "OBS_OFFSET", "FILE_SIZE", "FILE_NUMBER", "BYTES_PER_SECOND",
                "RESOLUTION"):  # fmt: skip
        assert key in words, key
    assert int(words["BYTES_PER_SECOND"]) == 8 * 1_000_000  # 2 x 2 x 2 bytes at 1 MS/s
    assert int(words["FILE_SIZE"]) == 10 * 8 and int(words["RESOLUTION"]) == 8


@pytest.mark.parametrize("first", [b"# a comment line first\n", b"\n"])
def test_a_header_that_starts_with_a_comment_or_blank_is_recognised(tmp_path, first):
    obs, z = complex_pulsar(nchan=2, chan_bw=1.0, seconds=0.001)
    q, _ = quantize_int8(z)
    head = psrdada_header(4096, NBIT=8, NDIM=2, NPOL=2, NCHAN=2, FREQ=1400.0, BW=2.0,
                          TSAMP=1.0, SOURCE="J0000+0000", UTC_START="2024-06-11-12:34:56",
                          OBS_OFFSET=0)  # fmt: skip
    path = tmp_path / "c.dada"
    path.write_bytes((first + head)[:4096] + q.tobytes())
    assert open_baseband(path).nsamp == len(q)
