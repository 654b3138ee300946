"""`voltstream status HOST:PORT`: a live terminal view of a running verb.

It polls the verb's ``/status.json`` (ops/server.py) and draws, with rich, what
the counters table (ops/counters.py) makes of the report: the same names and labels
as the Prometheus metrics, so what an operator reads here is what Grafana plots.
Rates are differences between two polls over the time between them (the run's own
clock, ``seconds``, so a slow poll does not inflate them). A loss counter (missing,
late, dropped, invalid, malformed) that rose since the last poll is red and listed
under warnings. rich draws plain ANSI text: it works over ssh and in tmux.
"""

from __future__ import annotations

import json
import os
import sys
import time
import urllib.error
import urllib.request
from collections import defaultdict
from typing import Any

from rich.console import Console, Group
from rich.live import Live
from rich.table import Table
from rich.text import Text

from voltstream.errors import CaptureError
from voltstream.ops.counters import LOSS_KINDS, Sample, run_samples, samples

Key = tuple[str, tuple[tuple[str, str], ...]]


def fetch_status(address: str, timeout_s: float = 2.0) -> dict[str, Any]:
    """The status a verb serves on ``address``; CaptureError when nothing answers."""
    url = f"http://{address}/status.json"
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as r:
            return dict(json.load(r))
    except (urllib.error.URLError, OSError, ValueError) as e:
        why = getattr(e, "reason", e)
        raise CaptureError(
            f"nothing serves voltstream status at {address} ({why}): is a verb running "
            f"there with --metrics {address}?"
        ) from None


def scrape_metrics(address: str, timeout_s: float = 5.0) -> dict[Key, float]:
    """Every sample ``address``/metrics serves, parsed by prometheus-client:
    (sample name, sorted labels) -> value. For tests and plots of a live run."""
    from prometheus_client.parser import text_string_to_metric_families

    with urllib.request.urlopen(f"http://{address}/metrics", timeout=timeout_s) as r:
        text = r.read().decode()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for fam in text_string_to_metric_families(text)
        for s in fam.samples
    }


def _key(s: Sample) -> Key:
    return s.name, tuple(sorted(s.labels.items()))


class Frame:
    """Two polls of a status: the values now and their rates since the last poll."""

    def __init__(self, status: dict[str, Any], before: Frame | None = None) -> None:
        self.status = status
        self.samples = [s for s in samples(status.get("report") or {}) if s.kind != "info"]
        self.values = {_key(s): float(s.value) for s in self.samples}
        self.rates: dict[Key, float] = {}
        self.rising_losses: list[str] = []
        if before is not None:
            dt = float(status.get("seconds", 0)) - float(before.status.get("seconds", 0))
            if dt > 0:
                for k, v in self.values.items():
                    if k in before.values and k[0].endswith("_total"):
                        self.rates[k] = (v - before.values[k]) / dt
            for s in self.samples:
                k = _key(s)
                if s.labels.get("kind") in LOSS_KINDS and self.rates.get(k, 0) > 0:
                    grew = int(self.values[k] - before.values[k])
                    self.rising_losses.append(f"{s.labels['kind']} +{grew} ({_where(s)})")

    def total(self, name: str, **labels: str) -> float | None:
        """The sum of a metric over the samples that have ``labels``."""
        found = [v for (n, lab), v in self.values.items()
                 if n == name and all((k, x) in lab for k, x in labels.items())]  # fmt: skip
        return sum(found) if found else None

    def rate(self, name: str, **labels: str) -> float | None:
        found = [v for (n, lab), v in self.rates.items()
                 if n == name and all((k, x) in lab for k, x in labels.items())]  # fmt: skip
        return sum(found) if found else None


def _where(s: Sample) -> str:
    rest = {k: v for k, v in s.labels.items() if k not in ("kind", "label") and v}
    short = s.name.removeprefix("voltstream_").removesuffix("_total")
    return short + ("" if not rest else " " + " ".join(f"{k}={v}" for k, v in rest.items()))


