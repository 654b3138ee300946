"""The F-engine program: input unpacking and pairing, engine choice, output (UDP,
descriptors, file), katcp hooks, time-line restarts, and the `voltstream fengine` and
`voltstream simulate --format spead-dig` verbs on loopback."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

import fengine_local
from cli_process import reaped, run_cli
from loopback import address, udp_receiver
from voltstream import device as device_mod
from voltstream.capture.config import CaptureSettings
from voltstream.cli import main
from voltstream.digitiser import unpack_heaps
from voltstream.errors import ConfigError, FormatError
from voltstream.fengine import FEngineReference, HeapLayout, OutputHeap, decode_packets
from voltstream.fengine.engines import engine_device, make_engine, resolve_device
from voltstream.fengine.heaps import (
    DESCRIPTOR_HEAP_CNT,
    ItemDescriptor,
    decode_descriptor,
    decode_descriptor_heap,
    decode_output_heap,
    encode_descriptor,
    encode_descriptor_heap,
    encode_stop_heap,
    fengine_descriptors,
    split_packets,
)
from voltstream.fengine.output import HeapOutput, parse_destinations, read_packet_file
from voltstream.fengine.pipeline import apply_settings, run_fengine
from voltstream.fengine.settings import FEngineSettings
from voltstream.sim.spead import (
    depacketize_spead_dig,
    digitiser_packets,
    digitiser_samples,
    pack_samples,
    unpack_samples,
)
from voltstream.testing import Drop, FaultPlan

NCH, TAPS, NSPEC, SPH, BITS, FS = 32, 8, 8, 512, 10, 1e6
#: The F-engine these tests run: its engine's keywords (SETTINGS) are the settings' own.
FENGINE = FEngineSettings(channels=NCH, taps=TAPS, spectra_per_heap=NSPEC, sample_rate_hz=FS,
                          sample_bits=BITS, samples_per_heap=SPH, chunk_heaps=16)  # fmt: skip
SETTINGS = FENGINE.engine_kwargs()


def drain(s: socket.socket) -> list[bytes]:
    out = []
    s.settimeout(0.3)
    try:
        while True:
            out.append(s.recv(65536))
    except TimeoutError:
        pass
    return out


# -- input ---------------------------------------------------------------------------


@pytest.mark.parametrize("bits", [8, 10, 12, 16])
def test_unpack_heaps_matches_the_bit_stream_reference(bits):
    rng = np.random.default_rng(bits)
    x = rng.integers(-(1 << (bits - 1)), 1 << (bits - 1), 3 * 256)
    packed = pack_samples(x, bits).reshape(3, -1)
    got = unpack_heaps(packed, bits)
    assert got.dtype == np.int16 and got.shape == (3, 256)
    np.testing.assert_array_equal(got.reshape(-1), x)
    np.testing.assert_array_equal(got[1], unpack_samples(packed[1], bits))
    with pytest.raises(ConfigError, match="use 8, 10, 12 or 16"):
        unpack_heaps(packed, 9)


def test_digitiser_samples_do_not_depend_on_the_split_and_packets_interleave_pols():
    kw = dict(samples_per_heap=SPH, bits=12, tone_hz=1e5, tone_amplitude=3000.0, noise_rms=900.0)
    whole = digitiser_samples(4, 6, **kw)
    parts = np.concatenate([digitiser_samples(4, 2, **kw), digitiser_samples(6, 4, **kw)], 1)
    np.testing.assert_array_equal(whole, parts)
    assert whole.min() == -2048 and whole.max() == 2047  # clipped to 12 bits
    assert not np.array_equal(whole[0], whole[1])  # independent noise per pol
    pk = digitiser_packets(whole, 4, samples_per_heap=SPH, bits=12, dig_ids=(7, 9))
    dec = depacketize_spead_dig(pk, bits=12)
    assert dec["digitiser_id"].tolist() == [7, 9] * 6
    assert dec["timestamp"].tolist() == [t * SPH for t in range(4, 10) for _ in (0, 1)]
    got = dec["samples"].reshape(6, 2, SPH).transpose(1, 0, 2).reshape(2, -1)
    np.testing.assert_array_equal(got, whole)


# -- engine choice --------------------------------------------------------------------


def test_make_engine_cpu_and_clear_errors_for_the_gpu(monkeypatch):
    eng = make_engine("cpu", **SETTINGS)
    assert isinstance(eng, FEngineReference) and eng.nchan == NCH
    with pytest.raises(ConfigError, match="power of two"):
        make_engine("cpu", **dict(SETTINGS, nchan=48))
    with pytest.raises(ConfigError, match="cpu, gpu or auto"):
        make_engine("tpu", **SETTINGS)
    monkeypatch.setattr(device_mod, "gpu_available", lambda: False)
    assert resolve_device("auto") == "cpu"
    with pytest.raises(ConfigError, match="no usable CUDA GPU"):
        make_engine("gpu", **SETTINGS)
    # A GPU is there but the GPU engine module is not: gpu fails clearly, auto falls back.
    monkeypatch.setattr(device_mod, "gpu_available", lambda: True)
    monkeypatch.setitem(sys.modules, "voltstream.fengine.gpu", None)
    with pytest.raises(ConfigError, match="GPU F-engine is not available"):
        make_engine("gpu", **SETTINGS)
    assert isinstance(make_engine("auto", **SETTINGS), FEngineReference)

    # The GPU engine raising its own error at start-up becomes one ConfigError line.
    class Failing:
        def __init__(self, **kw):
            from voltstream.dsp.cuda import GpuError

            raise GpuError("NVRTC could not compile pfb.cu")

    fake = type(sys)("voltstream.fengine.gpu")
    fake.GpuFEngine = Failing
    monkeypatch.setitem(sys.modules, "voltstream.fengine.gpu", fake)
    with pytest.raises(ConfigError, match="could not start: NVRTC"):
        make_engine("gpu", **SETTINGS)
    # The report names the device: a GpuFEngine subclasses the reference.
    gpu_like = type("GpuFEngine", (FEngineReference,), {"__module__": "voltstream.fengine.gpu"})
    assert engine_device(gpu_like(**SETTINGS)) == "gpu"
    assert engine_device(eng) == "cpu"


# -- descriptors and packet files ------------------------------------------------------


def test_descriptors_round_trip():
    layout = HeapLayout(64, 16, 4, bits=8)
    descs = fengine_descriptors(layout)
    assert [d.name for d in descs] == ["timestamp", "feng_id", "frequency", "feng_raw"]
    assert descs[3].shape == (16, 16, 2, 2) and descs[3].dtype == "|i1"
    for d in descs:
        assert decode_descriptor(encode_descriptor(d)) == d
    heap = encode_descriptor_heap(descs)
    assert heap.shape[0] == 1 and heap.dtype == np.uint8
    assert decode_descriptor_heap(heap[0]) == descs
    (decoded,) = decode_packets(heap)
    assert decoded.heap_cnt == DESCRIPTOR_HEAP_CNT and decoded.complete
    four = fengine_descriptors(HeapLayout(64, 16, 4, bits=4))[3]
    assert four.shape == (16, 16, 2) and four.dtype == "|u1"
    odd = ItemDescriptor(0x1234, "x", "y", shape=(3, 5), format=(("u", 12), ("i", 4)))
    assert decode_descriptor(encode_descriptor(odd)) == odd
    with pytest.raises(ConfigError, match="exactly one of format and dtype"):
        ItemDescriptor(0x1, "a", "b")


def test_split_packets_walks_a_file_and_rejects_junk():
    layout = HeapLayout(16, 4, 1)
    heap = OutputHeap(0, 0, 0, np.zeros(layout.payload_shape, np.int8))
    from voltstream.fengine.heaps import encode_heap

    blob = b"".join(
        a.tobytes()
        for a in (encode_descriptor_heap(fengine_descriptors(layout)), encode_heap(heap, 0, 64))
    )
    blob += encode_stop_heap().tobytes()
    packets = list(split_packets(blob))
    assert len(packets) == 1 + 256 // 64 + 1
    assert b"".join(packets) == blob
    with pytest.raises(FormatError, match="truncated"):
        list(split_packets(blob[:-3]))
    with pytest.raises(FormatError, match="no SPEAD packet header"):
        list(split_packets(b"\0" * 16))


# -- output ----------------------------------------------------------------------------


def test_parse_destinations():
    assert parse_destinations("127.0.0.1:7148") == ["127.0.0.1:7148"]
    assert parse_destinations(["a:1,b:2", "c:3"]) == ["a:1", "b:2", "c:3"]
    assert parse_destinations("239.10.0.254+2:7148") == [
        "239.10.0.254:7148",
        "239.10.0.255:7148",
        "239.10.1.0:7148",
    ]
    for bad in ("localhost", "h:0", "h:99999", ":7148", "x+2:7148", "255.255.255.255+1:1"):
        with pytest.raises(ConfigError):
            parse_destinations(bad)


def test_output_checks_destinations_and_packet_size():
    layout = HeapLayout(NCH, NSPEC, 2)
    with pytest.raises(ConfigError, match="one HOST:PORT per substream"):
        HeapOutput(layout, ["127.0.0.1:9"])
    with pytest.raises(ConfigError, match="--dest"):
        HeapOutput(layout, [])
    with pytest.raises(ConfigError, match="does not divide"):
        HeapOutput(layout, ["127.0.0.1:9", "127.0.0.1:10"], packet_payload=300)


def test_output_sends_descriptors_periodically_and_survives_a_missing_receiver(tmp_path):
    ref = FEngineReference(**dict(SETTINGS, n_substreams=2))
    heaps = ref.process(np.ones((2, 40 * 2 * NCH * NSPEC), np.int16), 0)
    assert len(heaps) >= 20
    sink = udp_receiver()
    gone = udp_receiver()
    gone_addr = address(gone)
    gone.close()  # nobody listens there: sends are refused, counted, not fatal
    out = HeapOutput(
        ref.layout,
        [address(sink), gone_addr],
        descriptor_interval=4,
        output_file=tmp_path / "o.spead",
        packet_payload=128,
    )
    with out:
        out.submit(heaps)
    got = drain(sink)
    sink.close()
    per_sub = len(heaps) // 2
    n_desc = 1 + (per_sub - 1) // 4
    descs = [p for p in got if int.from_bytes(p[10:16], "big") == DESCRIPTOR_HEAP_CNT]
    assert len(descs) == n_desc
    data = decode_packets([p for p in got if p not in descs and len(p) == 72 + 128])
    assert len(data) == per_sub
    assert out.counters.heaps_per_destination[0] == per_sub
    assert out.counters.send_errors > 0 and "refused" in out.counters.last_error
    # The file has every heap of both substreams, whatever the network did.
    packets = read_packet_file(tmp_path / "o.spead")
    assert decode_descriptor_heap(packets[0]) == fengine_descriptors(ref.layout)
    assert int.from_bytes(packets[-1][10:16], "big") == (1 << 48) - 1  # the stop heap
    body = [p for p in packets[1:-1]]
    decoded = decode_packets(body)
    # Heap cnts repeat across substreams: the decoder merges each cnt's two heaps.
    assert len(body) == len(heaps) * (ref.layout.payload_bytes // 128)
    assert {d.immediates[0x1600] for d in decoded} == {h.timestamp for h in heaps}
    assert out.counters.heaps_written == len(heaps)


# -- run_fengine ---------------------------------------------------------------------


class FakeControl:
    """The FEngineControl surface run_fengine uses."""

    def __init__(self, capturing: bool):
        self.capturing = threading.Event()
        if capturing:
            self.capturing.set()
        self.applied = 0
        self.sensors: list[dict] = []

    def apply_pending(self, engine) -> int:
        self.applied += 1
        if self.applied == 1:
            engine.set_gains(0.5)
            return 1
        return 0

    def update_sensors(self, counters: dict) -> None:
        self.sensors.append(dict(counters))


def run_local(eng, out, packet_sets, **kw):
    """run_fengine on 127.0.0.1 with ``packet_sets`` sent as soon as it listens."""
    return fengine_local.run_local(eng, out, packet_sets, FENGINE, **kw)


def sim(first, n, **kw):
    x = digitiser_samples(first, n, samples_per_heap=SPH, bits=BITS, noise_rms=30.0, **kw)
    return x, digitiser_packets(x, first, samples_per_heap=SPH, bits=BITS)


def test_capture_stopped_counts_heaps_instead_of_sending_and_control_applies_gains():
    _, pk = sim(0, 64)
    sink = udp_receiver()
    eng = make_engine("cpu", **SETTINGS)
    out = HeapOutput(eng.layout, [address(sink)])
    control = FakeControl(capturing=False)
    report = run_local(eng, out, [pk], control=control)
    made = report.engine["heaps_made"]
    assert made > 0
    assert report.heaps_not_sent_capture_stopped == made
    assert report.output["heaps_sent"] == 0
    assert control.applied == report.blocks and report.control_updates == 1
    np.testing.assert_array_equal(eng.gains, 0.5)
    assert control.sensors and control.sensors[-1]["heaps_made"] == made
    assert control.sensors[-1]["saturated_pol1"] == report.engine["saturated"][1]
    got = drain(sink)
    sink.close()
    assert len(got) == 2  # the descriptor heap and the stop heap only


def test_timeline_restart_keeps_running_with_a_fresh_engine(tmp_path):
    x1, pk1 = sim(0, 48)
    x2, pk2 = sim(100_000, 48)
    eng = make_engine("cpu", **SETTINGS)
    eng.set_gains(0.25)
    made = []

    def factory():
        made.append(make_engine("cpu", **SETTINGS))
        return made[-1]

    out = HeapOutput(eng.layout, [], output_file=tmp_path / "f.spead")
    report = run_local(eng, out, [pk1, pk2], engine_factory=factory)
    assert report.timeline_restarts == 1 and len(made) == 1
    np.testing.assert_array_equal(made[0].gains, 0.25)  # carried over
    expected = []
    for first, x in ((0, x1), (100_000, x2)):
        ref = FEngineReference(**SETTINGS)
        ref.set_gains(0.25)
        expected += ref.process(x, first * SPH)
    assert report.engine["heaps_made"] == len(expected)
    packets = read_packet_file(tmp_path / "f.spead")[1:-1]
    layout = HeapLayout(NCH, NSPEC)
    got = [decode_output_heap(d, layout) for d in decode_packets(packets)]
    assert [h.timestamp for h in got] == [h.timestamp for h in expected]
    for g, e in zip(got, expected, strict=True):
        np.testing.assert_array_equal(g.payload, e.payload)


def test_apply_settings_sets_gains_and_delays_per_pol():
    from voltstream.dsp.delay import DelayModel

    eng = make_engine("cpu", **SETTINGS)
    model = DelayModel(delay_s=3e-6)
    apply_settings(eng, {1: 2.0}, {0: model})
    np.testing.assert_array_equal(eng.gains[0], 1.0)
    np.testing.assert_array_equal(eng.gains[1], 2.0)
    assert eng.delay_models[0] == model


def test_fengine_settings_reject_bad_input_and_run_fengine_a_bad_duration():
    with pytest.raises(ConfigError, match="8, 10, 12 or 16"):
        FEngineSettings(sample_bits=9)
    with pytest.raises(ConfigError, match="two different ids"):
        FEngineSettings(dig_ids=(3, 3))
    with pytest.raises(ConfigError, match="--samples-per-heap 4098 x 10 bits"):
        FEngineSettings(samples_per_heap=4098)
    with pytest.raises(ConfigError, match="chunk_heaps=0"):
        FEngineSettings(chunk_heaps=0)
    with pytest.raises(ConfigError, match="do not split 1024 channels"):
        FEngineSettings(substreams=3)
    eng = make_engine("cpu", **SETTINGS)
    with pytest.raises(ConfigError, match="duration_s=0 must be positive"):
        run_fengine(CaptureSettings.of("127.0.0.1:0"), FENGINE, eng, duration_s=0)


class PackedEngine(FEngineReference):
    """The GPU engine's input surface on the CPU: packed bytes in, and a flush."""

    def __init__(self, *args, sample_bits: int, **kw):
        super().__init__(*args, **kw)
        self.sample_bits = sample_bits
        self.packed_calls = 0
        self.held: list = []

    def process_packed(self, raw, timestamp, valid=None):
        assert raw.dtype == np.uint8 and raw.ndim == 2 and raw.flags.c_contiguous
        self.packed_calls += 1
        samples = unpack_heaps(raw, self.sample_bits)
        # Hold the newest heaps back until flush, as a pipelined GPU engine may.
        out, self.held = self.held, self.process(samples, timestamp, valid)
        return out

    def flush(self):
        out, self.held = self.held, []
        return out


