"""Stream descriptions (voltstream.streams): every format on the command line through
`voltstream capture --stream FILE.toml` (or `--format spead-dig`), over loopback with
the real CLI; validation errors name the key, TOML errors their line."""

from __future__ import annotations

import json
import struct
import subprocess
import sys

import numpy as np
import pytest

from loopback import free_bind, send
from voltstream.errors import ConfigError
from voltstream.sim.packetize import packetize_vdif
from voltstream.streams import load_stream, parse_stream, spead_dig
from voltstream.testing import Drop, FaultPlan

COUNTER_TOML = """
format = "counter"
streams = 2
payload_len = 64
"""

# The counter format again, as a declarative layout (docs/formats.md).
LAYOUT_TOML = """
format = "layout"
[layout]
packet_len = 74
index = { offset = 0, bytes = 8 }
stream = { offset = 8, bytes = 2 }
stream_ids = [0, 1]
payload_offset = 10
payload_len = 64
"""

VDIF_TOML = """
format = "vdif"
threads = [3]            # a one-thread stream
frame_len = 832          # 32-byte header + 800 bytes of data
frames_per_second = 1000
station = "Ab"
"""


def counter_packets():
    """Two streams of 40 packets with faults: one lost, one repeated, one of stream 5."""
    pay = np.arange(64, dtype=np.uint8)
    out = []
    for i in range(40):
        for s in (0, 1):
            if (i, s) != (17, 1):
                out.append(struct.pack(">QH", 100 + i, s) + pay.tobytes())
        if i == 21:
            out.append(out[-1])
            out.append(struct.pack(">QH", 100 + i, 5) + pay.tobytes())
    return out


def run_capture_cli(tmp_path, args, packets):
    """`voltstream capture` as a user runs it; the packets go once it listens."""
    bind = free_bind()
    report = tmp_path / "r.json"
    cmd = [
        sys.executable,
        "-m",
        "voltstream.cli",
        "capture",
        "--listen",
        bind,
        "--duration",
        "20",
        "--idle-timeout",
        "0.5",
        "--engine",
        "socket",
        "--report",
        str(report),
        *args,
    ]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    for line in proc.stderr:
        if "listening on" in line:
            break
    send(bind, packets)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    return json.loads(report.read_text()), out


@pytest.mark.parametrize("toml", [COUNTER_TOML, LAYOUT_TOML])
def test_counter_and_layout_streams_count_exactly(tmp_path, toml):
    (tmp_path / "s.toml").write_text(toml)
    rep, out = run_capture_cli(tmp_path, ["--stream", str(tmp_path / "s.toml")],
                               counter_packets())  # fmt: skip
    t = rep["totals"]
    assert (t["received"], t["missing"], t["duplicate"], t["foreign"]) == (79, 1, 1, 1)
    assert [s["missing"] for s in rep["streams"]] == [0, 1]
    assert "stream 1: received=39  missing=1" in out


def test_a_one_thread_vdif_stream_described_in_a_file(tmp_path):
    (tmp_path / "v.toml").write_text(VDIF_TOML)
    x = np.ones((100 * 30, 4, 1), np.complex64)
    ours = packetize_vdif(x, frames_per_second=1000, nbit=8, samples_per_frame=100,
                          station=0x4162, threads=[3])  # fmt: skip
    theirs = packetize_vdif(x, frames_per_second=1000, nbit=8, samples_per_frame=100,
                            station=0x4163, threads=[3])  # fmt: skip
    other_thread = packetize_vdif(x[:500], frames_per_second=1000, nbit=8,
                                  samples_per_frame=100, station=0x4162, threads=[4])  # fmt: skip
    packets = [*ours[:10], *theirs, *other_thread, *ours[10:]]
    rep, out = run_capture_cli(tmp_path, ["--stream", str(tmp_path / "v.toml")], packets)
    t = rep["totals"]
    assert (t["received"], t["missing"], t["foreign"]) == (30, 0, 35)
    assert rep["station"] == 0x4162 and rep["streams"][0]["label"] == "VDIF thread 3"


