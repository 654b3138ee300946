"""AF_XDP engine through `_core.Capture`, over a veth pair between two network namespaces
that each test creates and removes (the host's interfaces, routes and loopback are never
touched): exact counters with reordering, gaps, duplicates, late, foreign, truncated and
garbage packets; other traffic (other UDP ports, TCP, ARP) still reaches the receiver's kernel;
jumbo frames arrive whole through multi-buffer descriptors; native and generic (skb) mode;
a UDP-GSO sender in native mode; clear errors."""

import subprocess
import sys
import textwrap

import pytest

from capture_spec import capture
from netns import veth_pair
from veth_capture import capture_over_veth
from veth_capture import check_counters as veth_counters
from voltstream.errors import ConfigError, VoltstreamError


@pytest.fixture
def veth():
    """Two namespaces joined by a veth with a 9000-byte MTU; deleting the namespaces
    (always, in the finalizer) deletes the veth."""
    yield from veth_pair("vx", 150, mtu=9000)


def check_counters(st, passed, *, nidx, lost, plen):
    veth_counters(st, "xdp", nidx=nidx, lost=lost, plen=plen)
    x = st["xdp"]
    assert x["matched"] == st["packets"]
    assert x["no_socket"] == x["cut"] == x["rx_dropped"] == x["rx_ring_full"] == 0
    # Other ports went to the kernel stack: the warm-up and three datagrams.
    assert len(passed) == 4 and passed[1:] == [plen + 7] * 3


@pytest.mark.netns
@pytest.mark.parametrize("plen", [1000, 8192], ids=["1000B", "jumbo8192B"])
@pytest.mark.parametrize("mode", ["native", "skb"])
def test_xdp_counts_every_kind_of_packet_exactly_over_a_veth(veth, tmp_path, mode, plen):
    nidx = 400 if plen < 4096 else 160
    gap = {(7, 1), (100, 0), (101, 0), (133, 1)}
    st, passed, lost = capture_over_veth(
        veth, tmp_path, {"engine": "xdp", "xdp_mode": mode}, plen=plen, nidx=nidx, gap=gap
    )
    check_counters(st, passed, nidx=nidx, lost=lost, plen=plen)
    x = st["xdp"]
    assert (x["interface"], x["queue"], x["mode"]) == (veth["rx_if"], 0, mode)
    # veth has no zero-copy; the 9000-byte MTU needs multi-buffer (kernel 6.6+), and a
    # jumbo frame spans three 4 KiB chunks yet arrived whole.
    assert x["zero_copy"] is False and x["multi_buffer"] is True
    assert x["frame_size"] == 4096


@pytest.mark.netns
def test_xdp_native_mode_takes_a_udp_gso_sender(veth, tmp_path):
    """With our program attached natively the kernel turns GSO off on the veth's peer,
    so the repository's GSO sender is segmented before XDP sees it."""
    nidx, plen, gap = 512, 1000, {(3, 0), (300, 1)}
    kw = {"engine": "xdp", "xdp_mode": "native"}
    st, passed, lost = capture_over_veth(
        veth, tmp_path, kw, plen=plen, nidx=nidx, gap=gap, gso=True
    )
    check_counters(st, passed, nidx=nidx, lost=lost, plen=plen)


@pytest.mark.netns
def test_xdp_errors_are_clear(veth):
    env = ["ip", "netns", "exec", veth["rx_ns"], sys.executable, "-c"]
    script = textwrap.dedent(
        """
        import sys
        from voltstream import _core
        from voltstream.errors import VoltstreamError
        bind = sys.argv[1]
        def spec(bind, **engine):
            return {"format": {"name": "counter", "payload_len": 8},
                    "network": {"bind": bind}, "chunks": {"packets_per_chunk": 4},
                    "engine": {"kind": "xdp", **engine}}
        first = _core.Capture(spec(bind))
        first.start()
        errors = []
        for kw in ({"xdp_queue": 3}, {}):
            try:
                _core.Capture(spec(bind.rsplit(":", 1)[0] + ":0", **kw)).start()
                errors.append("started")
            except VoltstreamError as e:
                errors.append(str(e))
        first.stop()
        print("\\n".join(errors))
        """
    )
    r = subprocess.run([*env, script, f"{veth['rx']}:7149"], capture_output=True, text=True,
                       timeout=60)  # fmt: skip
    assert r.returncode == 0, r.stderr
    queue, busy = r.stdout.strip().splitlines()
    assert "queue 3" in queue and "receive queue" in queue, queue
    assert "already reads queue 0" in busy, busy


def test_xdp_argument_errors_need_no_privileges():
    with pytest.raises(ConfigError, match="unknown XDP mode"):
        capture("counter", "127.0.0.1:0", 4, payload_len=8, engine="xdp", xdp_mode="zc")
    cap = capture("counter", "127.0.0.1:0", 4, payload_len=8, engine="xdp")
    assert cap.stats()["engine"] == "xdp" and "xdp" not in cap.stats()
    bad = capture("counter", "127.0.0.1:0", 4, payload_len=8, engine="xdp", interface="vs-nope0")
    with pytest.raises(VoltstreamError, match="vs-nope0|without AF_XDP"):
        bad.start()
