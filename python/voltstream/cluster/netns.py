"""Nodes in network namespaces: one machine made to look like a rack of nodes.

The cluster demo (issue 16) runs each node worker in a network namespace of its own,
so that a node captures on its own address as it would on a real host and the
simulator sends each subband to a different address, not to a port of one.

Layout, for ``n`` nodes and a per-run random ``tag``::

    root namespace                          namespace {prefix}{tag}-{i}
    bridge {prefix}{tag}br  10.a.b.1/24 ──  veth {prefix}{tag}h{i} │ {prefix}{tag}n{i}
                                                                   10.a.b.{i+2}/24, lo up,
                                                                   default via 10.a.b.1

The host reaches every node's address, every node reaches the host's (the Dask
scheduler and the merger listen there, or on 0.0.0.0), and nodes reach each other
over the bridge: all one /24, so no routing (ip_forward) is needed and no sysctl is
touched. The tag keeps parallel runs apart; the /24 is chosen among a few random
10.a.b.0/24 that no route or address of the host overlaps.

Only the bridge, the veths and the namespaces are made, and `NodeNamespaces.__exit__`
removes them all, whatever happened. The veths are deleted explicitly, before the
namespaces: the kernel dismantles a deleted namespace later, on a work queue (the host
end of its veth can still be listed just after ``ip netns del``), and not at all while
a process still runs in it (stopping those processes is the caller's job).

On a host whose iptables FORWARD chain drops packets (Docker sets that policy) and
where br_netfilter hands bridged IPv4 to iptables (``net.bridge.bridge-nf-call-iptables``
= 1, global in the root namespace; the bridge's own setting cannot turn it off),
node-to-node traffic is dropped: it is bridged, so it crosses FORWARD. Host-to-node
and node-to-host traffic does not (OUTPUT and INPUT). Nothing here changes that sysctl.

No Dask here: the cluster driver runs its workers with `NodeNet.exec_prefix`.
"""

from __future__ import annotations

import ipaddress
import os
import random
import shutil
import subprocess
from dataclasses import dataclass
from types import TracebackType

from voltstream.errors import ConfigError, VoltstreamError

__all__ = ["NodeNamespaces", "NodeNet", "namespaces_available"]

#: Longest an ``ip`` call may take; a hung one is an error, never a hung run.
IP_TIMEOUT_S = 10.0
#: Linux interface names: at most 15 characters (IFNAMSIZ - 1).
IFNAME_MAX = 15
#: Random 10.a.b.0/24 subnets tried before giving up.
SUBNET_TRIES = 16


@dataclass(frozen=True)
class NodeNet:
    """One node's network: its namespace and the addresses on either side."""

    name: str  # the namespace name
    node_addr: str  # the node's IPv4 address inside its namespace (the simulator sends here)
    host_addr: str  # the host's address on the bridge, reachable from the namespace

    def exec_prefix(self) -> list[str]:
        """The command prefix that runs a program inside the namespace."""
        return ["ip", "netns", "exec", self.name]


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    """``ip args``; with ``check``, a VoltstreamError that quotes ip's complaint."""
    cmd = ["ip", *args]
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=IP_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        if check:
            raise VoltstreamError(f"`{' '.join(cmd)}` took over {IP_TIMEOUT_S:g} s") from None
        return subprocess.CompletedProcess(cmd, -1, "", "timed out")
    except OSError as e:  # no `ip` at all
        if check:
            raise VoltstreamError(f"cannot run `ip` ({e.strerror}): install iproute2") from None
        return subprocess.CompletedProcess(cmd, -1, "", str(e))
    if check and r.returncode != 0:
        raise VoltstreamError(f"`{' '.join(cmd)}` failed: {r.stderr.strip() or r.returncode}")
    return r


def _tag() -> str:
    """Four random hex digits: names of parallel runs (and tests) never collide."""
    return os.urandom(2).hex()


def namespaces_available() -> tuple[bool, str]:
    """(True, "") when this process can make namespaces with a bridge and veths;
    else (False, why). Tries it on a scratch namespace, where the bridge and veth
    are made too, so nothing in the root namespace changes."""
    if os.geteuid() != 0:
        return False, "network namespaces need root (run as root, or skip the namespaces)"
    if shutil.which("ip") is None:
        return False, "no `ip` command: install iproute2"
    scratch = f"vsnchk{_tag()}"
    try:
        for args in (
            ("netns", "add", scratch),
            ("-n", scratch, "link", "add", "b0", "type", "bridge"),
            ("-n", scratch, "link", "add", "v0", "type", "veth", "peer", "name", "v1"),
        ):
            r = _ip(*args, check=False)
            if r.returncode != 0:
                why = r.stderr.strip() or f"exit status {r.returncode}"
                return False, f"`ip {' '.join(args)}` failed: {why}"
        return True, ""
    finally:
        _ip("netns", "del", scratch, check=False)


def _taken_networks() -> list[ipaddress.IPv4Network]:
    """Every IPv4 network the host routes or has an address in (all tables)."""
    taken = []
    for args in (("-4", "route", "show", "table", "all"), ("-4", "addr", "show")):
        for line in _ip(*args).stdout.splitlines():
            words = line.split()
            if words[:1] == ["inet"]:  # `ip addr`: "inet 192.0.2.2/24 brd ..."
                words = words[1:]
            for w in words[:2]:  # a route's destination may follow its type ("local ...")
                try:
                    taken.append(ipaddress.IPv4Network(w, strict=False))
                    break
                except ValueError:
                    continue
    # 0.0.0.0/0 (a default route) overlaps everything and is no conflict.
    return [net for net in taken if net.prefixlen > 0]


