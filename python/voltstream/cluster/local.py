"""A Dask cluster on this machine made of the same processes as on real hosts: one
``dask scheduler``, one ``dask worker`` per node (under its nanny, which restarts it
after a kill) and one for the merger, each node's worker in its own network
namespace when namespaces are given (cluster/netns.py), on loopback otherwise.

`voltstream demo --nodes N`, the benchmark and the tests use it; on real hosts the
operator starts the same commands by hand (docs/scale-out.md).
"""

from __future__ import annotations

import json
import logging
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from voltstream.errors import ConfigError

log = logging.getLogger("voltstream.cluster.local")

#: Dask settings of every process: a worker that stops answering (a vanished host)
#: is dropped after 15 s, not the default 5 minutes; a node may be killed and rerun
#: many times in an observation (`KilledWorker` only after that many).
DASK_ENV = {
    "DASK_DISTRIBUTED__SCHEDULER__WORKER_TTL": "15s",
    "DASK_DISTRIBUTED__SCHEDULER__ALLOWED_FAILURES": "50",
    "DASK_DISTRIBUTED__WORKER__DAEMON": "False",
    "DASK_DISTRIBUTED__ADMIN__TICK__LIMIT": "30s",
    # A dead merger's worker is given up on in seconds, not the default 30 s, so a
    # node's call fails fast and it finds the new merger.
    "DASK_DISTRIBUTED__COMM__TIMEOUTS__CONNECT": "5s",
}


def worker_command(
    scheduler_file: Path, name: str, resources: str, host: str, prefix: list[str] | None = None
) -> list[str]:
    """``dask worker`` as docs/scale-out.md starts it on a real host."""
    return [
        *(prefix or []), sys.executable, "-m", "distributed.cli.dask_worker",
        "--scheduler-file", str(scheduler_file), "--name", name, "--resources", resources,
        "--nthreads", "1", "--nworkers", "1", "--nanny", "--host", host,
        "--memory-limit", "0", "--no-dashboard", "--death-timeout", "60",
    ]  # fmt: skip


def node_gpus(nodes: int, ids: list[str] | None = None) -> list[str] | None:
    """The GPU of each node's worker when this machine has several (round robin, as
    a real cluster gives each node host its own): node i sees only ``ids[i % n]``.
    None with one GPU or none: the workers see what this process sees."""
    if ids is None:
        from voltstream.device import gpu_ids

        ids = gpu_ids()
    if len(ids) < 2:
        return None
    return [ids[i % len(ids)] for i in range(nodes)]


