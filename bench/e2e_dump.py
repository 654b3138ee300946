"""dump_ynao of bench/e2e.py: capture with the voltage ring and one triggered dump per
point (issue 28's target: "a triggered dump of 1 s of data while capturing at 30 Gb/s,
lossless"; docs/search.md "Triggered voltage dumps").

The receiver is capture_ynao's (`voltstream capture --format ynao`), given through
--capture-args (the one way the harness adds capture flags) `--ring-seconds R
--trigger-listen 127.0.0.1:P --dump-dir D --voltage-ring-mb M`, D a fresh directory on
tmpfs (the disk is not what is measured), removed after the point.

What "1 s of data" is. The senders restamp YNAO frames 16 us apart whatever rate they
send at, so the stream's own clock runs at rate / 4.11 Gb/s (YNAO's real-time rate)
of the wall's. The window is --dump-seconds of the data as it arrives at the point's
rate (1 s at 30 Gb/s: 3.75 GB, 7.3 s of YNAO's stream time), and the ring
--dump-ring-seconds of it: both are given to the CLI in stream seconds, scaled by the
asked rate. (1 stream second at 30 Gb/s would be 0.14 s of the data.)

When. A thread polls GET /ring from the senders' start and POSTs one trigger once the
ring is full (the capture overwriting its oldest slots, as in a long run) or, if it is
not by then, at 0.6 of the point's sending time: `{"start": S, "end": E, "partial":
false}` for the newest window the ring holds, S and E whole microseconds (exact
multiples of YNAO's 0.25 us sample, so the window has exactly (E - S) / 0.25 us
samples). After a 202 it polls GET /ring until the dump is counted written (or failed):
the time from the POST to that, to 50 ms.

LOSSLESS with its dump: the capture's own criterion (e2e_receivers.lossless) and the
trigger answered 202 and the dump counted written before the senders stopped (the
writer read the whole window out of the ring while the capture ran at the rate), the
report's dump (its `dumps` section) written, not
partial, with the expected samples and 0 lost_samples, no dump failed, and the file
holding the header and exactly those samples. The point keeps all of it under "dump",
with the reasons it was not.
"""

from __future__ import annotations

import argparse
import json
import math
import shlex
import shutil
import socket
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

from e2e_traffic import Ynao

#: Gb/s at which the YNAO frames' time runs as fast as the wall's (8216 bytes / 16 us).
STREAM_GBPS = Ynao.packet_len * 8 / Ynao.FRAME_NS
TSAMP_NS = Ynao.FRAME_NS // 64  # 64 time samples a frame: 250 ns
BYTES_PER_SAMPLE = 32 * 2 * 2  # a time sample: 32 channels x 2 pols x 8-bit complex
#: The ring counts as full at this share of its seconds (its newest slot is in flux).
FULL = 0.9
#: Without a full ring the trigger goes at this share of the sending time.
TRIGGER_BY = 0.6
POLL_S = 0.05  # GET /ring is served by the receiver: polled lightly


def add_args(ap: argparse.ArgumentParser) -> None:
    add = ap.add_argument
    add("--dump-seconds", type=float, default=1.0, help="dump_ynao: the window, in seconds "
        "of the data at the point's rate (default 1; the figure dump_1s_lossless_gbps "
        "needs 1)")  # fmt: skip
    add("--dump-ring-seconds", type=float, default=3.0, help="dump_ynao: the voltage ring, "
        "in seconds of the data at the point's rate (default 3)")  # fmt: skip
    add("--dump-tmp", default=None, help="dump_ynao: where each point's dump directory "
        "is made (default /dev/shm, else --workdir)")  # fmt: skip
    add("--search-json", default="docs/results/search.json", help="dump_ynao's figures "
        "are merged into it (bench/search.py's rules) when dump_ynao ran")  # fmt: skip


def stream_seconds(data_seconds: float, rate_gbps: float) -> float:
    """Seconds of YNAO's stream clock that `data_seconds` of sending at `rate_gbps` hold."""
    return data_seconds * rate_gbps / STREAM_GBPS


def free_tcp_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _http(url: str, body: dict | None = None, timeout: float = 5.0) -> tuple[int, dict]:
    """(status, JSON answer) of a GET, or of a POST of `body`; a refusal's too."""
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, method="GET" if data is None else "POST")
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"{}")


