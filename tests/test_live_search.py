"""The live single-pulse search (pipeline/stream_search.py, pipeline/live_search.py,
`voltstream search --listen`): rows fed in any pieces give the file search's
candidates; the latency bookkeeping (each candidate's burst end, its arrival, the
write time); the arrival log; the CLI end to end over loopback (an FRB from the
simulator found at its DM and time, each candidate with its latency); its metrics;
bad options in one line."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import numpy as np
import pytest

from cli_process import run_cli
from loopback import free_bind, wait_bound
from sp_data import BURST, simulated
from voltstream.dsp.dedisperse import dispersion_delay_s
from voltstream.io.sigproc import SigprocWriter, read_filterbank
from voltstream.observation import Observation
from voltstream.ops.counters import samples as metric_samples
from voltstream.pipeline.live_search import arrival_of
from voltstream.pipeline.search import search_file
from voltstream.pipeline.stream_search import ArrivalLog, StreamSearch
from voltstream.search.candidates import read_candidates
from voltstream.search.filterbank import FilterbankPlan, FilterbankSettings
from voltstream.search.single_pulse import SearchSettings, delay_table

SETTINGS = SearchSettings(dm_min=400, dm_max=600, boxcar_max=64)


def _write_fil(path, data, tsamp):
    obs = Observation(nchan=data.shape[1], npol=1, freq_mhz=1400.0, bw_mhz=16.0,
                      tsamp_s=tsamp, nbit=32)  # fmt: skip
    w = SigprocWriter(path, obs, 1)
    w.write_row(data[:, None, :].astype(np.float32))
    w.close()
    return read_filterbank(path)


@pytest.fixture(scope="module")
def burst_fil(tmp_path_factory):
    """The simulator's burst (tests/sp_data.py) as a 32-bit .fil, read back."""
    data, _, tsamp = simulated("frb", seed=11, burst=BURST)
    return _write_fil(tmp_path_factory.mktemp("live") / "b.fil", data, tsamp)


def _stream(fil, gulp, arrival=None, pieces=(1, 7, 500, 3000), on_candidates=None):
    s = StreamSearch(fil.freqs_mhz, fil.tsamp_s, SETTINGS, gulp, "cpu", on_candidates, arrival)
    data = np.asarray(fil.data, dtype=np.float32)
    at, k = 0, 0
    while at < len(data):
        n = pieces[k % len(pieces)]
        s.feed(data[at : at + n])
        at, k = at + n, k + 1
    s.finish()
    return s


def test_rows_in_any_pieces_give_the_file_search_candidates(burst_fil, tmp_path):
    probe = StreamSearch(burst_fil.freqs_mhz, burst_fil.tsamp_s, SETTINGS, 64, "cpu")
    # Gulps that tile the searchable arrival times exactly: the file's plan, gulp for gulp.
    gulp = (burst_fil.nsamp - probe.sweep) // 3
    data = np.asarray(burst_fil.data[: 3 * gulp + probe.sweep], dtype=np.float32)
    fil = _write_fil(tmp_path / "t.fil", data, burst_fil.tsamp_s)
    ref = search_file(fil, SETTINGS, gulp_s=gulp * fil.tsamp_s)
    got = _stream(fil, gulp)
    assert ref.gulps == got.report.gulps == 3
    assert got.report.giants == ref.giants > 100
    assert [c.line() for c in got.report.candidates] == [c.line() for c in ref.candidates]
    top = got.report.candidates[0]
    assert abs(top.dm - 500) < 5 and top.snr > 20


def test_a_warm_up_leaves_the_search_as_it_was(burst_fil):
    """The GPU engine searches noise before the stream (its kernels compiled then, not
    on the first real gulp): it must count nothing and change no candidate. Checked
    with the reference engine, on which warm_up runs the same code path."""
    cold = _stream(burst_fil, 1000)
    warm = StreamSearch(burst_fil.freqs_mhz, burst_fil.tsamp_s, SETTINGS, 1000, "cpu")
    warm.warm_up()
    assert (warm.report.gulps, warm.report.samples, warm.report.giants) == (0, 0, 0)
    data = np.asarray(burst_fil.data, dtype=np.float32)
    warm.feed(data)
    warm.finish()
    assert [c.line() for c in warm.report.candidates] == [c.line() for c in cold.report.candidates]
    assert warm.report.gulps == cold.report.gulps


