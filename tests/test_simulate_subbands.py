"""`voltstream simulate --subbands N`: one band synthesised and split, as a digitiser
feeding N nodes does. The subbands together must be exactly the whole band made
directly (same seed), each centred on its own channels, all on one time axis."""

from __future__ import annotations

import dataclasses
import re
import select
import socket
import subprocess
import sys
import time

import numpy as np
import pytest

from cli_process import reaped, run_cli
from voltstream.errors import ConfigError
from voltstream.formats import make_format
from voltstream.io.dada import open_dada
from voltstream.io.vdif import open_vdif
from voltstream.observation import Observation
from voltstream.sim.packetize import YNAO_FRAME_LEN, depacketize_ynao, ynao_headers
from voltstream.sim.signal import quantize_int8, synthesize_blocks
from voltstream.subbands import (
    split_subbands,
    subband_formats,
    subband_path,
    whole_band_observation,
)

FREQ = 1400.0
# The simulator's signal, spelt out so the reference below is made the same way.
PULSAR = {"dm": 26.833, "period_s": 0.0333, "duty": 0.03, "pulse_phase": 0.25, "seed": 7}
PULSAR_ARGS = ["--signal", "pulsar", "--dm", "26.833", "--period", "0.0333", "--duty", "0.03",
               "--pulse-phase", "0.25", "--seed", "7"]  # fmt: skip


def whole_band(nchan: int, chan_bw: float, duration: float) -> tuple[Observation, np.ndarray]:
    """The whole band made directly: synthesised once, quantised once (int8 re/im)."""
    obs = Observation(nchan=nchan, npol=2, freq_mhz=FREQ, bw_mhz=chan_bw * nchan,
                      tsamp_s=1e-6 / abs(chan_bw))  # fmt: skip
    x = np.concatenate(list(synthesize_blocks(obs, duration, signal="pulsar", **PULSAR)))
    return obs, quantize_int8(x)[0]


# --- the reusable pieces (subbands.py) -------------------------------------


@pytest.mark.parametrize("chan_bw", [0.0625, -0.0625])
def test_subband_formats_centre_each_subband_on_its_channels(chan_bw):
    fmt = make_format("ynao", chan_bw_mhz=chan_bw, freq_mhz=FREQ)
    subs = subband_formats(fmt, 4)
    whole = whole_band_observation(fmt, 4)
    assert whole.nchan == 128 and whole.freq_mhz == FREQ
    assert whole.bw_mhz == pytest.approx(128 * chan_bw)
    freqs = whole.chan_freqs_mhz.reshape(4, 32)
    for i, sub in enumerate(subs):
        assert sub == dataclasses.replace(fmt, freq_mhz=sub.freq_mhz)  # only the centre moves
        assert sub.freq_mhz == pytest.approx(freqs[i].mean(), abs=1e-9)
        assert np.allclose(sub.observation().chan_freqs_mhz, freqs[i])
    # Lower sideband: subband 0 holds the highest frequencies, as channel 0 does.
    centres = [s.freq_mhz for s in subs]
    assert centres == sorted(centres, reverse=chan_bw < 0)
    assert subband_formats(fmt, 1) == [fmt]  # one subband is the format itself, exactly


def test_split_subbands_and_paths():
    block = np.arange(3 * 12 * 2 * 2, dtype=np.int8).reshape(3, 12, 2, 2)
    parts = split_subbands(block, 3)
    assert [p.shape for p in parts] == [(3, 4, 2, 2)] * 3
    assert np.array_equal(np.concatenate(parts, axis=1), block)
    assert all(p.flags.c_contiguous for p in parts)
    with pytest.raises(ConfigError, match="5 subbands"):
        split_subbands(block, 5)
    with pytest.raises(ConfigError, match=">= 1"):
        subband_formats(make_format("ynao"), 0)
    assert subband_path("scan.dada", 2) == "scan.sb2.dada"
    assert subband_path("/d/x.y/scan.vdif", 0) == "/d/x.y/scan.sb0.vdif"
    assert subband_path("/d/x.y/scan", 1) == "/d/x.y/scan.sb1"


# --- files ----------------------------------------------------------------------


@pytest.mark.parametrize("chan_bw", [0.0625, -0.0625])
def test_dada_subbands_together_are_the_whole_band(tmp_path, chan_bw):
    r = run_cli("simulate", "--format", "ynao", "--chan-bw", str(chan_bw), "--freq", str(FREQ),
                "--duration", "0.05", *PULSAR_ARGS, "--subbands", "4",
                "--output", str(tmp_path / "scan.dada"))  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert "4 subbands" in r.stdout
    obs, ref = whole_band(128, chan_bw, 0.05)
    assert not (tmp_path / "scan.dada").exists()
    parts = []
    for i in range(4):
        with open_dada(tmp_path / f"scan.sb{i}.dada") as f:
            # Each file is a whole file of its subband: its own centre, width and
            # channel frequencies, the band's start.
            assert float(f.header["FREQ"]) == pytest.approx(FREQ + 32 * chan_bw * (i - 1.5))
            assert float(f.header["BW"]) == pytest.approx(32 * chan_bw)
            assert np.allclose(f.obs.chan_freqs_mhz, obs.chan_freqs_mhz[32 * i : 32 * (i + 1)])
            parts.append(np.array(f.read_raw(0, f.nsamp)))
    assert len({p.shape[0] for p in parts}) == 1
    nsamp = parts[0].shape[0]
    assert nsamp == 3072  # 3125 samples, cut to whole 64-sample packets
    assert np.array_equal(np.concatenate(parts, axis=1), ref[:nsamp])
    if chan_bw < 0:  # subband 0 is the top of the band
        assert float(open_dada(tmp_path / "scan.sb0.dada").header["FREQ"]) == FREQ + 3.0


