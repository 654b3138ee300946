"""The cluster driver's view of the workers (cluster/driver.py `cluster_workers`): asked
of the scheduler each time, not read from the client's cache, which the client's own
periodic refresh (no workers in it) can overwrite between a fetch and its read in
distributed 2026.8. Read from there, a node whose worker runs looked gone now and
then (`voltstream.cluster.driver: node0's worker left the cluster` in the middle of a
bench/cluster.py run), and a row some nodes had sent was written without the others."""

from types import SimpleNamespace

import pytest
from distributed import Client, LocalCluster

from voltstream.cluster import driver
from voltstream.errors import ConfigError


@pytest.fixture(scope="module")
def client():
    resources = {"node0": 1, "merger": 1}
    with LocalCluster(n_workers=1, processes=False, dashboard_address=None,
                      resources=resources) as cluster, Client(cluster) as c:  # fmt: skip
        yield c


def test_workers_are_asked_of_the_scheduler_not_read_from_the_clients_cache(client):
    (addr,) = client.scheduler_info(n_workers=-1)["workers"]
    refresh = client._update_scheduler_info

    async def refresh_then_overwritten(n_workers=0):
        # The race made certain: the periodic refresh lands right after the fetch.
        await refresh(n_workers=n_workers)
        client._scheduler_identity = {"workers": {}}

    client._update_scheduler_info = refresh_then_overwritten
    try:
        assert client.scheduler_info(n_workers=-1)["workers"] == {}  # what the driver read
        assert driver._node_workers(client) == {"0": addr}
        driver.check_cluster(client, SimpleNamespace(jobs=[SimpleNamespace(node="node0")]))
    finally:
        client._update_scheduler_info = refresh


def test_a_node_without_a_worker_is_still_refused(client):
    plan = SimpleNamespace(jobs=[SimpleNamespace(node="node0"), SimpleNamespace(node="node7")])
    with pytest.raises(ConfigError, match="no Dask worker offers node7"):
        driver.check_cluster(client, plan)


def test_a_local_cluster_gives_each_node_its_own_gpu(tmp_path, monkeypatch):
    """On a machine of several GPUs each node's worker sees one of them, round robin,
    as each node host of a real cluster has its own (they all shared the first one);
    the merger sees what the driver sees."""
    import os

    from voltstream.cluster.local import ProcessCluster

    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3,5")
    with ProcessCluster(["node0", "node1", "node2"], tmp_path) as cluster:
        seen = cluster.client.run(os.getenv, "CUDA_VISIBLE_DEVICES")
        names = {a: w["name"] for a, w in cluster.client.scheduler_info()["workers"].items()}
    by_name = {names[a]: v for a, v in seen.items()}
    assert by_name == {"node0": "3", "node1": "5", "node2": "3", "merger": "3,5"}
