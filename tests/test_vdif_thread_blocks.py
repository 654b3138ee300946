"""Every thread of a VDIF stream folds (issue 27, "Done when": a 2-bit real 4-thread
stream folded live): threads are polarisations and blocks of channels side by side
(io/vdif_threads.py, thread k = pol k % npol of block k // npol). A 4-thread 2-bit real
stream (the common EDV3 shape), simulated to a file and sent over loopback, folds
live (CLI, CPU) as the file folds, every thread's frames taken; the chunk layout the
GPU's real-to-complex kernel reads places every value where the CPU's decode does."""

from __future__ import annotations

import argparse
import json

import numpy as np
import pytest

from cli_process import run_cli
from fold_compare import assert_same_fold
from loopback import free_bind, send
from packed_ref import decode_ref
from test_cli_outcomes import Listening
from voltstream.cli.stream_options import fold_stream_options
from voltstream.errors import ConfigError
from voltstream.formats import make_format
from voltstream.io.psrfits import read_psrfits
from voltstream.io.vdif import open_vdif
from voltstream.io.vdif_threads import ThreadBlocks, from_blocks, to_blocks

# Four threads of one real 2-bit channel (2 MS/s real, 1 MHz complex channels).
REAL4 = ("--format", "vdif", "--real", "--bits", "2", "--nchan", "1", "--chan-bw", "1",
         "--vdif-payload", "1000", "--vdif-threads", "0,1,2,3")  # fmt: skip
FOLD = ("--dm", "5", "--period", "0.0200037", "--nbin", "32", "--tsub", "0.1",
        "--device", "cpu")  # fmt: skip


@pytest.mark.parametrize("npol,where", [(1, [(0, 0), (1, 0), (2, 0), (3, 0)]),
                                        (2, [(0, 0), (0, 1), (1, 0), (1, 1)])])  # fmt: skip
