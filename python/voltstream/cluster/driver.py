"""The driver of a cluster observation: plans each node's job and the merger's, starts
them on a Dask cluster, watches them, and writes the one report.

Dask does the placing and the restarting: the merger is an actor on the worker with
the ``merger`` resource, node i's job a long task on the worker with resource
``node{i}`` (its name), resubmitted under a new key when the scheduler gives up on
it (`KilledWorker`). The driver ticks the merger (its deadline rule), tells it when a
node's worker has left the cluster (so its rows are not waited for), asks it for
status (live metrics per node) and ends the observation with a Dask ``Event``.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from voltstream.cluster.job import NodeJob
from voltstream.cluster.merger import MergePlan, Merger
from voltstream.cluster.node import run_node, subband_of
from voltstream.errors import ConfigError
from voltstream.fold.plan import FoldPlan
from voltstream.fold.reference import FoldSettings
from voltstream.observation import Observation

log = logging.getLogger("voltstream.cluster.driver")

#: After the stop, how long a node without a worker is waited for before it is lost.
LOST_AFTER_S = 10.0
# Dask logs at INFO that an actor handle (set in a Variable) is pickled, not
# serialised its own way: that is what a handle is, and says nothing to an operator.
logging.getLogger("distributed.protocol.core").setLevel(logging.WARNING)


@dataclass
class ClusterPlan:
    """Every node's job and the merger's plan, made by `plan_observation`."""

    jobs: list[NodeJob]
    merge: MergePlan
    name: str = field(default_factory=lambda: uuid.uuid4().hex[:8])


def plan_observation(
    subbands: Sequence[tuple[str, str, Observation]],
    settings: FoldSettings,
    output: str,
    duration_s: float,
    *,
    formats: Sequence[Any] | None = None,
    start_packet: int = 0,
    file_offsets: Sequence[int] | None = None,
    idle_timeout_s: float | None = None,
    capture: dict | None = None,
    deadline_s: float | None = None,
    lag: int | None = None,
    history: Sequence[str] = (),
    device: str = "cpu",
) -> ClusterPlan:
    """``subbands``: (node, source, the subband's Observation with the observation's
    start), in any order; together they must tile one band of equal channels."""
    if not subbands:
        raise ConfigError("give at least one subband (NODE=SOURCE)")
    obs0 = subbands[0][2]
    cbw = abs(obs0.chan_bw_mhz)
    for _, _, o in subbands:
        if abs(abs(o.chan_bw_mhz) - cbw) > 1e-9 or o.npol != obs0.npol:
            raise ConfigError("every subband needs the same channel width and polarisations")
    freqs = np.sort(np.concatenate([o.chan_freqs_mhz for _, _, o in subbands]))
    if freqs.size > 1 and not np.allclose(np.diff(freqs), cbw, rtol=1e-6):
        raise ConfigError(
            "the subbands do not tile one band of adjacent channels: check each node's "
            "frequency (the whole band's centre and the order of --subband)"
        )
    centre = float((freqs[0] + freqs[-1]) / 2)
    band = Observation(
        nchan=freqs.size, npol=obs0.npol, freq_mhz=centre, bw_mhz=cbw * freqs.size,
        tsamp_s=obs0.tsamp_s, start_mjd=obs0.start_mjd, start_sec=obs0.start_sec,
        source=obs0.source, telescope=obs0.telescope,
    )  # fmt: skip
    # The whole band's plan: every node dedisperses with its FFT length and cut.
    plan = FoldPlan(band, settings, band_freqs_mhz=freqs)
    settings = replace(settings, nfft=plan.nfft)
    tsub = settings.tsub_s
    if not tsub:
        raise ConfigError("a cluster observation needs --tsub (rows are sent as they finish)")
    # Lag rule: a node this far behind the front is not waited for (its host vanished
    # without a reset); at least 10 s of rows, so slow folds on a busy node are not
    # cut off. A kill is seen by the scheduler at once (`Merger.gone`).
    lag = lag or max(2, int(np.ceil(10.0 / tsub)))
    name = uuid.uuid4().hex[:8]
    jobs = []
    for i, (node, source, o) in enumerate(subbands):
        jobs.append(NodeJob(
            node=node, source=source, obs=o, settings=settings,
            band_freqs_mhz=tuple(float(f) for f in freqs), band_centre_mhz=centre,
            duration_s=duration_s, fmt=formats[i] if formats else None,
            start_packet=start_packet,
            file_offset=file_offsets[i] if file_offsets else 0,
            idle_timeout_s=idle_timeout_s, merger=f"voltstream-merger-{name}", device=device,
            stop=f"voltstream-stop-{name}", capture=dict(capture or {}),
        ))  # fmt: skip
    merge = MergePlan(
        subbands=tuple(subband_of(j) for j in jobs), band=band, settings=settings,
        output=str(output), lag=lag,
        deadline_s=deadline_s if deadline_s is not None else 1.5 * tsub + 10.0,
        history=tuple(history), coherent_nfft=plan.nfft,
        coherent_discard=(plan.head, plan.tail),
        par_text=getattr(settings.predictor, "par_text", None),
    )  # fmt: skip
    return ClusterPlan(jobs, merge, name)


@dataclass
class Kill:
    """Kill node ``node``'s worker (SIGKILL, as a crash) ``at_s`` into the run; the
    worker must run on this machine (the demo)."""

    node: str
    at_s: float
    done_at: float | None = None
    pid: int | None = None


def cluster_workers(client: Any) -> dict[str, dict]:
    """Every worker now in the cluster (its info, by address), asked of the scheduler.

    Not `client.scheduler_info(n_workers=-1)`: that fetches into the client's cache
    and returns the cache, which the client's own periodic refresh (every 2 s, asking
    for no workers) can overwrite in between (distributed 2026.8). A cluster with every
    worker up then reads as one with none: each node "left", its rows not waited for,
    and a row that some nodes had sent written without the others."""
    info = client.sync(client.scheduler.identity, n_workers=-1)
    return dict(info.get("workers") or {})


def check_cluster(client: Any, plan: ClusterPlan) -> None:
    """Every node and the merger have a worker to run on, or a clear error."""
    have: set[str] = set()
    for w in cluster_workers(client).values():
        have |= set(w.get("resources", {}))
    need = {"merger"} | {j.node for j in plan.jobs}
    if missing := sorted(need - have):
        raise ConfigError(
            f"no Dask worker offers {', '.join(missing)}: start one per node with "
            "`dask worker SCHEDULER --name NODE --resources NODE=1` and one with "
            "`--resources merger=1` (docs/scale-out.md)"
        )


def run_observation(
    client: Any,
    plan: ClusterPlan,
    *,
    stop_when: Callable[[], bool] | None = None,
    on_ready: Callable[[], None] | None = None,
    on_status: Callable[[dict], None] | None = None,
    kills: Sequence[Kill] = (),
    stop_event: threading.Event | None = None,
    live_report: Callable[[Callable[[], dict]], None] | None = None,
    tick_s: float = 0.25,
    finish_timeout_s: float = 60.0,
) -> dict:
    """Runs the observation to its end; returns the report. ``on_ready`` is called once
    every node is capturing (the demo starts its simulator then); ``stop_when()``
    true, ``stop_event`` set or the duration passed ends it. ``live_report`` (the
    metrics board's ``watch``, cli/ops.py) is given the merger's status as it runs:
    per node metrics (ops/counters.py ``_cluster``)."""
    from distributed import Event

    check_cluster(client, plan)
    merger = MergerHandle(client, plan)
    stop = Event(plan.jobs[0].stop, client=client)
    futures: dict[str, Any] = {}
    attempts: dict[str, int] = {}

    def submit(job: NodeJob) -> None:
        attempts[job.node] = attempts.get(job.node, 0) + 1
        key = f"voltstream-{plan.name}-{job.node}-{attempts[job.node]}"
        futures[job.node] = client.submit(run_node, job, resources={job.node: 1}, pure=False,
                                          key=key)  # fmt: skip

    for job in plan.jobs:
        submit(job)
    t0 = time.monotonic()
    duration = max(j.duration_s for j in plan.jobs)
    ready = False
    results: dict[str, Any] = {}
    errors: dict[str, str] = {}
    seen = _node_workers(client)  # node -> worker address; a restart changes it
    status: dict = {}
    if live_report is not None:
        live_report(lambda: {"cluster": status})
    last_status = 0.0
    stopped_at: float | None = None
    absent_since: dict[str, float] = {}  # node -> when its worker was last seen gone
    while len(results) + len(errors) < len(plan.jobs):
        now = time.monotonic()
        if stopped_at is None and (
            now - t0 >= duration
            or (stop_event is not None and stop_event.is_set())
            or (stop_when is not None and ready and stop_when())
        ):
            stop.set()
            stopped_at = now
        if stopped_at is not None:
            # A node whose worker is gone for good (its nanny killed too, its host
            # down) cannot end its task: after the stop it is reported lost, and
            # the observation does not wait for it.
            for node in set(futures) - set(results) - set(errors) - set(seen):
                if now - max(stopped_at, absent_since.get(node, now)) >= LOST_AFTER_S:
                    errors[node] = (f"lost: its worker left the cluster and no worker with "
                                    f"resource {node} came back")  # fmt: skip
                    futures[node].cancel()
        if stopped_at is not None and now - stopped_at > finish_timeout_s:
            for node in set(futures) - set(results) - set(errors):
                errors[node] = f"did not end within {finish_timeout_s:.0f} s of the stop"
                futures[node].cancel()
            break
        for node, fut in list(futures.items()):
            if node in results or node in errors or not fut.done():
                continue
            try:
                results[node] = fut.result()
            except Exception as e:  # KilledWorker, or the node's own error
                job = next(j for j in plan.jobs if j.node == node)
                if type(e).__name__ == "KilledWorker" and stopped_at is None:
                    log.warning("cluster: %s's task was given up by the scheduler: "
                                "submitting it again", node)  # fmt: skip
                    submit(job)
                else:
                    errors[node] = f"{type(e).__name__}: {e}"
                    log.error("cluster: %s failed: %s", node, errors[node])
        workers = _node_workers(client)
        for node, addr in seen.items():
            if workers.get(node) != addr:  # gone, or gone and back (a nanny's restart)
                log.warning("cluster: %s's worker left the cluster; its rows are not "
                            "waited for until it rejoins", node)  # fmt: skip
                merger.call("gone", node, addr)
        seen = {j.node: workers[j.node] for j in plan.jobs if j.node in workers}
        for j in plan.jobs:
            if j.node in seen:
                absent_since.pop(j.node, None)
            else:
                absent_since.setdefault(j.node, now)
        for k in kills:
            if k.done_at is None and now - t0 >= k.at_s and ready:
                k.pid = _kill_worker(client, workers.get(k.node), k.node)
                k.done_at = now - t0
        merger.call("tick")
        if now - last_status >= 1.0 or not ready:
            status = merger.call("status")
            last_status = now
            if on_status is not None:
                on_status(status)
            if not ready and len(status.get("ready", [])) >= len(plan.jobs):
                ready = True
                t0 = time.monotonic()  # durations and kills count from the data's start
                if on_ready is not None:
                    on_ready()
        time.sleep(tick_s)
    merge = merger.call("finish")
    merge["merger_restarts"] = merger.restarts
    if live_report is not None:
        live_report(lambda: {"cluster": merge})
    return _report(plan, merge, results, errors, kills, attempts)


class MergerHandle:
    """The merger actor, started again (on the worker with the ``merger`` resource,
    which its nanny restarts) when its worker dies: the new actor reopens the archive
    on disk and goes on after its last row; the nodes find it through the Dask
    ``Variable`` and resend the rows they hold (node.py ``RESEND_ROWS``)."""

    MAX_RESTARTS = 5

    def __init__(self, client: Any, plan: ClusterPlan) -> None:
        from distributed import Variable

        self.client, self.plan = client, plan
        self.variable = Variable(plan.jobs[0].merger, client=client)
        self.restarts = 0
        self.actor = self._start(resume=False)

    def _start(self, resume: bool) -> Any:
        key = f"voltstream-merger-{self.plan.name}-{self.restarts}"
        actor = self.client.submit(Merger, self.plan.merge, resume, actor=True, key=key,
                                   resources={"merger": 1}).result(timeout=120)  # fmt: skip
        self.variable.set(actor)
        return actor

    def call(self, method: str, *args: Any) -> Any:
        try:
            return getattr(self.actor, method)(*args).result(timeout=60)
        except Exception as e:
            if self.restarts >= self.MAX_RESTARTS:
                raise
            log.error("cluster: the merger is lost (%s: %s); starting it again on the "
                      "archive on disk", type(e).__name__, e)  # fmt: skip
            self.restarts += 1
            self.actor = self._start(resume=True)
            return getattr(self.actor, method)(*args).result(timeout=60)


def _node_workers(client: Any) -> dict[str, str]:
    """Worker address by name, of the workers now in the cluster."""
    return {str(w.get("name")): addr for addr, w in cluster_workers(client).items()}


def _kill_worker(client: Any, addr: str | None, node: str) -> int | None:
    if addr is None:
        log.warning("cluster: cannot kill %s: its worker is not in the cluster", node)
        return None
    pid = int(client.run(os.getpid, workers=[addr])[addr])
    log.warning("cluster: killing %s's worker (pid %d) with SIGKILL", node, pid)
    os.kill(pid, signal.SIGKILL)
    return pid


def _report(
    plan: ClusterPlan,
    merge: dict,
    results: dict,
    errors: dict,
    kills: Sequence[Kill],
    attempts: dict,
) -> dict:
    """One report: the merge's counters, every node's (its task's report and what the
    merger last heard from it), and totals of the capture counters over the nodes."""
    totals: dict[str, int] = {}
    nodes = {}
    for job in plan.jobs:
        r = results.get(job.node)
        capture = (r or {}).get("capture") or {}
        for key, v in (capture.get("totals") or {}).items():
            totals[key] = totals.get(key, 0) + int(v)
        nodes[job.node] = {
            "source": job.source,
            "freq_mhz": job.obs.freq_mhz,
            "nchan": job.obs.nchan,
            "task": r,
            "error": errors.get(job.node),
            "submissions": attempts.get(job.node, 0),
            "merger": merge["nodes"].get(job.node, {}),
        }
    return {
        "observation": plan.name,
        "output": plan.merge.output,
        "nchan": plan.merge.band.nchan,
        "tsub_s": plan.merge.settings.tsub_s,
        "merge": {k: v for k, v in merge.items() if k != "nodes"},
        "nodes": nodes,
        "totals": totals,
        "kills": [{"node": k.node, "at_s": k.done_at, "pid": k.pid} for k in kills],
    }