def test_an_engine_with_process_packed_gets_the_heap_bytes(tmp_path):
    x, pk = sim(0, 80)
    pk = FaultPlan(at={2 * 30: Drop()}).apply(pk).rows()  # pol 0, heap 30
    eng = PackedEngine(**SETTINGS, sample_bits=BITS)
    out = HeapOutput(eng.layout, [], output_file=tmp_path / "p.spead")
    report = run_local(eng, out, [pk])
    assert eng.packed_calls == report.blocks > 1
    valid = np.ones(x.shape[1], dtype=bool)
    valid[30 * SPH : 31 * SPH] = False
    ref = FEngineReference(**SETTINGS)
    expected = ref.process(x, 0, valid)
    assert report.engine["heaps_skipped"] == ref.counters.heaps_skipped > 0
    got = decode_packets(read_packet_file(tmp_path / "p.spead")[1:-1])
    layout = HeapLayout(NCH, NSPEC)
    heaps = [decode_output_heap(d, layout) for d in got]
    assert [h.timestamp for h in heaps] == [h.timestamp for h in expected]
    for h, e in zip(heaps, expected, strict=True):
        np.testing.assert_array_equal(h.payload, e.payload)


# -- the command line --------------------------------------------------------------------


def test_fengine_help_teaches(capsys):
    with pytest.raises(SystemExit) as e:
        main(["fengine", "--help"])
    assert e.value.code == 0
    out = capsys.readouterr().out
    assert "usage: voltstream fengine" in out
    for option in (
        "--listen",
        "--dig-ids",
        "--sample-bits",
        "--samples-per-heap",
        "--channels",
        "--taps",
        "--spectra-per-heap",
        "--substreams",
        "--dest",
        "--output-bits",
        "--rate",
        "--engine",
        "--duration",
        "--device",
        "--output",
        "--katcp-port",
        "--settings",
        "--sample-rate-hz",
        "examples:",
    ):
        assert option in out, option
    assert "--rate-gbps" not in out and "--capture-engine" not in out  # old spellings
    with pytest.raises(SystemExit):
        main(["simulate", "--help"])
    assert "spead-dig" in capsys.readouterr().out


