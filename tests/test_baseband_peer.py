"""baseband (PyPI) as a real peer: DADA and VDIF that voltstream writes, baseband reads,
and DADA that baseband writes, voltstream reads; samples and start times equal.

baseband ignores the DADA ORDER key and takes polarisation before channel, so DADA is
compared with NCHAN 1, where both orders are the same (docs/formats.md says so)."""

from __future__ import annotations

import astropy.units as u
import numpy as np
import pytest
from astropy.time import Time
from baseband import dada as baseband_dada  # requirements-dev.txt: a real peer, not optional
from baseband import vdif as baseband_vdif

from voltstream.io.dada import DadaWriter, open_dada
from voltstream.observation import Observation

OBS = Observation(nchan=1, npol=2, freq_mhz=1400.0, bw_mhz=16.0, tsamp_s=1 / 16e6,
                  start_mjd=60000, start_sec=10.25)  # fmt: skip


def _complex(q):
    return q[..., 0].astype(np.float32) + 1j * q[..., 1].astype(np.float32)


def test_dada_written_by_voltstream_reads_in_baseband(tmp_path):
    q = np.random.default_rng(1).integers(-100, 100, (4096, 1, 2, 2), dtype=np.int8)
    path = tmp_path / "v.dada"
    with DadaWriter(path, OBS) as w:
        w.write(q)
    with baseband_dada.open(path, "rs") as fh:
        got = fh.read()
        start = fh.start_time
        rate = fh.sample_rate.to_value("MHz")
    assert got.shape == (4096, 2) and rate == pytest.approx(16.0)
    assert np.array_equal(got, _complex(q[:, 0]))
    assert abs((start - Time(60000 + 10.25 / 86400, format="mjd")).sec) < 1e-9


def test_dada_written_by_baseband_reads_in_voltstream(tmp_path):
    q = np.random.default_rng(2).integers(-100, 100, (2048, 2, 2), dtype=np.int8)
    path = tmp_path / "b.dada"
    header = baseband_dada.DADAHeader.fromvalues(
        time=Time("2024-03-04T05:06:07"), samples_per_frame=2048, sample_rate=16 * u.MHz,
        npol=2, nchan=1, bps=8, complex_data=True, freq=1400.0, bw=16.0,
        source="J0000+0000", telescope="PKS")  # fmt: skip
    with baseband_dada.open(path, "ws", header0=header) as fw:
        fw.write(_complex(q))
    r = open_dada(path)
    assert (r.obs.nchan, r.obs.npol, r.obs.ndim, r.nsamp) == (1, 2, 2, 2048)
    assert np.array_equal(np.asarray(r.read_raw(0, 2048))[:, 0], q)
    assert r.obs.tsamp_s == pytest.approx(1 / 16e6)


def test_vdif_written_by_voltstream_reads_in_baseband(tmp_path):
    from voltstream.formats import make_format

    fmt = make_format("vdif", nchan=4, chan_bw_mhz=1.0, vdif_payload=800)
    obs = fmt.observation(start_mjd=60000, start_sec=3.0)
    q = np.random.default_rng(3).integers(-100, 100, (fmt.samples_per_packet * 50, 4, 2, 2),
                                          dtype=np.int8)  # fmt: skip
    path = tmp_path / "v.vdif"
    path.write_bytes(fmt.packetize(q, 0, obs).tobytes())
    with baseband_vdif.open(path, "rs", sample_rate=1 * u.MHz) as fh:
        got = fh.read()  # (time, thread, channel)
        assert fh.sample_rate.to_value("MHz") == pytest.approx(1.0)
    want = _complex(q).transpose(0, 2, 1)  # (time, pol = thread, channel)
    assert got.shape == want.shape
    # baseband decodes 8-bit VDIF codes c as (c - 127.5) / 35.5, voltstream as c - 128
    # (docs/formats.md): the same codes, scaled and shifted by half a step.
    for part in (np.real, np.imag):
        np.testing.assert_allclose(part(got) * 35.5 - 0.5, part(want), atol=1e-3)


def _baseband_vdif(path, bps, complex_data, edv, rng):
    """A VDIF file baseband writes: 2 threads x 4 channels, 16 MHz, frames of 20000."""
    n = 20000 * 4
    x = rng.normal(0, {2: 1.0, 4: 2.0, 8: 20.0}[bps], (n, 2, 4)).astype(np.float32)
    if complex_data:
        x = x + 1j * rng.normal(0, 20.0, x.shape).astype(np.float32)
    with baseband_vdif.open(path, "ws", edv=edv, station=0x4142, sample_rate=16 * u.MHz,
                            samples_per_frame=20000, nchan=4, nthread=2,
                            complex_data=complex_data, bps=bps,
                            time=Time("2024-03-04T05:06:07")) as fw:  # fmt: skip
        fw.write(x)
    with baseband_vdif.open(path, "rs", sample_rate=16 * u.MHz) as fh:
        return fh.read()  # (time, thread, channel), baseband's decoding


@pytest.mark.parametrize(
    "bps,complex_data,edv", [(2, False, 0), (2, False, 4), (4, False, 1), (8, True, 0)]
)
def test_vdif_written_by_baseband_reads_in_voltstream(tmp_path, bps, complex_data, edv):
    from voltstream.io.vdif import open_vdif

    path = tmp_path / "b.vdif"
    want = _baseband_vdif(path, bps, complex_data, edv, np.random.default_rng(bps + edv))
    f = open_vdif(path, freq_mhz=1400.0, bw_mhz=64.0)
    assert (f.obs.nchan, f.obs.npol, f.obs.nbit, f.obs.ndim) == (4, 2, bps, 1 + complex_data)
    assert (f.obs.start_mjd, f.obs.start_sec) == (60373, 18367.0)  # 2024-03-04T05:06:07
    got = np.concatenate([b[0] if isinstance(b, tuple) else b for b in f.read_blocks(f.nsamp)])
    got = got.transpose(0, 2, 1)  # (time, pol = thread, channel), as baseband reads it
    assert got.shape == want.shape
    # The same codes, each reader with its own levels (docs/formats.md): 8-bit
    # (c - 127.5) / 35.5 in baseband, c - 128 here; 4-bit (c - 8) / 2.95 there, c - 8
    # here; 2-bit +-1 and +-3.3166 there, +-1 and +-3.3359 here.
    scale, shift = {2: (1.0, 0.0), 4: (2.95, 0.0), 8: (35.5, -0.5)}[bps]
    for part in (np.real, np.imag) if complex_data else (np.real,):
        w = part(want) * scale + shift
        if bps == 2:
            w = np.sign(w) * np.where(np.abs(w) > 2, 3.3359, 1.0)
        np.testing.assert_allclose(part(got), w, atol=2e-3)


def test_vdif_written_by_baseband_folds_on_the_command_line(tmp_path):
    import json

    from voltstream.cli import main

    path = tmp_path / "b.vdif"
    _baseband_vdif(path, 8, True, 0, np.random.default_rng(9))
    path.with_suffix(".vdif.json").write_text(
        json.dumps({"freq_mhz": 1400.0, "bw_mhz": 64.0, "source": "J0000+0000"})
    )
    out = tmp_path / "b.fits"
    args = ["fold", str(path), "--device", "cpu", "--dm", "0", "--period", "0.001", "--nbin", "32"]
    assert main([*args, "-o", str(out)]) == 0 and out.stat().st_size > 0
