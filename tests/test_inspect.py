"""`voltstream inspect`: files and live streams described, and the options it names
capture the stream it saw with zero loss (issue 11, item 2)."""

from __future__ import annotations

import shlex
import threading

import numpy as np

from loopback import free_bind, send, sender
from voltstream.capture.config import CaptureSettings
from voltstream.capture.run import run_capture
from voltstream.cli import build_parser, main
from voltstream.cli.options import format_from
from voltstream.formats import make_format
from voltstream.io.inspect import inspect_file, inspect_packets, listen_packets
from voltstream.sim.packetize import packetize_vdif


def _frames(fmt, nframes, station, seed, start=0):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(fmt.samples_per_packet * nframes, fmt.nchan, 2)) * 2.0
    x = (x + 1j * x[::-1]).astype(np.complex64)
    return packetize_vdif(x, frames_per_second=int(fmt.packets_per_second), nbit=fmt.bits,
                          samples_per_frame=fmt.samples_per_packet, start_frame=start,
                          station=station)  # fmt: skip


def test_a_vdif_file_is_described_with_its_shape_and_gaps(tmp_path, capsys):
    fmt = make_format("vdif", nchan=8, chan_bw_mhz=1.0, vdif_payload=400, bits=2)
    frames = _frames(fmt, int(fmt.packets_per_second) + 20, station=7, seed=1)
    frames = np.delete(frames, [2 * 30 + 1], axis=0)  # thread 1 loses a frame
    path = tmp_path / "x.vdif"
    path.write_bytes(frames.tobytes())
    info = inspect_file(path)
    assert (
        info["kind"] == "vdif"
        and info["threads"] == [0, 1]
        and info["stations"] == {7: len(frames)}
    )
    assert (info["nchan"], info["bits"], info["complex"]) == ([8], [2], [True])
    assert info["frames_per_second"] == fmt.packets_per_second and info["missing_frames"] == 1
    assert "--bits 2 --vdif-payload 400" in info["options"] and "--chan-bw 1" in info["options"]
    assert main(["inspect", str(path)]) == 0
    assert "take it with: voltstream fold" in capsys.readouterr().out


def test_a_live_stream_is_described_and_its_options_capture_it_without_loss():
    fmt = make_format("vdif", nchan=4, chan_bw_mhz=1.0, vdif_payload=800)
    ours, theirs = _frames(fmt, 60, 3, 2, start=64), _frames(fmt, 60, 9, 3, start=64)
    packets = [p for pair in zip(ours, theirs[: len(ours) // 2], strict=False) for p in pair]
    packets += list(ours[len(ours) // 2 :])
    bind = free_bind()
    timer = threading.Timer(0.3, send, args=(bind, packets))
    timer.start()
    info = inspect_packets(listen_packets(bind, len(packets), 5.0))
    timer.join()
    assert info["kind"] == "vdif" and info["packets"] == len(packets)
    assert info["stations"] == {3: len(ours), 9: len(ours) // 2}
    opts = info["options"].split("(capture: --listen HOST:PORT ")[1].rstrip(")")
    assert "--station 3" in opts
    args = build_parser().parse_args(["capture", "--listen", bind, "--duration", "1",
                                      *shlex.split(opts)])  # fmt: skip
    fmt2 = format_from(args)
    settings = CaptureSettings.of(bind, packets_per_chunk=8, nchunks=64, engine="socket")
    report = run_capture(fmt2, settings, 20, idle_timeout_s=0.5, on_start=sender(bind, packets))
    t = report.totals
    assert t["received"] == len(ours) and t["foreign"] == len(ours) // 2
    assert report.lost == 0 and t["duplicate"] == 0 and t["malformed"] == 0


def test_nothing_and_unknown_packets_say_so():
    assert inspect_packets([])["kind"] == "nothing"
    info = inspect_packets([b"\x01" * 100, b"\x02" * 64])
    assert info["kind"] == "unknown" and "layout" in info["options"]