def test_the_command_line_and_a_pipeline_file_make_the_same_settings_with_one_default_each():
    from voltstream.cli import build_parser
    from voltstream.cli.fengine import fengine_settings
    from voltstream.cli.run_file import verb_args
    from voltstream.pipeline_file import parse_pipeline

    bare = build_parser().parse_args(["fengine", "--listen", "127.0.0.1:7148"])
    assert fengine_settings(bare) == FEngineSettings()
    pf = parse_pipeline('[network]\nbind = "127.0.0.1:7148"\n\n[fengine]\n')
    assert fengine_settings(verb_args(pf)) == FEngineSettings()
    given = ["--dig-ids", "4,5", "--sample-bits", "12", "--channels", "4096", "--taps", "8",
             "--dest", "239.10.0.1+3:7148", "--output-bits", "4", "--rate", "2.5",
             "--feng-id", "3", "--n-fengs", "4", "--chunk-heaps", "128"]  # fmt: skip
    s = fengine_settings(
        build_parser().parse_args(["fengine", "--listen", "127.0.0.1:7148", *given])
    )
    assert s == FEngineSettings(dig_ids=(4, 5), sample_bits=12, channels=4096, taps=8,
                                dest=[f"239.10.0.{i}:7148" for i in range(1, 5)], output_bits=4,
                                rate=2.5, feng_id=3, n_fengs=4, chunk_heaps=128)  # fmt: skip
    assert s.n_substreams == 4 and s.layout.channels_per_heap == 1024
    assert s.engine_kwargs() | {"sample_bits": 12} == {
        "nchan": 4096, "taps": 8, "spectra_per_heap": 256, "n_substreams": 4, "bits": 4,
        "sample_rate_hz": 1712e6, "max_delay_samples": 0, "feng_id": 3, "dither_seed": None,
        "sample_bits": 12,
    }  # fmt: skip
    # The default send rate: 1.1 x the 4-bit output of a 1712 MHz digitiser, headers included.
    assert FEngineSettings(output_bits=4).send_rate_gbps == pytest.approx(
        1.1 * 1712e6 * 8 * (8192 + 72) / 8192 / 1e9
    )