def test_digitiser_heaps_with_the_meerkat_defaults(tmp_path):
    from voltstream.sim.spead import digitiser_packets, digitiser_samples

    x = digitiser_samples(0, 32, samples_per_heap=4096, bits=10, noise_rms=20.0)
    packets = digitiser_packets(x, 0, samples_per_heap=4096, bits=10, dig_ids=(0, 1))
    packets = FaultPlan(at={9: Drop()}).apply(packets).packets  # heap 4 of pol 1
    rep, _ = run_capture_cli(tmp_path, ["--format", "spead-dig", "--packets-per-chunk", "8"],
                             packets)  # fmt: skip
    t = rep["totals"]
    assert (t["received"], t["missing"], t["foreign"], t["malformed"]) == (63, 1, 0, 0)
    assert [s["label"] for s in rep["streams"]] == ["digitiser 0", "digitiser 1"]


def test_descriptions_are_validated_naming_each_key(tmp_path):
    with pytest.raises(ConfigError, match=r"threads.1: .*1023.*frames_per_second"):
        parse_stream({"format": "vdif", "threads": [0, 4096], "frame_len": 832,
                      "frames_per_second": 0})  # fmt: skip
    with pytest.raises(ConfigError, match="bogus: Extra inputs"):
        parse_stream({"format": "counter", "payload_len": 8, "bogus": 1})
    with pytest.raises(ConfigError, match=r"layout.index.bytes: .*less than or equal to 8"):
        parse_stream({"format": "layout", "layout": {
            "packet_len": 10, "index": {"offset": 0, "bytes": 9},
            "payload_offset": 8, "payload_len": 2}})  # fmt: skip
    with pytest.raises(ConfigError, match="format = 'mark5b'"):
        parse_stream({"format": "mark5b"})
    bad = tmp_path / "bad.toml"
    bad.write_text('format = "counter"\npayload_len = \n')
    with pytest.raises(ConfigError, match="line 2"):
        load_stream(bad)
    assert parse_stream({"format": "codif", "threads": [0], "frame_len": 8256,
                         "frames_per_period": 250, "station": "Pk"}).station == 0x506B  # fmt: skip
    assert spead_dig().capture_kwargs()["samples_per_heap"] == 4096


def test_the_capture_cli_says_what_a_format_needs(tmp_path, capsys):
    from voltstream.cli import main

    args = ["capture", "--listen", "127.0.0.1:9", "--duration", "1"]
    assert main([*args, "--format", "codif"]) == 2
    assert "--format codif needs --stream FILE.toml" in capsys.readouterr().err
    (tmp_path / "c.toml").write_text(COUNTER_TOML)
    stream = ["--stream", str(tmp_path / "c.toml")]
    assert main([*args, *stream, "--output", str(tmp_path / "x.dada")]) == 2
    assert "--output writes the samples of YNAO and VDIF" in capsys.readouterr().err
    assert main([*args, *stream, "--format", "vdif"]) == 2
    assert "says counter" in capsys.readouterr().err


def test_legacy_vdif_headers_from_a_description(tmp_path):
    (tmp_path / "l.toml").write_text(
        'format = "vdif"\nthreads = [0, 1]\nframe_len = 816\nframes_per_second = 1000\n'
        "legacy = true\n"
    )
    x = np.ones((100 * 20, 4, 2), np.complex64)
    legacy = packetize_vdif(x, frames_per_second=1000, nbit=8, samples_per_frame=100,
                            legacy=True)  # fmt: skip
    standard = packetize_vdif(x[:200], frames_per_second=1000, nbit=8, samples_per_frame=100)
    assert legacy.shape[1] == 816
    rep, _ = run_capture_cli(tmp_path, ["--stream", str(tmp_path / "l.toml")],
                             [*legacy, *standard])  # fmt: skip
    t = rep["totals"]
    assert (t["received"], t["missing"], t["malformed"]) == (40, 0, 4)