def _num(v: float | None, unit: str = "", scale: float = 1.0, digits: int = 2) -> str:
    return "-" if v is None else f"{v * scale:,.{digits}f}{unit}"


def summary(frame: Frame, address: str) -> Table:
    """Rates in and out, pool, GPU, time running."""
    st = frame.status
    t = Table.grid(padding=(0, 2))
    t.add_column(style="bold")
    t.add_column()
    state = "finished" if st.get("finished") else "running"
    t.add_row("run", f"voltstream {st.get('verb')} at {address}, {state}, "
              f"{float(st.get('seconds', 0)):.1f} s")  # fmt: skip
    cfg = st.get("config") or {}
    if cfg:
        t.add_row("config", " ".join(f"{k}={v}" for k, v in cfg.items()))
    f = frame
    bytes_in = f.rate("voltstream_capture_bytes_total")
    pkts_in = f.rate("voltstream_capture_packets_total", kind="received")
    t.add_row("in", f"{_num(bytes_in, ' Gb/s', 8e-9, 3)}   "
              f"{_num(pkts_in, ' packets/s', digits=0)}")  # fmt: skip
    out = [
        ("consumed", f.rate("voltstream_consumer_bytes_total")),
        ("to GPU", f.rate("voltstream_gpu_bytes_total")),
        ("to disk", f.rate("voltstream_record_bytes_total")),
        ("sent", f.rate("voltstream_fengine_output_bytes_sent_total")),
        ("sent", f.rate("voltstream_replay_bytes_total")),
    ]
    shown = [f"{what} {_num(r, ' Gb/s', 8e-9, 3)}" for what, r in out if r is not None]
    sent_pkts = f.rate("voltstream_replay_packets_total")
    if sent_pkts is not None:
        shown.append(_num(sent_pkts, " packets/s", digits=0))
    if shown:
        t.add_row("out", "   ".join(shown))
    free, pool = (
        f.total("voltstream_capture_free_chunks"),
        f.total("voltstream_capture_pool_chunks"),
    )
    if pool:
        fill = 100.0 * (1 - (free or 0) / pool)
        t.add_row("pool", f"{int(free or 0)} of {int(pool)} chunks free ({fill:.0f}% in use)")
    busy = f.rate("voltstream_gpu_busy_seconds_total")
    if busy is None:
        busy = f.rate("voltstream_fengine_engine_gpu_busy_seconds_total")
    if busy is None:
        busy = f.total("voltstream_gpu_busy_ratio")
    inflight = f.total("voltstream_gpu_chunks_in_flight")
    if busy is not None or inflight is not None:
        t.add_row("GPU", f"busy {_num(busy, '%', 100.0, 0)}   "
                  f"chunks in flight {_num(inflight, digits=0)}")  # fmt: skip
    return t