def _free_subnet(rng: random.Random) -> ipaddress.IPv4Network:
    """A random 10.a.b.0/24 that overlaps no route or address of the host."""
    taken = _taken_networks()
    for _ in range(SUBNET_TRIES):
        net = ipaddress.IPv4Network(f"10.{rng.randrange(100, 250)}.{rng.randrange(256)}.0/24")
        if not any(net.overlaps(t) for t in taken):
            return net
    raise VoltstreamError(
        f"no free 10.x.y.0/24 subnet for the node namespaces after {SUBNET_TRIES} tries; "
        "the host routes most of 10.0.0.0/8 (see `ip -4 route`)"
    )


class NodeNamespaces:
    """``n`` network namespaces on one bridge, one per node (see the module doc).

    ``with NodeNamespaces(4) as nets:`` gives a `NodeNet` per node; everything made is
    removed on the way out, after an error too.
    """

    def __init__(self, n: int, prefix: str = "vsn", mtu: int = 9000) -> None:
        if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= 253:
            raise ConfigError(f"node namespaces: n must be 1 .. 253 (one /24), got {n!r}")
        if not prefix.isascii() or not prefix.isalnum():
            raise ConfigError(f"namespace prefix {prefix!r}: use ASCII letters and digits")
        if not 68 <= mtu <= 65535:
            raise ConfigError(f"node namespaces: MTU {mtu} is outside 68 .. 65535")
        self.n, self.mtu, self.tag = n, mtu, _tag()
        base = f"{prefix}{self.tag}"
        longest = f"{base}h{n - 1}"
        if len(longest) > IFNAME_MAX:
            raise ConfigError(
                f"namespace prefix {prefix!r}: interface names like {longest!r} exceed "
                f"{IFNAME_MAX} characters; use a prefix of at most "
                f"{IFNAME_MAX - len(longest) + len(prefix)} characters"
            )
        self.bridge = f"{base}br"
        self.namespaces = [f"{base}-{i}" for i in range(n)]
        self.host_ifs = [f"{base}h{i}" for i in range(n)]
        self.node_ifs = [f"{base}n{i}" for i in range(n)]
        self.subnet: ipaddress.IPv4Network | None = None
        self.nets: list[NodeNet] = []

    def __enter__(self) -> list[NodeNet]:
        try:
            self._create()
        except BaseException:
            self._remove()
            raise
        return self.nets

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._remove()

    def _create(self) -> None:
        ok, why = namespaces_available()
        if not ok:
            raise VoltstreamError(f"cannot make node namespaces: {why}")
        mtu = str(self.mtu)
        # The tag seeds the subnet choice: two runs at once rarely pick the same /24,
        # and if they do, the second sees the first's route and picks again.
        rng = random.Random(self.tag)
        for _ in range(3):
            self.subnet = _free_subnet(rng)
            host = f"{self.subnet[1]}/24"
            _ip("link", "add", self.bridge, "mtu", mtu, "type", "bridge")
            _ip("addr", "add", host, "dev", self.bridge)
            if self._subnet_is_ours():
                break
            _ip("link", "del", self.bridge, check=False)
        else:
            raise VoltstreamError(f"subnets for {self.bridge} kept colliding; try again")
        _ip("link", "set", self.bridge, "up")
        host_addr = str(self.subnet[1])
        for i, ns in enumerate(self.namespaces):
            node_addr = str(self.subnet[i + 2])
            _ip("netns", "add", ns)
            _ip("link", "add", self.host_ifs[i], "mtu", mtu, "type", "veth",
                "peer", "name", self.node_ifs[i], "netns", ns, "mtu", mtu)  # fmt: skip
            _ip("link", "set", self.host_ifs[i], "master", self.bridge, "up")
            _ip("-n", ns, "addr", "add", f"{node_addr}/24", "dev", self.node_ifs[i])
            _ip("-n", ns, "link", "set", "lo", "up")
            _ip("-n", ns, "link", "set", self.node_ifs[i], "up")
            _ip("-n", ns, "route", "add", "default", "via", host_addr)
            self.nets.append(NodeNet(ns, node_addr, host_addr))

    def _subnet_is_ours(self) -> bool:
        """Whether our bridge is the only route to our subnet (another run, or a
        network added since we looked, may have taken it meanwhile)."""
        routes = _ip("-4", "route", "show", "table", "all", "to", "match", str(self.subnet))
        devs = set()
        for line in routes.stdout.splitlines():
            words = line.split()
            if "dev" in words and not line.startswith("default"):
                devs.add(words[words.index("dev") + 1])
        return devs <= {self.bridge}

    def _remove(self) -> None:
        """Deletes what this object may have made, each step on its own: a step that
        fails (it was never made, or is gone) does not stop the others."""
        for ifname in self.host_ifs:  # both ends at once, now (see the module doc)
            _ip("link", "del", ifname, check=False)
        for ns in self.namespaces:
            _ip("netns", "del", ns, check=False)
        _ip("link", "del", self.bridge, check=False)
        self.nets = []