class DumpPoint:
    """One point's ring, trigger and verdict (bench/e2e.py run_point calls it)."""

    def __init__(self, a: argparse.Namespace, rate: float, seconds: float, workdir: Path,
                 stamp: str) -> None:  # fmt: skip
        self.a, self.rate, self.seconds = a, rate, seconds
        # Unpaced: sized for --max-gbps; the window's data seconds are then unknown.
        sized = rate or a.max_gbps
        self.window_s = stream_seconds(a.dump_seconds, sized)
        self.window_us = max(1, round(self.window_s * 1e6))
        self.ring_s = stream_seconds(a.dump_ring_seconds, sized)
        tmp = Path(a.dump_tmp or ("/dev/shm" if Path("/dev/shm").is_dir() else workdir))
        self.dir = tmp / f"voltstream-e2e-{stamp}-dumps"
        self.dir.mkdir(parents=True, exist_ok=True)
        self.url = f"http://127.0.0.1:{free_tcp_port()}"
        self.record: dict = {
            "seconds_of_data": a.dump_seconds if rate else None,
            "ring_seconds_of_data": a.dump_ring_seconds,
            "window_stream_s": self.window_us / 1e6,
            "ring_stream_s": self.ring_s,
            "expected_samples": self.window_us * 1000 // TSAMP_NS,
            "trigger": None,
            "status": None,
            "answer": None,
        }
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def receiver_args(self) -> argparse.Namespace:
        """The harness's options with the ring's flags added to --capture-args."""
        # The ring's memory (payload and a byte per packet, whole chunks) with room to spare.
        mb = math.ceil(self.ring_s * 1e9 / Ynao.FRAME_NS * (Ynao.packet_len + 1) * 1.5 / 2**20)
        flags = ["--ring-seconds", f"{self.ring_s:.9g}", "--trigger-listen", self.url[7:],
                 "--dump-dir", str(self.dir), "--voltage-ring-mb", str(mb + 256)]  # fmt: skip
        return argparse.Namespace(**{**vars(self.a), "capture_args": shlex.join(
            [*shlex.split(self.a.capture_args), *flags])})  # fmt: skip

    def start(self, t0: float) -> None:
        """The trigger's thread; `t0`: the senders' start (time.monotonic)."""
        self.t0 = t0
        self._thread = threading.Thread(target=self._trigger, name="e2e-dump", daemon=True)
        self._thread.start()

    def _trigger(self) -> None:
        rec, by = self.record, self.t0 + TRIGGER_BY * self.seconds
        time.sleep(max(0.0, self.t0 - time.monotonic()))
        ring, full = None, False
        while not self._stop.is_set():
            try:
                ring = _http(self.url + "/ring")[1].get("ring")
            except (OSError, ValueError):
                ring = None  # not serving yet, or gone
            full = ring is not None and ring["end"] - ring["start"] >= FULL * self.ring_s
            if full or time.monotonic() >= by:
                break
            time.sleep(POLL_S)
        if self._stop.is_set():
            return
        # The newest window, in whole microseconds (below the ring's newest sample).
        end_us = math.floor(ring["end"] * 1e6) - 1 if ring else self.window_us
        body = {"start": (end_us - self.window_us) / 1e6, "end": end_us / 1e6,
                "partial": False}  # fmt: skip
        rec.update(trigger=body, ring_at_trigger=ring, ring_full=full)
        posted = time.monotonic()
        rec["posted_s"] = posted - self.t0
        try:
            rec["status"], rec["answer"] = _http(self.url + "/trigger", body, timeout=120)
        except (OSError, ValueError) as e:
            rec["answer"] = {"error": f"{type(e).__name__}: {e}"}
            return
        rec["answered_s"] = time.monotonic() - self.t0
        rec["answer_ms"] = (time.monotonic() - posted) * 1e3
        while rec["status"] == 202 and not self._stop.wait(POLL_S):
            try:
                counts = _http(self.url + "/ring")[1]["counts"]
            except (OSError, ValueError, KeyError):
                return  # the receiver has ended: its report says what became of it
            if counts["written"] + counts["failed"] >= 1:
                rec["post_to_written_ms"] = (time.monotonic() - posted) * 1e3
                return

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)

    def finish(self, point: dict, report: dict | None) -> None:
        """The point's verdict with its dump (`point["lossless"]` and "dump"); the dump
        directory removed."""
        self.stop()
        rec, why = self.record, []
        try:
            listed = ((report or {}).get("dumps") or {}).get("list") or []
            counts = (report or {}).get("dumps") or {}
            rec["report"] = listed[0] if len(listed) == 1 else listed or None
            if not self.rate:
                why.append("unpaced: the window's seconds of data are unknown")
            if rec["status"] != 202:
                why.append(f"trigger answered {rec['status']}: "
                           f"{(rec['answer'] or {}).get('error')}")  # fmt: skip
            elif "seconds" in point and rec["answered_s"] > point["seconds"]:
                why.append("answered after the senders stopped")
            elif "seconds" in point and (
                rec.get("post_to_written_ms") is None
                or rec["posted_s"] + rec["post_to_written_ms"] / 1e3 > point["seconds"]
            ):
                why.append("not written before the senders stopped")
            if len(listed) != 1:
                why.append(f"{len(listed)} dumps in the report, not 1")
            else:
                d = listed[0]
                why += [f"dump {k} {d[k]!r}, not {v!r}" for k, v in (
                    ("state", "written"), ("partial", False), ("lost_samples", 0),
                    ("samples", rec["expected_samples"])) if d[k] != v]  # fmt: skip
                why += self._check_file(Path(d["path"]))
            if counts.get("failed"):
                why.append(f"{counts['failed']} dump(s) failed")
        finally:
            shutil.rmtree(self.dir, ignore_errors=True)
        if point.get("offered_gbps"):  # what the window held at the rate really sent
            rec["seconds_of_data_offered"] = (
                rec["window_stream_s"] * STREAM_GBPS / point["offered_gbps"]
            )
        rec["ok"], rec["why_not"] = not why, why
        point["dump"] = rec
        point["capture_lossless"] = point.get("lossless", False)
        point["lossless"] = point["capture_lossless"] and rec["ok"]
        print(dump_line(rec), flush=True)

    def _check_file(self, path: Path) -> list[str]:
        """The file: its DADA header's HDR_SIZE, then exactly the expected samples."""
        if not path.is_file():
            return [f"no file {path}"]
        size = self.record["file_bytes"] = path.stat().st_size
        with open(path, "rb") as f:
            head = f.read(4096).decode("ascii", "replace").split("\0", 1)[0].split("\n")
        keys = dict(ln.split(None, 1) for ln in head if len(ln.split(None, 1)) == 2)
        want = int(keys.get("HDR_SIZE", "4096")) + self.record["expected_samples"] * (
            BYTES_PER_SAMPLE
        )
        return [] if size == want else [f"the file holds {size} bytes, not {want}"]


