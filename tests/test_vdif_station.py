"""VDIF of two stations on one port: with --station, the other station's frames are
counted foreign and never placed, whichever comes first (issue 11, item 1 in part)."""

from __future__ import annotations

import numpy as np
import pytest

from loopback import free_bind, sender
from voltstream.capture.config import CaptureSettings
from voltstream.capture.run import run_capture
from voltstream.cli import build_parser
from voltstream.errors import ConfigError
from voltstream.formats import make_format
from voltstream.sim.packetize import packetize_vdif


@pytest.mark.parametrize("theirs_first", [True, False])
def test_frames_of_another_station_are_foreign_and_never_placed(theirs_first):
    fmt = make_format("vdif", nchan=4, chan_bw_mhz=1.0, vdif_payload=800, station=5)
    spp, nframes = fmt.samples_per_packet, 40
    rng = np.random.default_rng(4)
    ours = rng.integers(-100, 100, (spp * nframes, 4, 2, 2), dtype=np.int8)
    theirs = rng.integers(-100, 100, ours.shape, dtype=np.int8)

    def frames(q, station):
        x = q.astype(np.float32).view(np.complex64)[..., 0]
        return packetize_vdif(x, frames_per_second=int(fmt.packets_per_second), nbit=8,
                              samples_per_frame=spp, start_frame=64, station=station)  # fmt: skip

    a, b = frames(ours, 5), frames(theirs, 9)
    order = [b, a] if theirs_first else [a, b]
    packets = [p for pair in zip(*order, strict=True) for p in pair]
    got = []
    bind = free_bind()
    settings = CaptureSettings.of(bind, packets_per_chunk=8, nchunks=64, engine="socket")
    report = run_capture(fmt, settings, 20, sink=lambda x, v: got.append(x.copy()),
                         idle_timeout_s=0.5, on_start=sender(bind, packets))  # fmt: skip
    t = report.totals
    assert t["foreign"] == 2 * nframes and t["received"] == 2 * nframes
    assert t["duplicate"] == 0 and t["missing"] == 0
    assert np.array_equal(np.concatenate(got), ours)


def test_station_on_the_command_line():
    args = build_parser().parse_args(["capture", "--format", "vdif", "--station", "Ef",
                                      "--listen", "127.0.0.1:1", "--duration", "1"])  # fmt: skip
    assert args.station == (ord("E") << 8) | ord("f")
    with pytest.raises(ConfigError, match="0 .. 65535"):
        make_format("vdif", station=70000)
