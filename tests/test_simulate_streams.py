"""`voltstream simulate` of the streams the README tour uses beyond complex VDIF and YNAO:
real-sampled 2-bit VDIF (DBBC3), CODIF (docs/examples/codif.toml) and a wavefront
sensor's latency frames (docs/examples/wfs.toml). What it writes is read back by our
readers (and baseband, a real peer, where it reads the format); what it sends is
captured by `capture --stream` (or `latency`) with exact counters. A sender that cannot
keep its --rate says so."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import threading
from pathlib import Path

import astropy.units as u
import numpy as np
from baseband import vdif as baseband_vdif  # requirements-dev.txt: a real peer

from cli_process import run_cli
from loopback import free_bind
from voltstream.io.vdif import open_vdif
from voltstream.sim.codif import SYNC, decode_headers
from voltstream.sim.packetize import depacketize_vdif

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "docs" / "examples"
# 4 channels of 1 MHz, 800-byte payloads: small enough to fold in a second.
SMALL = ["--nchan", "4", "--chan-bw", "1", "--vdif-payload", "800"]


def simulate(*args: str) -> str:
    out = run_cli("simulate", *args)
    assert out.returncode == 0, out.stderr
    return out.stdout


def sent_packets(stdout: str) -> int:
    return int(stdout.split(": ")[-1].split(" packets")[0])


class Listening:
    """A voltstream verb run in a process of its own, once it has bound its port."""

    def __init__(self, *argv: str, cwd: Path) -> None:
        argv_ = [sys.executable, "-m", "voltstream.cli", *argv]
        self.proc = subprocess.Popen(argv_, cwd=cwd, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, text=True)  # fmt: skip
        assert self.proc.stdout is not None and self.proc.stderr is not None
        stream = self.proc.stdout if "--print-address" in argv else self.proc.stderr
        for line in stream:
            if "listening on" in line:
                self.address = line.split("listening on ")[1].split()[0].rstrip(",")
                return
        raise AssertionError(f"{argv[0]} did not start: {self.proc.communicate(timeout=30)}")

    def finish(self) -> str:
        out, err = self.proc.communicate(timeout=120)
        assert self.proc.returncode == 0, err
        return out


def capture_counts(tmp_path: Path, stream: Path, *sim: str) -> tuple[dict, int]:
    """`capture --stream` of what `simulate ... --dest` sends: (totals, packets sent)."""
    bind = free_bind()
    # The idle timeout counts from the start until the first packet: 1 s ran out on CI's
    # loaded host before the simulator's process had started sending (refused, exit 2).
    cap = Listening("capture", "--listen", bind, "--engine", "socket", "--stream", str(stream),
                    "--duration", "60", "--idle-timeout", "4", "--report", "c.json",
                    cwd=tmp_path)  # fmt: skip
    sent = sent_packets(simulate(*sim, "--dest", bind, "--rate", "0.2"))
    cap.finish()
    return json.loads((tmp_path / "c.json").read_text())["totals"], sent


def test_real_two_bit_vdif_reads_in_voltstream_and_baseband_folds_and_captures(tmp_path):
    path = tmp_path / "dbbc3.vdif"
    simulate("--format", "vdif", "--real", "--bits", "2", *SMALL, "--duration", "0.4",
             "--period", "0.02", "--dm", "5", "--duty", "0.1", "--output", str(path))  # fmt: skip
    f = open_vdif(path)  # its sidecar: 2 MS/s real a channel, 2500 frames a second
    assert (f.obs.ndim, f.obs.nbit, f.obs.nchan, f.obs.npol) == (1, 2, 4, 2)
    assert f.obs.tsamp_s == 0.5e-6 and f.valid_samples(0, f.nsamp // 800) is None
    ours = np.concatenate(list(f.read_blocks(f.nsamp)))  # (time, channel, pol)
    with baseband_vdif.open(path, "rs", sample_rate=2 * u.MHz) as fh:
        theirs = fh.read()  # (time, thread, channel); 2-bit levels +-1, +-3.3166
    assert theirs.shape == (ours.shape[0], 2, 4)
    want = np.sign(theirs) * np.where(np.abs(theirs) > 2, 3.3359, 1.0)
    np.testing.assert_allclose(ours.transpose(0, 2, 1), want, atol=1e-4)
    # All four levels in use, at about the optimal spread (a third or so outer).
    outer = np.mean(np.abs(ours) > 2)
    assert 0.2 < outer < 0.45
    # fold converts the channels back to complex baseband and finds the pulsar.
    fold = run_cli("fold", str(path), "--device", "cpu", "--dm", "5", "--period", "0.02",
                   "--nbin", "64", "-o", str(tmp_path / "r.fits"))  # fmt: skip
    assert fold.returncode == 0, fold.stderr
    snr = float(fold.stdout.split("S/N ")[1].split(",")[0])
    assert snr > 20, fold.stdout
    # Sent: a capture of the stream as a description says it (frames of 832 bytes,
    # 2500 a second) counts every frame.
    (tmp_path / "real.toml").write_text(
        'format = "vdif"\nthreads = [0, 1]\nframe_len = 832\nframes_per_second = 2500\n'
    )
    totals, sent = capture_counts(tmp_path, tmp_path / "real.toml", "--format", "vdif",
                                  "--real", "--bits", "2", *SMALL, "--duration", "0.2")  # fmt: skip
    assert sent == 1000 and totals["received"] == sent
    assert totals["missing"] == totals["malformed"] == totals["foreign"] == 0, totals


def test_codif_carries_the_samples_of_vdif_and_captures_as_codif_toml_says(tmp_path):
    path = tmp_path / "c.codif"
    common = ["--signal", "noise", "--duration", "0.05", "--seed", "4"]
    simulate("--stream", str(EXAMPLES / "codif.toml"), *common, "--output", str(path))
    frames = np.fromfile(path, np.uint8).reshape(-1, 8256)
    h = decode_headers(frames)
    nframes = len(frames) // 2
    assert nframes * 2 == len(frames) == 2 * 1562  # 0.05 s of 128-sample frames, 2 threads
    assert (h["thread"] == np.tile([0, 1], nframes)).all() and (h["sync"] == SYNC).all()
    assert (h["station"] == (ord("P") << 8 | ord("k"))).all() and (h["period"] == 1).all()
    assert (h["nchan_m1"] == 31).all() and (h["bits_per_sample"] == 8).all()
    assert (h["complex"] == 1).all() and (h["data_len8"] == 1024).all()
    index = h["seconds"] * 31250 + h["frame"]  # the capture's index, period 1 s
    assert (np.diff(index[::2]) == 1).all() and (h["frame"] < 31250).all()
    # The same seed as complex VDIF: the same samples, in the same byte order.
    vdif = tmp_path / "c.vdif"
    simulate("--format", "vdif", *common, "--output", str(vdif))
    _, want = depacketize_vdif(np.fromfile(vdif, np.uint8).reshape(-1, 8032))
    data = frames[:, 64:].reshape(nframes, 2, 128, 32, 2).astype(np.float32) - 128
    got = (data[..., 0] + 1j * data[..., 1]).transpose(0, 2, 3, 1).reshape(-1, 32, 2)
    n = min(len(got), len(want))
    np.testing.assert_array_equal(got[:n], want[:n])
    # Sent, it is counted by a capture of docs/examples/codif.toml, every frame placed.
    totals, sent = capture_counts(tmp_path, EXAMPLES / "codif.toml", "--format", "codif",
                                  "--stream", str(EXAMPLES / "codif.toml"), *common)  # fmt: skip
    assert sent == len(frames) and totals["received"] == sent
    assert totals["missing"] == totals["malformed"] == totals["foreign"] == 0, totals


def test_wavefront_sensor_frames_reach_the_latency_mode_whole(tmp_path):
    wfs = EXAMPLES / "wfs.toml"
    path = tmp_path / "wfs.bin"
    simulate("--stream", str(wfs), "--packets", "64", "--output", str(path))
    pkts = np.fromfile(path, np.uint8).reshape(-1, 1040)
    assert pkts.shape[0] == 64 and (pkts[:, :4].tobytes() == b"WFS1" * 64)
    assert (pkts[:, 8:16].copy().view("<u8")[:, 0] == np.arange(64)).all()
    # A capture of the description counts every packet ...
    totals, sent = capture_counts(tmp_path, wfs, "--stream", str(wfs), "--packets", "1600")
    assert sent == 1600 and totals["received"] == sent and totals["malformed"] == 0
    # ... and the latency mode (its host stand-in: no GPU here) gets 100 whole frames.
    lat = Listening("latency", "--listen", "127.0.0.1:0", "--print-address", "--stream",
                    str(wfs), "--packets-per-frame", "16", "--standin", "--mode", "copy",
                    "--idle-timeout", "3", "--warmup", "0", "--frame-timeout-us", "0",
                    "--report", "lat.json", cwd=tmp_path)  # fmt: skip
    # Frames close when the next one starts, not on a deadline (--frame-timeout-us 0), and
    # the run ends by its idle time, not a frame count: a receive loop that a loaded
    # 2-core machine leaves waiting still sees every frame whole, and the sender's last
    # packets never meet a closed port.
    simulate("--stream", str(wfs), "--packets", "1600", "--dest", lat.address, "--rate", "0.3")
    lat.finish()
    c = json.loads((tmp_path / "lat.json").read_text())["counters"]
    assert c["frames_complete"] == 100 and c["frames_incomplete"] == c["frames_lost"] == 0
    assert c["received"] == 1600 and c["malformed"] == c["foreign"] == 0


def test_a_sender_that_cannot_keep_its_rate_says_so(tmp_path):
    """1000 Gb/s asked of a loopback sender that makes its samples as it goes: the run
    ends with a warning giving the rate reached and the rate asked."""
    rx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    rx.bind(("127.0.0.1", 0))
    rx.settimeout(0.5)
    got = [0]

    def drain() -> None:
        try:
            while True:
                rx.recv(65536)
                got[0] += 1
        except OSError:
            pass

    t = threading.Thread(target=drain, daemon=True)
    t.start()
    dest = f"127.0.0.1:{rx.getsockname()[1]}"
    out = run_cli("simulate", "--format", "ynao", "--signal", "noise", "--duration", "0.1",
                  "--dest", dest, "--rate", "1000")  # fmt: skip
    t.join(timeout=10)
    assert out.returncode == 0, out.stderr
    assert "of the asked 1000 Gb/s" in out.stderr and "Gb/s over" in out.stderr, out.stderr
    reached = float(out.stderr.split("sent at ")[1].split(" Gb/s")[0])
    assert 0 < reached < 800
    # A rate it can keep: no warning.
    calm = run_cli("simulate", "--format", "ynao", "--signal", "noise", "--chan-bw", "0.01",
                   "--duration", "0.05", "--dest", dest, "--rate", "0.01")  # fmt: skip
    rx.close()
    assert calm.returncode == 0 and "of the asked" not in calm.stderr, calm.stderr