class ProcessCluster:
    """Starts the scheduler and workers, hands out a connected `distributed.Client`,
    and stops every process on exit (also after an error)."""

    def __init__(
        self,
        nodes: list[str],
        workdir: Path,
        host: str = "127.0.0.1",
        node_hosts: list[str] | None = None,
        prefixes: list[list[str]] | None = None,
        start_timeout_s: float = 90.0,
    ) -> None:
        self.nodes, self.workdir, self.host = nodes, Path(workdir), host
        self.node_hosts = node_hosts or [host] * len(nodes)
        self.prefixes = prefixes or [[] for _ in nodes]
        self.start_timeout_s = start_timeout_s
        self.procs: dict[str, subprocess.Popen] = {}
        self.client: Any = None
        self.scheduler_file = self.workdir / "scheduler.json"

    def __enter__(self) -> ProcessCluster:
        try:
            self._start()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _spawn(self, name: str, cmd: list[str], env_extra: dict[str, str] | None = None) -> None:
        logs = self.workdir / "logs"
        logs.mkdir(parents=True, exist_ok=True)
        out = open(logs / f"{name}.log", "ab")  # noqa: SIM115 - the child keeps it open
        env = dict(os.environ, **DASK_ENV, **(env_extra or {}))
        # Its own session: a Ctrl-C at the terminal reaches the driver, which stops
        # the observation in order, not every worker at once.
        self.procs[name] = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env,
                                            start_new_session=True)  # fmt: skip
        out.close()

    def _start(self) -> None:
        from distributed import Client

        self.workdir.mkdir(parents=True, exist_ok=True)
        self.scheduler_file.unlink(missing_ok=True)
        self._spawn("scheduler", [
            sys.executable, "-m", "distributed.cli.dask_scheduler", "--host", self.host,
            "--port", "0", "--scheduler-file", str(self.scheduler_file),
            "--dashboard-address", ":0",
        ])  # fmt: skip
        deadline = time.monotonic() + self.start_timeout_s
        while not self._scheduler_ready():
            self._check_alive("scheduler")
            if time.monotonic() > deadline:
                raise ConfigError("the Dask scheduler did not start: see its log in "
                                  f"{self.workdir / 'logs' / 'scheduler.log'}")  # fmt: skip
            time.sleep(0.1)
        self._spawn("merger", worker_command(self.scheduler_file, "merger", "merger=1", self.host))
        gpus = node_gpus(len(self.nodes))
        for i, (name, host, prefix) in enumerate(
            zip(self.nodes, self.node_hosts, self.prefixes, strict=True)
        ):
            cmd = worker_command(self.scheduler_file, name, f"{name}=1", host, prefix)
            self._spawn(name, cmd, None if gpus is None else {"CUDA_VISIBLE_DEVICES": gpus[i]})
        self.client = Client(scheduler_file=str(self.scheduler_file), timeout="30s")
        want = len(self.nodes) + 1
        from voltstream.cluster.driver import cluster_workers

        while len(cluster_workers(self.client)) < want:
            for name in self.procs:
                self._check_alive(name)
            if time.monotonic() > deadline:
                raise ConfigError(f"only {len(cluster_workers(self.client))} of "
                                  f"{want} Dask workers started in {self.start_timeout_s:.0f} s; "
                                  f"see {self.workdir / 'logs'}")  # fmt: skip
            time.sleep(0.1)

    def _scheduler_ready(self) -> bool:
        try:
            return bool(json.loads(self.scheduler_file.read_text()).get("address"))
        except (OSError, ValueError):
            return False

    def _check_alive(self, name: str) -> None:
        p = self.procs[name]
        if p.poll() is not None:
            raise ConfigError(f"the Dask {name} process exited with status {p.returncode}: "
                              f"see {self.workdir / 'logs' / (name + '.log')}")  # fmt: skip

    @property
    def dashboard(self) -> str | None:
        return getattr(self.client, "dashboard_link", None) if self.client else None

    def close(self) -> None:
        if self.client is not None:
            try:
                self.client.close(timeout=5)
            except Exception:  # a scheduler already gone: nothing to close politely
                pass
            self.client = None
        # Workers first (their nannies would restart them), the scheduler last.
        order = [n for n in self.procs if n != "scheduler"] + ["scheduler"]
        for name in order:
            p = self.procs.get(name)
            if p is not None and p.poll() is None:
                _signal_group(p, signal.SIGTERM)
        end = time.monotonic() + 10
        for name in order:
            p = self.procs.get(name)
            if p is None:
                continue
            try:
                p.wait(timeout=max(0.1, end - time.monotonic()))
            except subprocess.TimeoutExpired:
                _signal_group(p, signal.SIGKILL)
                p.wait(timeout=10)
        self.procs.clear()


def _signal_group(p: subprocess.Popen, sig: int) -> None:
    """The process and its children (a nanny's worker; `ip netns exec`'s child)."""
    try:
        os.killpg(p.pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


@dataclass
class LocalNodes:
    """A running `ProcessCluster` and where each node's subband is to be sent."""

    cluster: ProcessCluster
    dests: list[str]  # HOST:PORT each node captures on
    where: str  # how the nodes are placed, for messages


@contextmanager
def local_nodes(
    names: list[str], workdir: Path, netns: str = "auto", port: int = 7148
) -> Iterator[LocalNodes]:
    """Node workers ``names`` and a merger on this machine: each node in its own
    network namespace (``netns`` "yes", or "auto" when root and `ip netns` works)
    capturing on ``port`` of its own address, else on a free loopback port each."""
    with ExitStack() as stack:
        nets = []
        if netns != "no":
            from voltstream.cluster.netns import NodeNamespaces, namespaces_available

            ok, why = namespaces_available()
            if ok:
                nets = stack.enter_context(NodeNamespaces(len(names)))
            elif netns == "yes":
                raise ConfigError(f"network namespaces are not available: {why}")
            else:
                log.info("cluster: nodes on loopback: %s", why)
        if nets:
            dests = [f"{net.node_addr}:{port}" for net in nets]
            cluster = ProcessCluster(names, workdir, nets[0].host_addr,
                                     [net.node_addr for net in nets],
                                     [net.exec_prefix() for net in nets])  # fmt: skip
            where = "each in its own network namespace with a veth on a bridge"
        else:
            dests = [f"127.0.0.1:{_free_udp_port()}" for _ in names]
            cluster = ProcessCluster(names, workdir)
            where = "on loopback ports (run as root for network namespaces)"
        yield LocalNodes(stack.enter_context(cluster), dests, where)


def _free_udp_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])
