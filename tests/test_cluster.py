"""Many nodes, one observation, for real (issue 16): a Dask scheduler, four node workers
(each in its own network namespace with a veth when root, as CI is; else on loopback)
and a merger, as `dask scheduler` / `dask worker` processes; one band of 4 x 32
channels with a pulsar, split by `voltstream simulate --subbands 4` and sent over UDP.

The merged archive must be the fold of the whole band on one machine (the NumPy
reference, from the same samples written to files), every node's counters exact; a
node killed mid-run leaves its channels at weight 0 from the kill to its rejoining
and the rest unchanged; `voltstream fold --scheduler` folds files where they lie.
"""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from cli_process import reaped
from voltstream.cli.cluster import cluster_summary, demo_plan, run_simulated
from voltstream.cluster.driver import Kill
from voltstream.cluster.local import local_nodes
from voltstream.io.dada import open_dada
from voltstream.io.polyco import ConstantPeriod
from voltstream.io.psrfits import read_psrfits, write_psrfits
from voltstream.pipeline.fold import fold_file

#: Nodes killed and rejoined on a schedule of wall seconds: run alone (make py-test's
#: serial pass), where another worker's load cannot move a kill past the rows it is
#: meant to cost (seen on a fresh clone with two workers: the demo's node came back
#: before its first row was due).
pytestmark = pytest.mark.serial

NAMES = [f"node{i}" for i in range(4)]
DURATION, TSUB, SEED = 1.5, 0.125, 7
NCH = 32


class WholeBand:
    """The four subband files side by side: the whole band as one machine reads it."""

    def __init__(self, paths, obs):
        self.readers = [open_dada(p) for p in paths]
        self.obs = obs

    def read_blocks(self, nsamp):
        for parts in zip(*(r.read_blocks(nsamp) for r in self.readers), strict=True):
            yield np.concatenate(parts, axis=1)


@pytest.fixture(scope="module")
def nodes(tmp_path_factory):
    with local_nodes(NAMES, tmp_path_factory.mktemp("dask")) as n:
        yield n


def reference(tmp: Path, plan, sim_cmd) -> object:
    """The same samples written to files (the simulator is deterministic), folded as
    one band on this machine with the plan's settings, through PSRFITS as the merged
    archive is (the same int16 quantisation)."""
    cmd = sim_cmd[: sim_cmd.index("--dest")] + ["--output", str(tmp / "ref.dada")]
    subprocess.run(cmd, check=True, capture_output=True, timeout=300)
    paths = [tmp / f"ref.sb{i}.dada" for i in range(4)]
    arch = fold_file(WholeBand(paths, plan.merge.band), plan.merge.settings)
    write_psrfits(tmp / "ref.fits", arch)
    return read_psrfits(tmp / "ref.fits")


def same_profiles(got, ref, rows, chans):
    """Equal to the last bit PSRFITS keeps (int16 of each profile's span), weights too."""
    g, r = got.data[np.ix_(rows, [0], chans)], ref.data[np.ix_(rows, [0], chans)]
    span = r.max(axis=-1, keepdims=True) - r.min(axis=-1, keepdims=True)
    assert np.all(np.abs(g - r) <= 2 * span / 65535 + 1e-12)
    np.testing.assert_allclose(got.weights[np.ix_(rows, chans)],
                               ref.weights[np.ix_(rows, chans)], rtol=1e-6)  # fmt: skip


def observe(nodes, tmp, kills=()):
    plan, sim = demo_plan(NAMES, nodes.dests, tmp / "merged.fits", TSUB, DURATION, seed=SEED)
    report, rc = run_simulated(nodes.cluster.client, plan, sim + ["--rate", "0.06"], kills)
    for line in cluster_summary(report):  # in the test's output when it fails
        print(line)
    print(json.dumps(report["merge"], default=str))
    assert rc == 0
    return plan, sim, report


