"""``_core.Capture(spec)``: one nested spec, section for section the core's CaptureSpec.
A key the binding does not know is refused by name (a typo must not fall back to a
default), a wrong value names its ``section.key``, and what a spec leaves out gets the
core's documented defaults, the same ones the Python settings use."""

from __future__ import annotations

import pytest

from voltstream import _core
from voltstream.capture.config import CaptureSettings
from voltstream.errors import ConfigError
from voltstream.latency.run import LatencySettings, latency_spec
from voltstream.streams import parse_stream

COUNTER = {"name": "counter", "payload_len": 64}
BIND = {"bind": "127.0.0.1:0"}

# CaptureSpec::new's defaults, as docs/architecture.md states them.
DOCUMENTED = {
    "network": {"bind": "127.0.0.1:0", "interface": None, "multicast": [], "queue_bytes": 64 << 20,
                "more_binds": []},
    "engine": {"kind": "auto", "batch": 64, "ring_block_size": 1 << 20, "xdp_queue": 0,
               "xdp_mode": "auto", "dpdk_port": None, "dpdk_eal_args": []},
    "chunks": {"packets_per_chunk": 256, "nchunks": 16, "window": 4, "resync_chunks": 64,
               "whole_packets": False, "flush_age_s": None},
    "threads": {"count": 1, "cpus": [], "stream_threads": [], "spread": "auto"},
}  # fmt: skip


@pytest.mark.parametrize(
    "spec, match",
    [
        ({"format": COUNTER, "network": BIND, "chunks": {"nchunk": 32}},
         "section 'chunks' has no key 'nchunk'; its keys are packets_per_chunk, nchunks"),
        ({"format": COUNTER, "network": {**BIND, "queue_byte": 1}},
         "section 'network' has no key 'queue_byte'"),
        ({"format": {**COUNTER, "payload": 8}, "network": BIND},
         "section 'format' has no key 'payload'"),
        ({"format": COUNTER, "network": BIND, "chunk": {}},
         "has no section 'chunk'; its sections are format, network, engine, chunks, threads"),
        ({"format": COUNTER, "network": BIND, "engine": {"kind": "socket", "bach": 8}},
         "no key 'bach'"),
        ({"format": COUNTER, "network": BIND, "threads": {"threads": 2}},
         "section 'threads' has no key 'threads'"),
    ],
)  # fmt: skip
def test_an_unknown_key_is_refused_by_name(spec, match):
    with pytest.raises(ConfigError, match=match):
        _core.Capture(spec)


@pytest.mark.parametrize(
    "spec, match",
    [
        ({"format": COUNTER, "network": BIND, "chunks": {"nchunks": "many"}},
         r"chunks\.nchunks: 'str' object cannot be interpreted as an integer"),
        ({"format": COUNTER, "network": {}}, r"needs network\.bind"),
        ({"format": {"payload_len": 8}, "network": BIND}, "format section needs a name"),
        ({"format": COUNTER, "network": BIND, "engine": "socket"},
         "section 'engine' is a dict of its fields, not a str"),
        ("counter", "a dict of sections"),
        *(({"format": COUNTER, "network": BIND, "chunks": {"flush_age_s": bad}},
           rf"chunks\.flush_age_s must be a positive number of seconds, got {text}")
          for bad, text in ((0, "0"), (-0.5, "-0.5"), (float("nan"), "NaN"),
                            (float("inf"), "inf"))),
    ],
)  # fmt: skip
def test_a_malformed_spec_is_a_config_error_naming_its_place(spec, match):
    with pytest.raises(ConfigError, match=match):
        _core.Capture(spec)


def test_what_a_spec_leaves_out_gets_the_documented_defaults():
    cap = _core.Capture({"format": COUNTER, "network": BIND})
    assert cap.settings == DOCUMENTED
    assert cap.packets_per_chunk == 256
    with cap:
        # The pool the capture allocated is the default's, all of it free.
        assert cap.free_chunks() == 16
    # None means absent: the same defaults.
    spec = {"format": COUNTER, "network": {**BIND, "interface": None}, "chunks": {"window": None}}
    assert _core.Capture(spec).settings == DOCUMENTED
    # A flush age given is the one the capture runs with.
    aged = _core.Capture({"format": COUNTER, "network": BIND, "chunks": {"flush_age_s": 0.25}})
    assert aged.settings["chunks"]["flush_age_s"] == 0.25


def test_the_python_settings_defaults_are_the_cores():
    network = {k: v for k, v in DOCUMENTED["network"].items() if k != "bind"}
    assert _core.capture_defaults() == {**DOCUMENTED, "network": network}
    settings = CaptureSettings.of("127.0.0.1:0")
    spec = settings.spec(parse_stream({"format": "counter", "payload_len": 64}))
    # All but the window, which the settings set in time and packets (issue 26 item 5):
    # 4096 packets of 256-packet chunks, the pool twice that and four more.
    chunks = {**DOCUMENTED["chunks"], "window": 16, "nchunks": 36}
    assert spec["chunks"] == chunks
    engine = DOCUMENTED["engine"]
    assert {k: spec["engine"][k] for k in engine} == engine
    assert spec["network"]["queue_bytes"] == DOCUMENTED["network"]["queue_bytes"]
    assert spec["threads"]["count"] == 1
    # And the capture it opens runs with them.
    assert settings.open(parse_stream({"format": "counter", "payload_len": 64})).settings == (
        {**DOCUMENTED, "chunks": chunks}
    )


def test_the_latency_session_refuses_unknown_keys_too():
    spec = latency_spec("127.0.0.1:0", LatencySettings(standin=True))
    spec["frames"]["packets_per_frme"] = 4
    with pytest.raises(ConfigError, match="section 'frames' has no key 'packets_per_frme'"):
        _core.LatencySession(spec)
    spec = latency_spec("127.0.0.1:0", LatencySettings(standin=True))
    del spec["handoff"]["records"]
    with pytest.raises(ConfigError, match=r"needs handoff\.records"):
        _core.LatencySession(spec)