def test_the_last_gulp_is_searched_and_every_burst_reported_once(burst_fil):
    fil = burst_fil
    s = _stream(fil, 1000)  # gulps of 1000 and a remainder
    assert s.report.searched_samples == fil.nsamp - s.sweep
    strong = [c for c in s.report.candidates if c.snr > 10]
    assert len(strong) == 1 and abs(strong[0].dm - 500) < 5


def test_latency_is_the_write_time_less_the_arrival_of_the_burst_end(burst_fil):
    fil = burst_fil
    t0 = time.monotonic() - 100.0
    asked: list[int] = []

    def arrival(n):  # a stream received at 1000 samples a second, long ago
        asked.append(n)
        return t0 + n / 1000.0

    writes: list[tuple[float, list]] = []

    def on_candidates(cands):
        writes.append((time.monotonic(), cands))

    s = _stream(fil, 1500, arrival, on_candidates=on_candidates)
    assert s.report.latencies and len(s.report.latencies) == sum(len(c) for _, c in writes)
    low = float(fil.freqs_mhz.min())
    k = 0
    for wrote, cands in writes:
        for c in cands:
            lat = s.report.latencies[k]
            k += 1
            # The burst's end: its arrival at the top, its sweep to the lowest channel
            # at its DM (whole samples, as the search delays it), half its boxcar.
            sweep = dispersion_delay_s(c.dm, low, float(fil.freqs_mhz.max())) / fil.tsamp_s
            end = c.sample_index + int(np.rint(sweep)) + c.width_samples // 2
            assert lat["last_sample"] == end and end in asked
            expect = wrote - (t0 + end / 1000.0)
            assert expect <= lat["latency_s"] < expect + 0.5
    pct = s.report.latency_percentiles()
    lats = [x["latency_s"] for x in s.report.latencies]
    assert pct["latency_p50_s"] == pytest.approx(np.percentile(lats, 50))
    assert pct["latency_p99_s"] == pytest.approx(np.percentile(lats, 99))


def test_arrival_of_a_filterbank_sample_is_its_last_input_samples_chunk():
    obs = Observation(nchan=4, npol=2, freq_mhz=1400.0, bw_mhz=4.0, tsamp_s=1e-6)
    plan = FilterbankPlan(obs, FilterbankSettings(fine_channels=8, tsamp_s=32e-6))
    assert plan.span == 32 and plan.first_input == 0
    log = ArrivalLog()
    for k in range(1, 5):  # chunks of 100 input samples, received at 10, 20, 30, 40
        log.add(k * 100 * obs.tsamp_s, 10.0 * k)
    at = arrival_of(plan, log)
    assert at(0) == 10.0  # input samples 0..31
    assert at(2) == 10.0  # 64..95
    assert at(3) == 20.0  # 96..127: its last one came with the second chunk
    assert at(11) == 40.0  # 352..383
    assert at(12) is None  # 384..415: not all received
    assert log.at(0.0) == 10.0 and log.at(399.9e-6) == 40.0 and log.at(400e-6) is None


def test_search_metrics_come_from_the_report_section():
    section = {"samples": 100, "lost_samples": 2, "searched_samples": 90, "gulps": 3,
               "giants": 40, "n_candidates": 2, "search_seconds": 0.5,
               "seconds_behind_max": 0.2, "latency_p50_s": 0.7, "latency_p99_s": 1.1,
               "latency_max_s": 1.2}  # fmt: skip
    got = {(s.name, tuple(s.labels.items())): s.value for s in metric_samples({"search": section})}
    assert got[("voltstream_search_candidates_total", ())] == 2
    assert got[("voltstream_search_gulps_total", ())] == 3
    assert got[("voltstream_search_engine_seconds_total", ())] == 0.5
    assert got[("voltstream_search_latency_seconds", (("quantile", "0.99"),))] == 1.1
    assert not metric_samples({"search": {"latency_p50_s": None}})


# The stream: 32 x 0.5 MHz YNAO channels at 1400 MHz, 512 channels of 32 us, a burst
# at DM 500 (tests/test_search_cli.py's), sent slower than real time over loopback.
BAND = ["--format", "ynao", "--chan-bw", "0.5", "--freq", "1400"]
FB = ["--fine-channels", "16", "--tsamp", "3.2e-5"]
WIDTH = 256e-6