def test_four_nodes_merge_into_the_whole_band_fold_with_every_counter_exact(nodes, tmp_path):
    plan, sim, report = observe(nodes, tmp_path)
    ref = reference(tmp_path, plan, sim)
    got = read_psrfits(tmp_path / "merged.fits")
    assert got.nsub == ref.nsub == report["merge"]["rows_written"]
    np.testing.assert_allclose(got.offs_sub_s, ref.offs_sub_s, rtol=1e-9)
    same_profiles(got, ref, np.arange(ref.nsub), np.arange(4 * NCH))
    m = report["merge"]
    assert m["rows_complete"] == ref.nsub and m["rows_by_rule"] == {"complete": ref.nsub}
    assert (m["late"], m["duplicate"], m["malformed"]) == (0, 0, 0)
    packets = round(DURATION / plan.merge.band.tsamp_s) // 64  # 64 samples per YNAO packet
    for name, r in report["nodes"].items():
        t = r["task"]
        tot = t["capture"]["totals"]
        assert tot["received"] == packets, name
        assert {k: tot[k] for k in ("missing", "late", "duplicate", "dropped", "malformed",
                                    "foreign", "invalid")} == dict.fromkeys(
            ("missing", "late", "duplicate", "dropped", "malformed", "foreign", "invalid"), 0
        )  # fmt: skip
        assert t["capture"]["lost"] == 0 and t["send_errors"] == 0
        assert t["fold"]["samples_read"] == packets * 64
        assert t["fold"]["samples_lost"] == t["fold"]["samples_late"] == 0
        assert r["merger"]["rows_missing"] == 0 and r["merger"]["restarts"] == 0
        i = NAMES.index(name)  # its rows: those where its channels have samples
        has = int(np.count_nonzero(ref.weights[:, i * NCH : (i + 1) * NCH].any(axis=1)))
        assert t["rows_sent"] == r["merger"]["rows_received"] == has
    assert report["totals"]["received"] == 4 * packets


def test_a_node_killed_mid_run_is_weighted_zero_until_it_rejoins(nodes, tmp_path):
    plan, sim, report = observe(nodes, tmp_path, kills=[Kill("node2", 2.0)])
    ref = reference(tmp_path, plan, sim)
    got = read_psrfits(tmp_path / "merged.fits")
    assert got.nsub == ref.nsub
    node2 = report["nodes"]["node2"]["merger"]
    assert report["kills"][0]["node"] == "node2" and report["kills"][0]["pid"]
    lost = [k for a, b in node2["missing_rows"] for k in range(a, b + 1)]
    assert lost and node2["rows_missing"] == len(lost)
    assert node2["seconds_lost"] == pytest.approx(len(lost) * TSUB)
    assert node2["restarts"] >= 1 and node2["first_rows"][-1] == lost[-1] + 1
    kept = [k for k in range(ref.nsub) if k not in lost]
    chans2 = np.arange(2 * NCH, 3 * NCH)
    others = np.setdiff1d(np.arange(4 * NCH), chans2)
    assert np.all(got.weights[np.ix_(lost, chans2)] == 0)
    same_profiles(got, ref, np.arange(ref.nsub), others)  # the other nodes: untouched
    same_profiles(got, ref, np.array(kept), chans2)  # node2 before the kill and after rejoining
    for name in ("node0", "node1", "node3"):
        assert report["nodes"][name]["task"]["capture"]["lost"] == 0
        assert report["nodes"][name]["merger"]["rows_missing"] == 0