def counter_tables(frame: Frame) -> list[Table | Text]:
    """Counters with a ``kind`` label as a table per metric (one row per stream or
    thread, a column per kind: value and rate); every other sample in one table."""
    by_kind: dict[str, dict[tuple, dict[str, Sample]]] = defaultdict(lambda: defaultdict(dict))
    rest: list[Sample] = []
    for s in frame.samples:
        if "kind" in s.labels:
            row = tuple((k, v) for k, v in s.labels.items() if k != "kind")
            by_kind[s.name][row][s.labels["kind"]] = s
        else:
            rest.append(s)
    tables: list[Table | Text] = []
    for name, rows in by_kind.items():
        kinds = list(dict.fromkeys(k for row in rows.values() for k in row))
        t = Table(title=name.removeprefix("voltstream_"), title_justify="left", box=None,
                  header_style="bold")  # fmt: skip
        # A stream's description (its `label`: "VDIF station Ef thread 3 ...") goes
        # under the table, whole: in the row it took the width the numbers need, and
        # a narrow terminal cut it to "label=VD…".
        keys = [" ".join(f"{k}={v}" for k, v in row if v and k != "label") or "all"
                for row in rows]  # fmt: skip
        t.add_column("", no_wrap=True, min_width=max(map(len, keys)))
        for k in kinds:
            t.add_column(k, justify="right")
        described = []
        for key, (row, cells) in zip(keys, rows.items(), strict=True):
            t.add_row(key, *(_cell(frame, cells.get(k)) for k in kinds))
            described += [f"{key}: {v}" for k, v in row if k == "label" and v]
        tables.append(t)
        if described:
            tables.append(Text("\n".join(described), style="dim"))
    t = Table(title="other counters and levels", title_justify="left", box=None,
              header_style="bold")  # fmt: skip
    for col in ("metric", "labels"):
        t.add_column(col, overflow="fold")
    t.add_column("value", justify="right")
    t.add_column("per s", justify="right")
    for s in rest:
        rate = frame.rates.get(_key(s))
        labels = " ".join(f"{k}={v}" for k, v in s.labels.items() if v)
        if s.kind == "histogram":  # a stage's time per item: how many, and the mean
            mean = 1e3 * s.value / s.count if s.count else 0.0
            t.add_row(s.name.removeprefix("voltstream_"), labels,
                      f"{s.count:,} x {mean:.3f} ms", "")  # fmt: skip
            continue
        t.add_row(s.name.removeprefix("voltstream_"), labels, _value(s.value),
                  "" if rate is None else _value(round(rate, 1)))  # fmt: skip
    tables.append(t)
    return tables


def _value(v: float) -> str:
    return f"{int(v):,}" if float(v).is_integer() else f"{v:,.3f}"


def _cell(frame: Frame, s: Sample | None) -> Text:
    if s is None:
        return Text("")
    rate = frame.rates.get(_key(s))
    text = _value(s.value) + ("" if rate is None else f"  {_value(round(rate, 1)):>5}/s")
    rising = s.labels.get("kind") in LOSS_KINDS and (rate or 0) > 0
    return Text(text, style="bold red" if rising else "")


def render(frame: Frame, address: str) -> Group:
    parts: list[Any] = [summary(frame, address)]
    if frame.rising_losses:
        parts.append(Text("warnings: " + "; ".join(frame.rising_losses), style="bold red"))
    elif not frame.status.get("report"):
        parts.append(Text("(the run has not opened its capture yet)"))
    parts += counter_tables(frame)
    run = {s.name: s.value for s in run_samples(frame.status)}
    if run.get("voltstream_run_finished"):
        parts.append(Text("the run has ended: these are its final numbers"))
    return Group(*parts)


def _console() -> Console:
    """rich prefers $COLUMNS and $LINES to the terminal's size; a detached tmux (and some
    ssh shells) exports stale ones (80x24), which would wrap every row: on a terminal,
    ask it."""
    if sys.stdout.isatty():
        size = os.get_terminal_size(sys.stdout.fileno())
        return Console(width=size.columns, height=size.lines)
    return Console()


def run_status_view(address: str, *, once: bool = False, interval_s: float = 1.0) -> int:
    """Shows ``address``'s status: live until Ctrl-C or the run goes away, or (``once``)
    one frame, with rates over one interval, then returns."""
    console = _console()
    frame = Frame(fetch_status(address))
    if once:
        time.sleep(interval_s)
        try:
            frame = Frame(fetch_status(address), frame)
        except CaptureError:
            pass  # the run ended between the polls: its last numbers, without rates
        console.print(render(frame, address))
        return 0
    with Live(render(frame, address), console=console, auto_refresh=False) as live:
        while True:
            time.sleep(interval_s)
            try:
                frame = Frame(fetch_status(address), frame)
            except CaptureError:
                live.update(Group(render(frame, address), Text(f"{address} went away: the "
                            "run ended (last numbers above)")), refresh=True)  # fmt: skip
                return 0
            live.update(render(frame, address), refresh=True)
