"""DPDK engine through `_core.Capture` (engine kind "dpdk"), with DPDK's net_af_packet virtual
device on one end of a veth pair between two network namespaces that each test creates and
removes: exact counters with reordering, gaps, duplicates, late, foreign, truncated and garbage
packets, frames the kernel ring cut (detected from the IP length), other traffic counted and
still reaching the receiver's kernel; a framesz too small for the format refused; clear errors.

The tests marked `dpdk` need an extension built with the cargo feature (`make dpdk-test`
builds it and runs them); `make py-test` deselects them. The unmarked test checks the
error of an extension built either way."""

import math
import subprocess
import sys
import textwrap

import pytest

from capture_spec import capture
from netns import veth_pair
from veth_capture import capture_over_veth, check_counters
from voltstream import _core
from voltstream.errors import ConfigError

PORT = 7148


@pytest.fixture
def veth():
    """Two namespaces joined by a veth with a 9000-byte MTU; deleting the namespaces
    (always, in the finalizer) deletes the veth."""
    yield from veth_pair("vsd", 200, mtu=9000)


def framesz_for(plen):
    """The smallest framesz holding the counter format's packets (10-byte header) plus the
    capture's 64-byte margin: 80 bytes of TPACKET header, 28 of IP and UDP."""
    return -(-(80 + 28 + plen + 10 + 64) // 16) * 16


@pytest.mark.dpdk
@pytest.mark.netns
@pytest.mark.parametrize(
    "plen,port,cut",
    [(1000, "interface", 1), (8192, "interface", 0), (1000, "vdev", 2)],
    ids=["1000B", "jumbo8192B", "1000B-own-vdev"],
)
def test_dpdk_counts_every_kind_of_packet_exactly_over_a_veth(veth, tmp_path, plen, port, cut):
    """`cut`: frames longer than the ring's frames, which the kernel cuts. voltstream sizes
    frames as a power of two (2048 and 16384 bytes here): for 1000-byte packets the 8900-byte
    datagram is cut, for 8 KiB packets neither long one is. The own vdev has frames of the
    least size that holds the packets (1184 bytes, blocks of 37 pages): both are cut."""
    nidx = 400 if plen < 4096 else 160
    gap = {(7, 1), (100, 0), (101, 0), (133, 1)}
    vdev = ""
    if port == "vdev":
        fsz = framesz_for(plen)
        blocksz = math.lcm(fsz, 4096)
        vdev = (f"net_af_packet7,iface={veth['rx_if']},framesz={fsz},blocksz={blocksz},"
                f"framecnt={8 * blocksz // fsz}")  # fmt: skip
    kw = {"engine": "dpdk", **({"dpdk_port": vdev} if vdev else {"interface": veth["rx_if"]})}
    st, passed, lost = capture_over_veth(
        veth, tmp_path, kw, plen=plen, nidx=nidx, gap=gap, port=PORT, cut_probe=True
    )
    # Malformed: the half packet, the garbage, and the two long ones (cut or not).
    check_counters(st, "dpdk", nidx=nidx, lost=lost, plen=plen, cut_probe=True)
    d = st["dpdk"]
    assert d["driver"] == "net_af_packet"
    assert d["cut"] == cut and d["joined"] == 0
    # Every frame of the port was read and either passed on or counted as another's
    # (ARP, TCP, the other port, the receiver's own replies).
    assert d["frames"] == d["ipackets"] == st["packets"] + d["other"]
    assert d["other"] >= 4 + 2  # four datagrams to the other port, TCP both ways
    assert d["imissed"] == d["ierrors"] == d["rx_nombuf"] == 0
    if port == "vdev":
        assert d["device"] == vdev
    else:
        assert d["framesz"] == 1 << (framesz_for(plen) - 1).bit_length()
        assert d["device"].startswith("net_af_packet")
        assert f"iface={veth['rx_if']}" in d["device"]
    assert "--no-pci" in d["eal_args"]
    # Other ports went to the kernel stack: the warm-up and three datagrams.
    assert len(passed) == 4 and passed[1:] == [plen + 7] * 3


@pytest.mark.dpdk
@pytest.mark.netns
def test_dpdk_refuses_a_framesz_that_would_cut_the_packets(veth):
    """net_af_packet's default framesz (2048) would cut 8 KiB packets without a word: the
    capture refuses to start and says what to set, before the EAL starts."""
    env = ["ip", "netns", "exec", veth["rx_ns"], sys.executable, "-c"]
    script = textwrap.dedent(
        """
        import sys
        from voltstream import _core
        from voltstream.errors import VoltstreamError
        bind, iface = sys.argv[1:3]
        out = []
        for vdev in (f"net_af_packet0,iface={iface}",
                     f"net_af_packet0,iface={iface},framesz=4096,blocksz=65536",
                     f"net_af_packet0,iface={iface},framesz=9216,qpairs=2"):
            try:
                _core.Capture({
                    "format": {"name": "counter", "payload_len": 8192},
                    "network": {"bind": bind}, "chunks": {"packets_per_chunk": 4},
                    "engine": {"kind": "dpdk", "dpdk_port": vdev},
                }).start()
                out.append("started")
            except VoltstreamError as e:
                out.append(type(e).__name__ + ": " + str(e))
        print("\\n".join(out))
        """
    )
    r = subprocess.run([*env, script, f"{veth['rx']}:{PORT}", veth["rx_if"]],
                       capture_output=True, text=True, timeout=60)  # fmt: skip
    assert r.returncode == 0, r.stderr
    default, small, qpairs = r.stdout.strip().splitlines()
    need = framesz_for(8192)
    for msg, have in ((default, 2048), (small, 4096)):
        assert msg.startswith("ConfigError"), msg
        assert f"framesz={have} holds at most {have - 108} bytes" in msg, msg
        assert f"Set framesz={need} or more" in msg, msg
    assert "qpairs must be 1" in qpairs, qpairs
    # Refused before the EAL started: it never printed anything.
    assert "EAL" not in r.stderr, r.stderr


def test_dpdk_engine_errors_are_clear():
    """Either build: the DPDK engine is never chosen by auto, and asking for it gives an
    error that says what to do."""
    if _core.DPDK_AVAILABLE:
        kw = {"dpdk_port": "0000:3b:00.0"}  # a PCI port needs an explicit UDP port
        hint = "explicit UDP port"
    else:
        kw = {}
        hint = "-F dpdk"
    cap = capture("counter", "127.0.0.1:0", 4, payload_len=8, engine="dpdk", **kw)
    with pytest.raises(ConfigError, match=hint):
        cap.start()
    with pytest.raises(ConfigError, match="'xdp' or 'dpdk'"):
        capture("counter", "127.0.0.1:0", 4, payload_len=8, engine="dpdk2")
    with capture("counter", "127.0.0.1:0", 4, payload_len=8) as auto:
        assert auto.stats()["engine"] in ("packet_ring", "socket")
        assert "dpdk" not in auto.stats()


def test_cli_passes_the_dpdk_port_through():
    """`voltstream capture --engine dpdk --dpdk-port ...` reaches the engine: a framesz too
    small for the format's packets is refused (or, without the feature, the build hint)."""
    r = subprocess.run(
        [sys.executable, "-m", "voltstream.cli", "capture", "--format", "vdif",
         "--listen", "127.0.0.1:7148", "--duration", "1", "--engine", "dpdk",
         "--dpdk-port", "net_af_packet0,iface=lo,framesz=1024"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert r.returncode != 0
    hint = "framesz=1024 holds at most 916 bytes" if _core.DPDK_AVAILABLE else "-F dpdk"
    assert hint in r.stderr, r.stderr
