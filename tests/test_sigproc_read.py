"""The SIGPROC filterbank reader (io/sigproc.py `read_filterbank`): what our writer
writes and what `your`'s writes come back, header and samples; files it cannot take
are refused in one line."""

from __future__ import annotations

import struct

import numpy as np
import pytest

from voltstream.errors import FormatError
from voltstream.io.sigproc import SigprocWriter, read_filterbank
from voltstream.observation import Observation


def _obs(nbit: int, bw: float) -> Observation:
    return Observation(nchan=16, npol=1, freq_mhz=1400.0, bw_mhz=bw, tsamp_s=64e-6,
                       start_mjd=60123, start_sec=4321.5, source="FRB1", nbit=nbit)  # fmt: skip


@pytest.mark.parametrize(("nbit", "bw"), [(8, 16.0), (32, -16.0)])
def test_what_the_writer_writes_reads_back(tmp_path, nbit, bw):
    obs = _obs(nbit, bw)
    rng = np.random.default_rng(1)
    dtype = np.uint8 if nbit == 8 else np.float32
    rows = [(rng.random((n, 1, 16)) * 200).astype(dtype) for n in (5, 7)]
    w = SigprocWriter(tmp_path / "a.fil", obs, 1, "voltstream filterbank x.dada")
    for r in rows:
        w.write_row(r)
    w.close()
    f = read_filterbank(tmp_path / "a.fil")
    assert (f.nchans, f.nifs, f.nbits, f.nsamp) == (16, 1, nbit, 12)
    assert np.array_equal(f.freqs_mhz, obs.chan_freqs_mhz)
    assert f.foff_mhz == obs.chan_bw_mhz and f.tsamp_s == 64e-6
    assert f.tstart_mjd == 60123 + 4321.5 / 86400 and f.source_name == "FRB1"
    assert f.header["rawdatafile"] == "voltstream filterbank x.dada"
    assert np.array_equal(f.data, np.concatenate(rows)[:, 0])


def test_a_file_your_writes_reads_back(tmp_path):
    from your.formats.filwriter import make_sigproc_object

    path = str(tmp_path / "your.fil")
    # your writes keys ours does not (src_raj, az_start, nbeams, barycentric...).
    fil = make_sigproc_object(rawdatafile="your.fil", source_name="B0329+54", nchans=8,
                              foff=-0.5, fch1=1500.0, tsamp=1e-4, tstart=59000.25,
                              nbits=8)  # fmt: skip
    fil.write_header(path)
    data = np.arange(8 * 10, dtype=np.uint8).reshape(10, 8)
    fil.append_spectra(data, path)
    f = read_filterbank(path)
    assert np.allclose(f.freqs_mhz, 1500.0 - 0.5 * np.arange(8))
    assert (f.tsamp_s, f.tstart_mjd, f.source_name) == (1e-4, 59000.25, "B0329+54")
    assert "src_raj" in f.header and "az_start" in f.header
    assert np.array_equal(f.data, data)


def _s(text: str) -> bytes:
    return struct.pack("<i", len(text)) + text.encode()


def _header(**keys: object) -> bytes:
    out = [_s("HEADER_START")]
    for k, v in keys.items():
        out.append(_s(k))
        out.append(struct.pack("<d" if isinstance(v, float) else "<i", v))
    return b"".join(out) + _s("HEADER_END")


def test_channel_frequencies_from_an_fchannel_table(tmp_path):
    freqs = [1400.0, 1401.0, 1403.0]
    head = _s("HEADER_START") + _s("nchans") + struct.pack("<i", 3) + _s("nbits")
    head += struct.pack("<i", 32) + _s("tsamp") + struct.pack("<d", 1e-3)
    head += _s("FREQUENCY_START")
    for fr in freqs:
        head += _s("fchannel") + struct.pack("<d", fr)
    head += _s("FREQUENCY_END") + _s("HEADER_END")
    (tmp_path / "t.fil").write_bytes(head + np.ones((4, 3), "<f4").tobytes())
    f = read_filterbank(tmp_path / "t.fil")
    assert list(f.freqs_mhz) == freqs and f.nsamp == 4


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"\x00" * 400, "not a SIGPROC filterbank"),
        (_s("HEADER_START") + _s("nchans"), "ends before HEADER_END"),
        (_header(nchans=4, nbits=16, tsamp=1e-3, fch1=1400.0, foff=1.0), "16-bit samples"),
        (_header(nchans=4, nbits=8, nifs=2, tsamp=1e-3, fch1=1400.0, foff=1.0), "2 IFs"),
        (_header(nchans=4, nbits=8, tsamp=1e-3), "neither fch1 and foff"),
        (_header(nchans=4, nbits=8, tsamp=1e-3, fch1=1400.0, foff=1.0, weird=1), "'weird'"),
        (_header(nchans=4, nbits=8, fch1=1400.0, foff=1.0), "no tsamp"),
    ],
)
def test_files_it_cannot_take_are_refused_in_one_line(tmp_path, content, message):
    path = tmp_path / "bad.fil"
    path.write_bytes(content)
    with pytest.raises(FormatError, match=message) as e:
        read_filterbank(path)
    assert "\n" not in str(e.value)