def dump_line(rec: dict) -> str:
    r = rec.get("report") if isinstance(rec.get("report"), dict) else {}
    ms = lambda k: f"{rec[k]:.0f} ms" if rec.get(k) is not None else "-"  # noqa: E731
    return (
        f"  dump: trigger {rec['status']} at {rec.get('posted_s', 0):.2f} s (ring "
        f"{'full' if rec.get('ring_full') else 'not full'}), answered in {ms('answer_ms')}, "
        f"written {ms('post_to_written_ms')} after the POST; {r.get('samples')} samples of "
        f"{rec['expected_samples']} ({rec['window_stream_s']:g} stream s), lost "
        f"{r.get('lost_samples')}, {rec.get('file_bytes', 0) / 1e6:.1f} MB -> "
        + ("ok" if rec["ok"] else "NOT ok: " + "; ".join(rec["why_not"]))
    )


def figures(doc: dict) -> dict:
    """dump_1s_lossless_gbps (dump_ynao's confirmed figure where its every point dumped
    1 s of data) and dump_vs_capture_ratio (over capture_ynao's, the same document)."""
    points = ((doc.get("configs") or {}).get("dump_ynao") or {}).get("points") or []
    secs = {(p.get("dump") or {}).get("seconds_of_data") for p in points}
    one = doc.get("dump_ynao_lossless_gbps") if secs == {1.0} else None
    cap = doc.get("capture_ynao_lossless_gbps")
    return {"dump_1s_lossless_gbps": one,
            "dump_vs_capture_ratio": one / cap if one is not None and cap else None}  # fmt: skip


def write_search(doc: dict, path: str) -> dict | None:
    """This run's dump figures, with capture_ynao's of the same run, merged into the
    search results (bench/search.py's merge: date, command and machine per figure, a
    null never over a value); None when dump_ynao did not run."""
    c = (doc.get("configs") or {}).get("dump_ynao")
    if c is None:
        return None
    import search  # bench/search.py (imports NumPy and the search: only when needed)

    found = figures(doc) | {"dump_capture_ynao_lossless_gbps": doc.get(
        "capture_ynao_lossless_gbps")}  # fmt: skip
    run = {"date": doc["date"], "command": doc["command"], "machine": search.machine(),
           "dump": {**found, "dump_ynao_lossless_gbps": doc.get("dump_ynao_lossless_gbps"),
                    "confirmed_seconds": c.get("confirmed_seconds"),
                    "lowest_lossy_gbps": c.get("lowest_lossy_gbps"),
                    "notes": c.get("notes"), "errors": c.get("errors")}}  # fmt: skip
    p = Path(path)
    old = json.loads(p.read_text()) if p.exists() else None
    out = search.merge(old, run, found)
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(json.dumps(out, indent=2, default=float) + "\n")
    print(f"dump figures {found} -> {path}", flush=True)
    return out