def test_cli_finds_a_simulated_frb_live_and_reports_its_latency(tmp_path):
    bind = free_bind()
    cand, rep = tmp_path / "live.cand", tmp_path / "live.json"
    fil = tmp_path / "live.fil"
    proc = subprocess.Popen(
        [sys.executable, "-m", "voltstream.cli", "search", "--listen", bind, *BAND, *FB,
         "--dm-min", "400", "--dm-max", "600", "--gulp", "0.1", "--device", "cpu",
         "--duration", "60", "--idle-timeout", "2", "--engine", "socket", "--no-status",
         "--candidates", str(cand), "--report", str(rep), "--filterbank", str(fil)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        wait_bound(bind)
        sent = run_cli("simulate", *BAND, "--duration", "0.3", "--signal", "frb", "--dm",
                       "500", "--width", str(WIDTH), "--fluence", "1.6", "--sefd", "10",
                       "--burst-times", "0.1,0.2", "--seed", "1", "--dest", bind,
                       "--rate", "0.1")  # fmt: skip
        assert sent.returncode == 0, sent.stderr
        out, err = proc.communicate(timeout=120)
    finally:
        proc.kill()
    assert proc.returncode == 0, err
    report = json.loads(rep.read_text())
    assert report["capture"]["lost"] == 0
    s = report["search"]
    assert s["gulps"] >= 3 and s["samples"] == read_filterbank(fil).nsamp
    cands = read_candidates(cand)
    strong = sorted((c for c in cands if c.snr > 10), key=lambda c: c.time_s)
    assert len(strong) == 2, cands
    freqs = read_filterbank(fil).freqs_mhz
    for c, t in zip(strong, (0.1, 0.2), strict=True):
        assert abs(c.dm - 500) < 5  # 1%
        top = t + dispersion_delay_s(500.0, float(freqs.max()), 1400.0)
        assert abs(c.time_s - top) < WIDTH
    lats = {round(x["time_s"], 6): x for x in s["latencies"]}
    for c in strong:
        lat = lats[round(c.time_s, 6)]
        sweep = delay_table(np.array([c.dm]), freqs, 3.2e-5, freqs.max()).max()
        assert lat["last_sample"] == c.sample_index + sweep + c.width_samples // 2
        assert 0 < lat["latency_s"] < 60
    assert s["latency_p99_s"] >= s["latency_p50_s"] > 0
    assert "detection latency p50" in out and "2 candidate(s)" not in err


@pytest.mark.parametrize(
    "argv, words",
    [
        (["x.fil", "--listen", "127.0.0.1:7000"], "not both"),
        ([], "not both or neither"),
        (["x.fil", "--fine-channels", "4"], "live stream"),
        (["--listen", "127.0.0.1:7000", "--dm-min", "5", "--dm-max", "1"], "above --dm-max"),
    ],
)
def test_bad_live_options_are_one_line(tmp_path, argv, words):
    r = run_cli("search", *argv)
    assert r.returncode == 2 and words in r.stderr and "Traceback" not in r.stderr, r.stderr


def test_rows_a_gpu_engine_still_holds_at_the_end_are_searched_too():
    """A GPU filterbank returns each block's rows a block late and the last ones from
    finish(): the tee between it and the search hands those on too (they were lost)."""
    from voltstream.pipeline.live_search import SearchTee

    class OneBlockLate:  # the GPU engine's contract, on host arrays
        held = None

        def feed(self, block, valid):
            out, self.held = self.held, (block[:, None, :], valid)
            return out if out is not None else (np.zeros((0, 1, 4)), np.zeros(0, bool))

        def finish(self):
            return self.held

    class Rows:
        got: list = []

        def feed(self, x, ok):
            self.got.append(x)

    blocks = [np.full((3, 4), k, np.float32) for k in range(4)]
    tee, search = SearchTee(OneBlockLate(), Rows()), Rows()
    tee.search = search
    for b in blocks:
        tee.feed(b, np.ones(3, bool))
    tee.finish()
    assert np.array_equal(np.concatenate(search.got), np.concatenate(blocks))
