"""Real-sampled VDIF on the live path (issue 27 item 4), without a GPU: the format of a
real stream (`fold --listen --real`, or a description with complex = false), the
chunk layout the GPU's real-to-complex kernel reads (it must place every value where
the CPU's decode finds it), and the refusals, one line each."""

from __future__ import annotations

import argparse

import numpy as np
import pytest

from cli_process import run_cli
from packed_ref import decode_ref
from voltstream.cli.stream_options import fold_stream_options
from voltstream.errors import ConfigError
from voltstream.formats import make_format


@pytest.mark.parametrize("bits", [2, 4, 8])
def test_a_real_chunk_layout_reads_what_the_cpu_decodes(bits):
    fmt = make_format("vdif", nchan=4, chan_bw_mhz=1.0, vdif_payload=800, bits=bits, real=True)
    spp = 800 * 8 // (4 * bits)
    assert (fmt.ndim, fmt.samples_per_packet, fmt.tsamp_s) == (1, spp, pytest.approx(0.5e-6))
    obs = fmt.observation(start_mjd=60000, start_sec=1.0)
    assert (obs.ndim, obs.tsamp_s) == (1, fmt.tsamp_s)
    assert fmt.capture_kwargs()["frames_per_second"] == 2_000_000 // spp
    rng = np.random.default_rng(bits)
    npkt = 3
    x = rng.normal(0, 2.0 if bits < 8 else 20.0, (npkt * spp, 4, 2)).astype(np.float32)
    packets = fmt.packetize(x, 0, obs)  # frame k of thread 0, then of thread 1
    payload = packets[:, 32:].reshape(npkt, 2, -1).transpose(1, 0, 2)  # (stream, packet, ..)
    present = np.ones((2, npkt), bool)
    cpu = fmt.payload_to_complex(np.ascontiguousarray(payload), present)
    assert cpu.dtype == np.float32 and cpu.shape == (npkt * spp, 4, 2)
    layout = fmt.chunk_layout(npkt)  # the chunk as the capture lays it: [stream][packet]
    assert layout.ndim == 1
    gpu = decode_ref(np.ascontiguousarray(payload).reshape(-1), layout, npkt * spp)
    np.testing.assert_array_equal(gpu.real.reshape(cpu.shape), cpu)
    assert not gpu.imag.any()


def test_real_payload_must_hold_whole_real_samples():
    make_format("vdif", nchan=4, bits=2, vdif_payload=8, real=True)  # 16 real samples
    with pytest.raises(ConfigError, match="real"):
        make_format("vdif", nchan=16, bits=8, vdif_payload=8000 + 8, real=True)


def _args(**kw):
    base = dict(listen="127.0.0.1:5000", stream=None, vdif_threads=None, chan_bw=None,
                station=None, format="ynao", real=False)  # fmt: skip
    return argparse.Namespace(**{**base, **kw})


def test_a_real_stream_description_folds_live_with_real_set(tmp_path):
    toml = tmp_path / "dbbc3.toml"
    toml.write_text(
        'format = "vdif"\nthreads = [0, 1, 2, 3]\nframe_len = 8032\nframes_per_second = 32000\n'
        "bits_per_sample = 2\ncomplex = false\n"
    )
    args = _args(stream=str(toml), vdif_threads=[2, 3])
    fold_stream_options(args)
    # 8000 bytes of 2-bit real samples of 1 channel: 32000 a frame, 1.024 GS/s real.
    assert args.real is True and args.vdif_threads == [2, 3] and args.nchan == 1
    assert args.chan_bw == pytest.approx(32000 * 32000 / 2 / 1e6)  # half the real rate
    fmt = make_format("vdif", nchan=args.nchan, chan_bw_mhz=args.chan_bw, bits=args.bits,
                      vdif_payload=args.vdif_payload, npol=2, vdif_threads=args.vdif_threads,
                      real=args.real)  # fmt: skip
    assert fmt.capture_kwargs()["frames_per_second"] == 32000


def test_real_is_for_a_live_stream_one_line(tmp_path):
    f = tmp_path / "x.vdif"
    f.write_bytes(b"")
    r = run_cli("fold", str(f), "--real", "--dm", "1", "--period", "0.1", "-o",
                str(tmp_path / "o.fits"))  # fmt: skip
    assert r.returncode == 2 and r.stderr.count("\n") == 1, r.stderr
    assert "--real describes a live stream" in r.stderr and "Traceback" not in r.stderr
