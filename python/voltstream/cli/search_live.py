"""`voltstream search --listen HOST:PORT`: capture, filterbank and single-pulse search of
a live stream in one process (pipeline/live_search.py, docs/search.md "Live search")."""

from __future__ import annotations

import argparse
import json
import logging
import sys
from typing import Any

log = logging.getLogger("voltstream.cli.search")


def search_live(args: argparse.Namespace, cand_path: str) -> Any:
    from voltstream.cli.common import (
        _capture_format,
        _capture_settings,
        _now_mjd,
        _progress,
        _stop_event,
        watcher,
    )
    from voltstream.cli.dump import check_dump_options
    from voltstream.cli.search_options import LIVE_GULP_S, search_device, settings_from
    from voltstream.cli.stream_options import live_real
    from voltstream.pipeline.live import LiveReader
    from voltstream.pipeline.live_search import (
        CandidateFile,
        make_stream_search,
        on_chunk_recorder,
        search_rows,
    )
    from voltstream.pipeline.stream_search import ArrivalLog
    from voltstream.search.filterbank import FilterbankPlan, FilterbankSettings

    fmt = _capture_format(args)
    mjd, sec = _now_mjd()
    obs = fmt.observation(start_mjd=mjd, start_sec=sec)
    arrivals = ArrivalLog()
    board = watcher(args)
    state: dict[str, Any] = {}
    capture = _capture_settings(args, args.listen)
    dumps = None  # --ring-seconds: the voltage ring in front of the reader (cli/search_dumps.py)
    if check_dump_options(args):
        from voltstream.cli.search_dumps import SearchDumps

        dumps = SearchDumps(args, fmt, capture)
        capture = dumps.settings

    def live_report(so_far: Any) -> None:  # the capture's report, and the search's
        def snapshot() -> dict:
            out = dict(so_far())
            if "search" in state:
                out["search"] = state["search"].report.counters()
            if dumps is not None:
                out["dumps"] = dumps.as_dict()
            return out

        if board is not None:
            board(snapshot)

    live = LiveReader(fmt, capture, args.duration, obs, idle_timeout_s=args.idle_timeout,
                      stop_event=_stop_event(args), live_report=live_report,
                      on_chunk=on_chunk_recorder(arrivals, obs.tsamp_s),
                      tap=None if dumps is None else dumps.ring.around)  # fmt: skip
    reader, obs = live_real(fmt, live, obs, "cpu")
    nbits = 8
    fb_settings = FilterbankSettings(args.fine_channels, args.tsamp, "I", nbits)
    plan = FilterbankPlan(obs, fb_settings)  # every option checked before the capture
    settings = settings_from(args, plan.tsamp_s)
    settings.check()
    device = search_device(args)
    gulp_s = args.gulp if args.gulp is not None else LIVE_GULP_S
    if dumps is not None:
        dumps.check(args.dm_max, gulp_s)
    writer = None
    if args.filterbank:
        from voltstream.pipeline.filterbank import open_writer

        fil_format = "psrfits" if args.filterbank.lower().endswith((".fits", ".sf")) else "sigproc"
        writer = open_writer(args.filterbank, fil_format, plan,
                             "voltstream " + " ".join(sys.argv[1:]))  # fmt: skip
    cands = CandidateFile(cand_path)
    # The search (and its engine: kernels compiled, plan made) before the socket opens.
    search = make_stream_search(plan, settings, gulp_s, cands, device, arrivals,
                                None if dumps is None else dumps.add)  # fmt: skip
    fb_engine = None  # the filterbank: on the search's device (the NumPy reference on the CPU)
    if device == "gpu":
        from voltstream.search.gpu_filterbank import GpuFilterbank

        fb_engine = GpuFilterbank(plan)
    state["search"] = search
    try:
        if dumps is not None:
            dumps.start(plan)
        live.start()
        log.info("search: listening on %s", args.listen)
        with _progress(args, "search", None, "samples") as update:
            search_rows(reader, plan, search, engine=fb_engine, writer=writer, progress=update)
    finally:
        cands.close()
        if writer is not None:
            writer.close()
        if dumps is not None:
            dumps.close()  # every candidate's dump written before the report
    rep = search.report
    if live.report is not None:
        from voltstream.cli.common import _nothing_received

        no_data = _nothing_received("search", live.report, fmt.name, None, args.report)
        if no_data is not None:
            return no_data
    for line in summary_lines(rep, args.top):
        print(line)
    print(f"search: {len(rep.candidates)} candidate(s) -> {cand_path}")
    out: dict[str, Any] = {"search": rep.as_dict(), "candidates_file": cand_path}
    if dumps is not None:
        for line in dumps.lines():
            print(line)
        out["dumps"] = dumps.as_dict()
    loss: Any = 0
    if live.report is not None:
        from voltstream.cli.common import _print_report

        out["capture"] = live.report.as_dict()
        loss = _print_report(live.report, None, live.report.engine)
    if board is not None:
        last = {"search": rep.counters()} | ({"dumps": out["dumps"]} if "dumps" in out else {})
        board(lambda: {**out.get("capture", {}), **last})
    if args.report:
        with open(args.report, "w") as f:
            json.dump(out, f, indent=2, default=str)
            f.write("\n")
    return loss


def summary_lines(rep: Any, top: int) -> list[str]:
    lat = rep.latency_percentiles()
    p50, p99 = lat["latency_p50_s"], lat["latency_p99_s"]
    lines = [
        f"search: {rep.samples} filterbank samples ({rep.lost_samples} lost) x {rep.nchans} "
        f"channels, tsamp {rep.tsamp_s * 1e6:g} us; {rep.gulps} gulp(s) of {rep.gulp_samples} "
        f"samples overlapping by {rep.overlap_samples}, on the {rep.device.upper()} in "
        f"{rep.search_seconds:.1f} s; {rep.searched_samples} arrival times searched",
        f"search: {rep.dm_trials} DM trials {rep.dm_min:g}..{rep.dm_max:g}, boxcars "
        f"1..{rep.boxcar_max} samples, threshold {rep.threshold:g}: {rep.giants} giants, "
        f"{len(rep.candidates)} candidate(s) (Gaussian noise: {rep.expected_false_alarms:.3g} "
        "S/N values above the threshold expected)",
        "search: detection latency "
        + ("(no candidate)" if p50 is None else f"p50 {p50:.3f} s, p99 {p99:.3f} s")
        + f"; the search lagged the stream by at most {rep.seconds_behind_max:.3f} s",
    ]
    for c in rep.candidates[:top]:
        lines.append(
            f"search:   S/N {c.snr:6.2f}  DM {c.dm:9.3f}  t {c.time_s:.6f} s "
            f"(sample {c.sample_index})  width {c.width_samples} samples  members {c.members}"
        )
    return lines