def test_old_option_spellings_still_work_for_one_release():
    from voltstream.cli import build_parser

    old = build_parser().parse_args(
        ["fengine", "--listen", "127.0.0.1:7148", "--rate-gbps", "3", "--capture-engine", "socket"]
    )
    new = build_parser().parse_args(
        ["fengine", "--listen", "127.0.0.1:7148", "--rate", "3", "--engine", "socket"]
    )
    assert (old.rate, old.engine) == (new.rate, new.engine) == (3.0, "socket")
    default = build_parser().parse_args(["fengine", "--listen", "127.0.0.1:7148"])
    assert (default.rate, default.engine) == (None, "auto")


BASE = ["fengine", "--listen", "127.0.0.1:7148", "--device", "cpu", "--duration", "1"]


@pytest.mark.parametrize(
    "extra, message",
    [
        (["--output-bits", "6", "--dest", "127.0.0.1:7150"], "--output-bits 6"),
        (["--sample-bits", "9", "--dest", "127.0.0.1:7150"], "--sample-bits 9"),
        (["--channels", "1000", "--dest", "127.0.0.1:7150"], "power of two"),
        (["--dest", "nowhere"], "is not HOST:PORT"),
        (["--dest", "127.0.0.1:7150", "--substreams", "2"], "one HOST:PORT per substream"),
        (["--dest", "127.0.0.1:7150", "--dig-ids", "1"], "--dig-ids"),
        ([], "nowhere to send"),
    ],
)
def test_fengine_bad_input_is_one_line_and_exit_2(extra, message, capsys):
    assert main([*BASE, *extra]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("voltstream fengine: error:"), err
    assert message in err


def test_katcp_without_the_control_module_is_a_clear_error(monkeypatch, capsys):
    import voltstream.fengine

    monkeypatch.setitem(sys.modules, "voltstream.fengine.control", None)
    # An earlier test may have imported it: the package attribute would satisfy the import.
    monkeypatch.delattr(voltstream.fengine, "control", raising=False)
    args = [*BASE, "--dest", "127.0.0.1:7150", "--katcp-port", "7147"]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--katcp-port needs voltstream.fengine.control" in err


def test_simulate_spead_dig_to_a_file_with_drops(tmp_path):
    path = tmp_path / "dig.spead"
    common = ["simulate", "--format", "spead-dig", "--samples-per-heap", "256"]
    rc = main([*common, "--heaps", "10", "--sample-bits", "12", "--output", str(path)])
    rc2 = main([*common, "--heaps", "10", "--drop", "0:3,1:9", "--output", str(path) + "2"])
    assert rc == 0 and rc2 == 0
    pk = np.fromfile(path, np.uint8).reshape(20, -1)
    dec = depacketize_spead_dig(pk, bits=12)
    assert dec["digitiser_id"].tolist() == [0, 1] * 10
    x = dec["samples"].reshape(10, 2, 256).transpose(1, 0, 2).reshape(2, -1)
    tone = np.abs(np.fft.rfft(x[0].astype(float)))
    assert int(np.argmax(tone)) == 2560 // 4  # the default tone: a quarter of the rate
    dropped = depacketize_spead_dig(np.fromfile(str(path) + "2", np.uint8).reshape(18, -1))
    ids, heaps = dropped["digitiser_id"].tolist(), (dropped["timestamp"] // 256).tolist()
    pairs = set(zip(ids, heaps, strict=True))
    assert (0, 3) not in pairs and (1, 9) not in pairs and len(pairs) == 18
    assert main([*common, "--sample-bits", "7", "--output", str(path)]) == 2
    assert main([*common, "--drop", "2:1", "--output", str(path)]) == 2


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def katcp_request(port: int, request: str, timeout: float = 10.0) -> list[str]:
    """One katcp request over plain TCP: the reply's words (informs skipped)."""
    name = request.split()[0][1:]
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as conn:
        conn.sendall(request.encode() + b"\n")
        buf = b""
        while True:
            chunk = conn.recv(4096)
            assert chunk, f"katcp connection closed before the reply to {request}"
            buf += chunk
            for line in buf.decode().splitlines():
                if line.startswith(f"!{name} "):
                    return line.split()[1:]


def test_fengine_cli_runs_on_loopback(tmp_path):
    """simulate --format spead-dig | fengine, both real processes, for a second or two,
    with start-up gains from a settings file and katcp control answering."""
    pytest.importorskip("voltstream.fengine.control")
    listen = f"127.0.0.1:{free_port()}"
    sink = udp_receiver()
    report_path, out_path = tmp_path / "report.json", tmp_path / "out.spead"
    settings_path = tmp_path / "feng.toml"
    settings_path.write_text('[gains]\npol0 = 0.02\npol1 = "0.01+0.01j"\n')
    fengine = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "voltstream.cli",
            "fengine",
            "--listen",
            listen,
            "--dest",
            address(sink),
            "--channels",
            "64",
            "--spectra-per-heap",
            "16",
            "--taps",
            "16",
            "--samples-per-heap",
            "1024",
            "--sample-rate-hz",
            "1e6",
            "--device",
            "cpu",
            "--duration",
            "30",
            "--idle-timeout",
            "4",  # counted from the start too: room for the simulator's start-up
            "--output",
            str(out_path),
            "--report",
            str(report_path),
            "--settings",
            str(settings_path),
            "--katcp-port",
            "0",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=dict(os.environ, PYTHONUNBUFFERED="1"),
    )
    with reaped(fengine):
        deadline = time.monotonic() + 30
        lines = []
        while time.monotonic() < deadline:
            line = fengine.stdout.readline()
            lines.append(line)
            if "listening on" in line or not line:
                break
        assert "listening on" in lines[-1], "".join(lines) + fengine.stderr.read()
        katcp = next(x for x in lines if "katcp control on" in x)
        port = int(katcp.rsplit(":", 1)[1])
        assert katcp_request(port, "?gain 1") == ["ok", "0.01+0.01j"]
        sim = run_cli(
            "simulate",
            "--format",
            "spead-dig",
            "--samples-per-heap",
            "1024",
            "--sample-rate-hz",
            "1e6",
            "--tone",
            "0.15625",  # channel 20 of 64 at 1 MHz
            "--heaps",
            "400",
            "--drop",
            "1:200",
            "--dest",
            listen,
            "--rate",
            "0.2",
        )
        assert sim.returncode == 0, sim.stderr
        out, err = fengine.communicate(timeout=30)
    assert fengine.returncode == 0, err
    text = "".join(lines) + out
    for word in (
        "input pol 0:",
        "input pol 1:",
        "heaps_skipped=",
        "saturated_pol1=",
        "heaps_made=",
        "heaps_sent=",
    ):
        assert word in text
    report = json.loads(report_path.read_text())
    assert report["capture"]["streams"][1]["missing"] == 1
    assert report["heaps_unpaired"] == [1, 0]
    assert report["engine"]["heaps_skipped"] == 2  # the two slots the lost heap touches
    sent = report["output"]["heaps_sent"]
    assert sent == report["engine"]["heaps_made"] > 150
    assert report["control_updates"] == 2  # the two gains of the settings file
    got = drain(sink)
    sink.close()
    layout = HeapLayout(64, 16)
    heaps = [
        decode_output_heap(d, layout) for d in decode_packets(got) if d.heap_cnt < (1 << 48) - 2
    ]
    assert len(heaps) == sent
    power = sum((h.payload.astype(float) ** 2).sum(axis=(1, 2, 3)) for h in heaps)
    assert int(np.argmax(power)) == 20
    # The same heaps as the reference engine given the simulator's samples.
    x = digitiser_samples(
        0,
        400,
        samples_per_heap=1024,
        sample_rate_hz=1e6,
        tone_hz=156250.0,
        tone_amplitude=100.0,
        noise_rms=20.0,
        seed=1,
    )
    valid = np.ones(x.shape[1], dtype=bool)
    valid[200 * 1024 : 201 * 1024] = False
    ref = FEngineReference(64, 16, 16, sample_rate_hz=1e6)
    ref.set_gains(0.02, pol=0)
    ref.set_gains(0.01 + 0.01j, pol=1)
    expected = ref.process(x, 0, valid)
    assert [h.timestamp for h in heaps] == [h.timestamp for h in expected]
    for h, e in zip(heaps, expected, strict=True):
        np.testing.assert_array_equal(h.payload, e.payload)
    assert report["engine"]["saturated"] == ref.counters.saturated.tolist()
    assert len(read_packet_file(out_path)) == 1 + sent + 1