@pytest.mark.parametrize("bits", [8, 2])
def test_vdif_subbands(tmp_path, bits):
    """8-bit VDIF carries the whole band's quantised samples split; sub-byte VDIF
    quantises in the packetiser, so its subbands are checked for shape and centre."""
    r = run_cli("simulate", "--format", "vdif", "--bits", str(bits), "--nchan", "16",
                "--chan-bw", "-0.064", "--freq", str(FREQ), "--duration", "0.05", *PULSAR_ARGS,
                "--subbands", "2", "--output", str(tmp_path / "v.vdif"))  # fmt: skip
    assert r.returncode == 0, r.stderr
    _, ref = whole_band(32, -0.064, 0.05)
    parts = []
    for i in range(2):
        with open_vdif(tmp_path / f"v.sb{i}.vdif") as f:  # centre from its .json sidecar
            assert f.obs.freq_mhz == pytest.approx(FREQ - 16 * 0.064 * (i - 0.5))
            assert f.obs.nchan == 16 and f.obs.bw_mhz == pytest.approx(-16 * 0.064)
            parts.append(f.read())
    got = np.concatenate(parts, axis=1)
    assert got.shape == (3000, 32, 2)
    if bits == 8:
        want = ref[:3000].astype(np.float32).view(np.complex64)[..., 0]
        assert np.array_equal(got, want)


# --- UDP ------------------------------------------------------------------------


def _receive_all(socks: list[socket.socket], proc: subprocess.Popen) -> list[list[bytes]]:
    """Every datagram on each socket until the sender has exited and the sockets
    have been quiet for a while."""
    got: list[list[bytes]] = [[] for _ in socks]
    quiet_since = None
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        ready, _, _ = select.select(socks, [], [], 0.1)
        for s in ready:
            got[socks.index(s)].append(s.recv(65536))
        if ready or proc.poll() is None:
            quiet_since = None
        elif quiet_since is None:
            quiet_since = time.monotonic()
        elif time.monotonic() - quiet_since > 0.5:
            break
    return got


def test_udp_subbands_share_indices_and_time_stamps():
    socks = []
    try:
        for _ in range(4):
            s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)
            s.bind(("127.0.0.1", 0))
            socks.append(s)
        dest = ",".join(f"127.0.0.1:{s.getsockname()[1]}" for s in socks)
        proc = subprocess.Popen(
            [sys.executable, "-m", "voltstream.cli", "simulate", "--format", "ynao",
             "--chan-bw", "0.0625", "--freq", str(FREQ), "--duration", "0.05", *PULSAR_ARGS,
             "--subbands", "4", "--dest", dest, "--rate", "0.2"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        with reaped(proc):
            got = _receive_all(socks, proc)
            out, err = proc.communicate(timeout=60)
    finally:
        for s in socks:
            s.close()
    assert proc.returncode == 0, err
    assert re.search(r"4 subbands .* 48 packets per destination \(192 in all\)", out), out
    _, ref = whole_band(128, 0.0625, 0.05)
    headers, samples = [], []
    for i, datagrams in enumerate(got):
        assert len(datagrams) == 48, f"subband {i}: {len(datagrams)} of 48 packets"
        pkts = np.frombuffer(b"".join(datagrams), dtype=np.uint8).reshape(-1, YNAO_FRAME_LEN)
        h = ynao_headers(pkts)
        order = np.argsort(h["sequence"], kind="stable")
        h, x = depacketize_ynao(pkts[order])
        assert np.all(h["subband"] == i)  # the ROACH2 numbers its subbands
        headers.append(h)
        samples.append(x)
    for h in headers[1:]:
        for key in ("sequence", "mjd", "second", "nanosecond"):
            assert np.array_equal(h[key], headers[0][key]), key
    assert np.array_equal(headers[0]["sequence"], np.arange(48))
    want = ref[:3072].astype(np.float32).view(np.complex64)[..., 0]
    assert np.array_equal(np.concatenate(samples, axis=1), want)


# --- errors ---------------------------------------------------------------------


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--format", "ynao", "--subbands", "4", "--dest", "127.0.0.1:7000,127.0.0.1:7001"],
         "--dest gives 2 destination(s) for 4 subband(s)"),
        (["--format", "ynao", "--dest", "127.0.0.1:7000,127.0.0.1:7001"],
         "--dest gives 2 destination(s) for 1 subband(s)"),
        (["--format", "spead-dig", "--subbands", "2", "--dest", "127.0.0.1:7000,127.0.0.1:7001"],
         "spead-dig"),
        (["--format", "vdif", "--bits", "2", "--subbands", "2", "--output", "OUT/x.dada"],
         "go to VDIF (.vdif) files, not DADA"),
    ],
)  # fmt: skip
def test_subband_errors_are_one_clear_line(tmp_path, argv, message):
    argv = [a.replace("OUT", str(tmp_path)) for a in argv]
    r = run_cli("simulate", "--duration", "0.01", *argv)
    assert r.returncode == 2, r.stdout + r.stderr
    assert message in r.stderr
    assert "Traceback" not in r.stderr
    assert list(tmp_path.iterdir()) == []  # nothing half-written is left behind


def test_subbands_must_be_positive():
    r = run_cli("simulate", "--subbands", "0", "--dest", "127.0.0.1:7000")
    assert r.returncode == 2 and "must be positive" in r.stderr