def test_thread_k_is_pol_k_mod_npol_of_block_k_div_npol(npol, where):
    # Samples (n, nchan 2, thread): thread k's values are 10 k + channel.
    x = np.zeros((3, 2, 4), np.float32)
    for k in range(4):
        x[:, :, k] = 10 * k + np.arange(2)
    band = to_blocks(x, npol)
    assert band.shape == (3, 2 * 4 // npol, npol)
    for k, (block, pol) in enumerate(where):
        np.testing.assert_array_equal(band[:, 2 * block : 2 * block + 2, pol], x[:, :, k])
    np.testing.assert_array_equal(from_blocks(band, 4 // npol), x)


@pytest.mark.parametrize("npol", [1, 2])
@pytest.mark.parametrize("bits,real", [(2, True), (4, True), (8, False), (2, False)])
def test_the_chunk_layout_of_thread_blocks_reads_what_the_cpu_decodes(npol, bits, real):
    """The capture's chunk [thread][packet][payload] as the GPU kernels read it
    (PackedLayout channel blocks) equals the live CPU fold's decode, and packetize then
    decode gives the band back in its place (block, pol)."""
    fmt = make_format("vdif", nchan=2, chan_bw_mhz=1.0, vdif_payload=200, bits=bits,
                      real=real, npol=npol, vdif_threads=[4, 5, 6, 7])  # fmt: skip
    assert (fmt.streams, fmt.nchan, fmt.npol, fmt.thread_nchan) == (4, 8 // npol, npol, 2)
    assert fmt.capture_kwargs()["vdif_threads"] == [4, 5, 6, 7]
    spp, npkt = fmt.samples_per_packet, 3
    obs = fmt.observation(start_mjd=60000, start_sec=1.0)
    rng = np.random.default_rng(bits)
    shape = (npkt * spp, fmt.nchan, npol)
    scale = 1.5 if bits < 8 else 20.0
    x = rng.normal(0, scale, shape).astype(np.float32)
    if not real:
        x = (x + 1j * rng.normal(0, scale, shape)).astype(np.complex64)
    packets = fmt.packetize(x, 0, obs)  # frame k of every thread, then k + 1
    payload = packets[:, 32:].reshape(npkt, 4, -1).transpose(1, 0, 2)
    payload = np.ascontiguousarray(payload)
    present = np.ones((4, npkt), bool)
    present[2, 1] = False  # one frame of thread 6 lost: its block and pol read zero
    cpu = fmt.payload_to_complex(payload, present)
    assert cpu.shape == shape
    b, p = divmod(2, npol)
    lost = cpu[spp : 2 * spp, 2 * b : 2 * b + 2, p]
    assert not np.any(lost)
    mask = present.all(axis=0).repeat(spp)  # the kernel zeroes by the mask it is given
    # Each (channel, pol) of the band decodes to its own quantised samples, in place.
    for c in range(fmt.nchan):
        for q in range(npol):
            r = np.corrcoef(cpu[mask, c, q].real, x[mask, c, q].real)[0, 1]
            assert r > 0.85, (c, q, r)
    gpu = decode_ref(payload.reshape(-1), fmt.chunk_layout(npkt), npkt * spp)
    gpu = gpu.reshape(cpu.shape)
    if real:
        np.testing.assert_array_equal(gpu.real[mask], cpu[mask])
    else:
        np.testing.assert_array_equal(gpu[mask], cpu[mask])
    if bits == 8 and not real:  # the 8-bit int8 path (capture --output, TfpSink)
        tfp = fmt.payload_to_tfp(payload, present)
        as_c = tfp.astype(np.float32).view(np.complex64)[..., 0]
        np.testing.assert_array_equal(as_c, cpu)


def _args(**kw):
    base = dict(listen="127.0.0.1:5000", stream=None, vdif_threads=None, chan_bw=None,
                station=None, format="ynao", real=False, npol=None)  # fmt: skip
    return argparse.Namespace(**{**base, **kw})


def test_a_four_thread_description_folds_every_thread_by_its_npol(tmp_path):
    toml = tmp_path / "edv3.toml"
    head = ('format = "vdif"\nthreads = [0, 1, 2, 3]\nframe_len = 8032\n'
            "frames_per_second = 32000\nbits_per_sample = 2\ncomplex = false\n")  # fmt: skip
    toml.write_text(head)
    args = _args(stream=str(toml))
    fold_stream_options(args)  # no npol: four subbands of one polarisation
    assert (args.vdif_threads, args.npol, args.real) == ([0, 1, 2, 3], 1, True)
    toml.write_text(head + "npol = 2\n")
    args = _args(stream=str(toml))
    fold_stream_options(args)
    assert (args.vdif_threads, args.npol) == ([0, 1, 2, 3], 2)
    args = _args(stream=str(toml), npol=1)  # the command line wins
    fold_stream_options(args)
    assert args.npol == 1
    toml.write_text(head.replace("[0, 1, 2, 3]", "[0, 1, 2]") + "npol = 2\n")
    with pytest.raises(ConfigError, match="npol") as e:
        fold_stream_options(_args(stream=str(toml)))
    assert "\n" not in str(e.value)
    with pytest.raises(ConfigError, match="--npol 2: 3 threads"):
        make_format("vdif", nchan=1, npol=2, vdif_threads=[0, 1, 2])


def _simulated(tmp_path, *fmt):
    path = tmp_path / "edv3.vdif"
    r = run_cli("simulate", *fmt, "--signal", "pulsar", "--dm", "5", "--period", "0.0200037",
                "--duty", "0.1", "--duration", "0.5", "--seed", "3", "-o", str(path))  # fmt: skip
    assert r.returncode == 0, r.stderr
    return path


def test_a_two_bit_real_four_thread_stream_folds_live_as_its_file(tmp_path):
    path = _simulated(tmp_path, *REAL4)
    assert json.loads(path.with_suffix(".vdif.json").read_text())["npol"] == 1
    frames = np.fromfile(path, np.uint8).reshape(-1, 1032)
    threads = frames[:, 12:16].view("<u4")[:, 0] >> 16 & 0x3FF
    assert sorted(set(threads.tolist())) == [0, 1, 2, 3]
    frames = np.delete(frames, 301, axis=0)  # one frame of one thread lost, live only
    file_out, live_out, report = tmp_path / "f.fits", tmp_path / "l.fits", tmp_path / "r.json"
    r = run_cli("fold", str(path), *FOLD, "-o", str(file_out))
    assert r.returncode == 0, r.stderr
    assert "4 channels" in r.stdout

    bind = free_bind()
    fold = Listening("fold", "--listen", bind, *REAL4, "--npol", "1", *FOLD, "--engine",
                     "socket", "--duration", "60", "--idle-timeout", "3", "--report",
                     str(report), "-o", str(live_out))  # fmt: skip
    send(bind, frames, pace_every=32)
    rc, out, err = fold.wait()
    assert rc == 0, out + err
    assert "x 4 channels" in out, out + err
    totals = json.loads(report.read_text())["totals"]
    assert (totals["received"], totals["foreign"], totals["missing"]) == (len(frames), 0, 1)
    live, file = read_psrfits(live_out), read_psrfits(file_out)
    assert live.data.shape == file.data.shape and live.data.shape[2] == 4
    assert np.all(live.weights <= file.weights) and np.any(live.weights < file.weights)
    # Sub-integrations the lost frame did not touch fold the same samples.
    same = np.all(live.weights == file.weights, axis=1)
    assert same.sum() >= live.data.shape[0] - 1
    live.data, file.data = live.data[same], file.data[same]
    assert_same_fold(live, file)


def test_the_file_fold_takes_each_thread_as_its_block_of_channels(tmp_path):
    """`fold FILE` reads the threads as fold --listen does: the band's channels are the
    threads' in order (ThreadBlocks over the file's reader)."""
    path = _simulated(tmp_path, *REAL4)
    raw = open_vdif(path)
    assert (raw.obs.nchan, raw.obs.npol) == (1, 4)
    band = ThreadBlocks(raw, 1)
    assert (band.obs.nchan, band.obs.npol, band.obs.bw_mhz) == (4, 1, 4.0)
    np.testing.assert_array_equal(band.read()[:, :, 0], raw.read()[:, 0, :])
    pairs = ThreadBlocks(open_vdif(path), 2)
    assert (pairs.obs.nchan, pairs.obs.npol) == (2, 2)
    np.testing.assert_array_equal(pairs.read()[:, 1, :], raw.read()[:, 0, 2:])