def test_fold_scheduler_folds_each_subband_file_where_it_lies(nodes, tmp_path):
    plan, sim = demo_plan(NAMES, nodes.dests, tmp_path / "x.fits", TSUB, 0.5, seed=SEED)
    cmd = sim[: sim.index("--dest")] + ["--output", str(tmp_path / "scan.dada")]
    subprocess.run(cmd, check=True, capture_output=True, timeout=300)
    addr = nodes.cluster.client.scheduler.address
    subs = [f"--subband=node{i}={tmp_path}/scan.sb{i}.dada" for i in range(4)]
    r = subprocess.run(
        [sys.executable, "-m", "voltstream.cli", "fold", "--scheduler", addr, *subs,
         "--dm", "26.833", "--period", "0.0333", "--nbin", "128", "--tsub", str(TSUB),
         "-o", str(tmp_path / "files.fits"), "--report", str(tmp_path / "files.json")],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert r.returncode == 0, r.stdout + r.stderr
    got = read_psrfits(tmp_path / "files.fits")
    paths = [tmp_path / f"scan.sb{i}.dada" for i in range(4)]
    band = open_dada(paths[0]).obs
    whole = type(band)(4 * NCH, band.npol, float(np.mean([open_dada(p).obs.freq_mhz
                       for p in paths])), 4 * band.bw_mhz, band.tsamp_s, band.start_mjd,
                       band.start_sec)  # fmt: skip
    predictor = ConstantPeriod(0.0333, whole.start_mjd, whole.start_sec)
    settings = replace(plan.merge.settings, predictor=predictor)
    write_psrfits(tmp_path / "ref.fits", fold_file(WholeBand(paths, whole), settings))
    ref = read_psrfits(tmp_path / "ref.fits")
    assert got.nsub == ref.nsub
    same_profiles(got, ref, np.arange(ref.nsub), np.arange(4 * NCH))
    assert f"{ref.nsub} rows written ({ref.nsub} with every node" in r.stdout
    assert f"{open_dada(paths[0]).nsamp} samples read" in r.stdout  # each node: its whole file


def test_a_killed_merger_leaves_a_whole_archive_and_a_new_one_goes_on(nodes, tmp_path):
    """kill -9 of the merger's worker: the archive on disk is whole (every row it
    wrote), a new merger reopens it and goes on, the nodes resend the rows it lost."""
    plan, sim, report = observe(nodes, tmp_path, kills=[Kill("merger", 2.5)])
    ref = reference(tmp_path, plan, sim)
    got = read_psrfits(tmp_path / "merged.fits")
    assert report["merge"]["merger_restarts"] == 1
    assert got.nsub == ref.nsub
    np.testing.assert_array_equal(got.offs_sub_s, ref.offs_sub_s)
    # Every row either whole and equal to the one-machine fold, or (lost with the
    # merger, none resent in time) weighted zero: never wrong.
    whole = [k for k in range(ref.nsub) if np.all(got.weights[k] == ref.weights[k])]
    empty = [k for k in range(ref.nsub) if not got.weights[k].any()]
    assert sorted(whole + empty) == list(range(ref.nsub)) and len(whole) >= ref.nsub - 1
    same_profiles(got, ref, np.array(whole), np.arange(4 * NCH))


def test_voltstream_demo_nodes_kills_a_node_and_says_so(tmp_path):
    """The demo as a user runs it: a 4 x 32-channel archive, a plot, a report naming
    the killed node and the rows it lost; exit 0 (the pulsar found, no other loss)."""
    out = tmp_path / "demo"
    r = subprocess.run(
        [sys.executable, "-m", "voltstream.cli", "demo", "--nodes", "4", "--duration", "2",
         "--kill-node", "2", "--at", "1.5", "--output", str(out)],
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert r.returncode == 0, r.stdout + r.stderr
    assert "demo: OK: node2 killed, node2 weighted zero while away" in r.stdout
    arch = read_psrfits(out / "demo-nodes.fits")
    assert arch.data.shape[2] == 4 * NCH and (out / "demo-nodes.png").stat().st_size > 0
    report = json.loads((out / "demo-nodes-report.json").read_text())
    node2 = report["nodes"]["node2"]["merger"]
    assert node2["rows_missing"] > 0 and node2["restarts"] >= 1
    lost = [k for a, b in node2["missing_rows"] for k in range(a, b + 1)]
    assert np.all(arch.weights[np.ix_(lost, range(2 * NCH, 3 * NCH))] == 0)
    assert "node2 (" in r.stdout and "weighted zero" in r.stdout


def test_fold_scheduler_live_subbands_as_on_real_hosts(nodes, tmp_path):
    """`voltstream fold --scheduler ... --subband NODE=HOST:PORT`, the real-hosts
    command: the nodes capture until --duration, the archive is the whole band's."""
    addr = nodes.cluster.client.scheduler.address
    subs = [f"--subband=node{i}={d}" for i, d in enumerate(nodes.dests)]
    fold = subprocess.Popen(
        [sys.executable, "-m", "voltstream.cli", "fold", "--scheduler", addr, *subs,
         "--format", "ynao", "--chan-bw", "0.0625", "--freq", "1420", "--duration", "12",
         "--dm", "26.833", "--period", "0.0333", "--nbin", "128", "--tsub", str(TSUB),
         "-o", str(tmp_path / "live.fits"), "--report", str(tmp_path / "live.json")],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    with reaped(fold):
        lines = []
        for line in fold.stdout:  # type: ignore[union-attr]
            lines.append(line)
            if "every node is capturing" in line:
                break
        _, sim = demo_plan(NAMES, nodes.dests, tmp_path / "x.fits", TSUB, 1.0, seed=SEED)
        subprocess.run(sim + ["--rate", "0.06"], check=True, capture_output=True, timeout=120)
        out, _ = fold.communicate(timeout=120)
    assert fold.returncode == 0, "".join(lines) + (out or "")
    report = json.loads((tmp_path / "live.json").read_text())
    assert report["merge"]["rows_written"] == report["merge"]["rows_complete"] > 0
    for r in report["nodes"].values():
        assert r["task"]["capture"]["lost"] == 0 and r["task"]["capture"]["totals"]["received"]
    arch = read_psrfits(tmp_path / "live.fits")
    assert arch.data.shape[2] == 4 * NCH and arch.nsub == report["merge"]["rows_written"]
