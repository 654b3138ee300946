"""`voltstream search --listen ... --ring-seconds` end to end over loopback, for the CPU
test (tests/test_search_dumps.py) and the GPU one (tests/gpu/test_search_dumps_gpu.py):
a real search process fed two simulated FRBs by `voltstream simulate --dest`, and the
checks that each candidate's dump holds its burst where the candidate says it is."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from cli_process import reaped, run_cli
from dump_checks import dedispersed_peak_s, read_dump
from loopback import free_bind, wait_bound
from voltstream.dsp.dedisperse import dispersion_delay_s
from voltstream.formats import make_format
from voltstream.search.filterbank import FilterbankPlan, FilterbankSettings

# 32 x 0.5 MHz YNAO channels at 1400 MHz (1392 .. 1408), a filterbank of 512 channels
# of 32 us, bursts at DM 500 (tests/test_live_search.py's stream), sent at a fifth of
# its rate over loopback.
BAND = ["--format", "ynao", "--chan-bw", "0.5", "--freq", "1400"]
FB = ["--fine-channels", "16", "--tsamp", "3.2e-5"]
BURSTS = (0.1, 0.2)  # at the band's centre, 1400 MHz
MARGIN = 0.02
TSAMP = 2e-6
PLAN = FilterbankPlan(make_format("ynao", chan_bw_mhz=0.5, freq_mhz=1400.0).observation(),
                      FilterbankSettings(16, 3.2e-5))  # fmt: skip


def search_with_dumps(tmp: Path, device: str, *extra: str) -> tuple[dict, str, str]:
    """The search's report, stdout and stderr once the stream has ended; its dumps in
    ``tmp``."""
    bind, rep = free_bind(), tmp / "search.json"
    proc = subprocess.Popen(
        [sys.executable, "-m", "voltstream.cli", "search", "--listen", bind, *BAND, *FB,
         "--dm-min", "400", "--dm-max", "600", "--gulp", "0.1", "--device", device,
         "--duration", "60", "--idle-timeout", "2", "--engine", "socket", "--no-status",
         "--candidates", str(tmp / "live.cand"), "--report", str(rep),
         "--ring-seconds", "0.5", "--dump-dir", str(tmp), "--dump-margin", str(MARGIN),
         *extra],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    with reaped(proc):
        wait_bound(bind)
        times = ",".join(str(t) for t in BURSTS)
        sent = run_cli("simulate", *BAND, "--duration", "0.3", "--signal", "frb", "--dm",
                       "500", "--width", "256e-6", "--fluence", "1.6", "--sefd", "10",
                       "--burst-times", times, "--seed", "1", "--dest", bind,
                       "--rate", "0.1")  # fmt: skip
        assert sent.returncode == 0, sent.stderr
        out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    return json.loads(rep.read_text()), out, err


def check_burst_dumps(report: dict) -> None:
    """Each burst's candidate (S/N >= 10) was dumped whole: its window runs from the
    candidate's arrival at the top of the band, less the margin, to its arrival at the
    bottom plus the margin, and the dump, dedispersed at the candidate's DM, peaks at the
    burst's time; every dump written, none lost."""
    d = report["dumps"]
    c = d["candidates"]
    assert c["triggers"] == c["dumped"] == len(BURSTS), c
    assert (d["dumps"], d["written"], d["lost_samples"], d["partial"]) == (2, 2, 0, 0), d
    dumps = {x["id"]: x for x in d["list"]}
    top_chan, (f_lo, f_hi) = float(PLAN.chan_freqs_mhz.max()), (1392.0, 1408.0)
    for rec, burst in zip(sorted(c["list"], key=lambda r: r["time_s"]), BURSTS, strict=True):
        assert rec["outcome"] == "dumped" and not rec["partial"], rec
        x = dumps[rec["dump"]]
        # The candidate's filterbank sample's middle, at the top channel: to the band's top.
        t = rec["time_s"] + PLAN.tsamp_s / 2
        top = t - dispersion_delay_s(rec["dm"], top_chan, f_hi)
        assert abs(x["start_s"] - (top - MARGIN)) <= TSAMP, (x, top)
        bottom = top + dispersion_delay_s(rec["dm"], f_lo, f_hi)
        assert abs(x["end_s"] - (bottom + MARGIN)) <= TSAMP, (x, bottom)
        _, samples, obs = read_dump(x["path"])
        assert len(samples) == x["samples"] > 0
        peak = dedispersed_peak_s(samples, x["start_s"], rec["dm"], obs.chan_freqs_mhz,
                                  1400.0, TSAMP)  # fmt: skip
        assert abs(peak - burst) < 3e-4, (peak, burst)  # about a burst width (256 us)
