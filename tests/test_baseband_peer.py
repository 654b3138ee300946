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
