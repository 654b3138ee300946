"""katcp triggers (issue 28 item 3): a real `voltstream capture --ring-seconds ...
--trigger-katcp ...` fed by `voltstream simulate --dest` on loopback, triggered with
aiokatcp's client while the stream arrives; the dumps, refusals and counters are the
HTTP server's (record/dumps.py decides both), the samples the simulator's of the same
seed."""

from __future__ import annotations

import asyncio
import json

import aiokatcp
import numpy as np

from cli_process import run_cli
from dump_checks import read_dump
from loopback import free_bind
from test_triggered_dumps import TSAMP, RingCapture, _reference, _simulate


async def _ask(address: str, *requests: tuple) -> list:
    """Each request's (ok, reply arguments as text, or the fail reason)."""
    host, port = address.rsplit(":", 1)
    client = await aiokatcp.Client.connect(host, int(port))
    out: list = []
    try:
        for name, *args in requests:
            try:
                reply, _ = await client.request(name, *args)
                out.append((True, [a.decode() for a in reply]))
            except aiokatcp.FailReply as e:
                out.append((False, str(e)))
    finally:
        client.close()
        await client.wait_closed()
    return out


def test_katcp_triggers_dump_refuse_and_count_as_http_does(tmp_path):
    """Beside HTTP: ?trigger-window dumps the stream's very samples (the HTTP window's
    answer for the same window); a window the ring no longer holds fails with the
    HTTP 410's reason; malformed requests fail; ?ring gives the ring and counters; all
    counted in the report under the same outcomes."""
    ref = _reference(tmp_path, "--signal", "pulsar")
    cap = RingCapture(tmp_path, "0.5", "--trigger-katcp", "127.0.0.1:0")
    line = next(ln for ln in cap.err.splitlines() if "triggers: katcp on" in ln)
    address = line.split("katcp on ")[1].split()[0]
    sender = _simulate(cap.bind, "--signal", "pulsar")
    cap.wait_ring(0.7)
    http = cap.trigger({"start": 0.45, "end": 0.6})
    ring_before = cap.ring()
    answers = asyncio.run(_ask(
        address, ("trigger-window", "0.45", "0.6"), ("trigger-window", "0.01", "0.02"),
        ("trigger-window", "0.6", "0.5"), ("trigger-window", "soon", "1"),
        ("trigger-window", "0.5"), ("trigger-window", "0.5", "0.6", "yes"),
        ("trigger-burst", "-1", "0.6"), ("ring",),
    ))  # fmt: skip
    http_gone = cap.trigger({"start": 0.01, "end": 0.02})
    report, _ = cap.finish(sender)

    (ok, window), (gone_ok, gone), *bad, (ring_ok, ring) = answers
    assert ok and http[0] == 202, (answers, http)
    path, start_s, end_s, samples = window
    assert float(start_s) == http[1]["start_s"] and float(end_s) == http[1]["end_s"]
    assert int(samples) == http[1]["samples"] == round(0.15 / TSAMP)
    _, katcp_samples, _ = read_dump(path)
    _, http_samples, _ = read_dump(http[1]["path"])
    np.testing.assert_array_equal(katcp_samples, http_samples)
    first = round(0.45 / TSAMP)
    np.testing.assert_array_equal(katcp_samples, ref[first : first + len(katcp_samples)])
    # Refused as HTTP refuses it: the same reason, line for line.
    assert not gone_ok and http_gone[0] == 410, (gone, http_gone)
    # The same reason; the ring's state it quotes moves on between the two asks.
    assert gone.split(" (")[0] == http_gone[1]["error"].split(" (")[0]
    assert "before the oldest sample" in gone
    assert [ok for ok, _ in bad] == [False] * 5, bad
    assert "before it starts" in bad[0][1] and "'start'" in bad[1][1], bad
    assert "'dm' must be >= 0" in bad[4][1], bad
    assert ring_ok, ring
    status = json.loads(ring[0])
    assert status["ring"]["start"] >= ring_before["start"] - 1e-9
    assert status["counts"]["dumps"] == 2 and status["counts"]["malformed"] == 5, status
    d = report["dumps"]
    assert (d["triggers"], d["dumps"], d["written"], d["refused_gone"], d["malformed"]) == (
        9, 2, 2, 2, 5), d  # fmt: skip


def test_bad_trigger_katcp_values_exit_2_in_one_line(tmp_path):
    """A --trigger-katcp that is no HOST:PORT, or one without --ring-seconds: one line,
    status 2."""
    base = ("capture", "--format", "ynao", "--listen", free_bind(), "--duration", "1")
    for extra, says in (
        (("--ring-seconds", "1", "--trigger-katcp", "nowhere"), "--trigger-katcp"),
        (("--trigger-katcp", "127.0.0.1:0"), "--ring-seconds"),
    ):
        r = run_cli(*base, *extra)
        assert r.returncode == 2, r.stderr
        assert says in r.stderr and "Traceback" not in r.stderr, r.stderr
        assert len(r.stderr.strip().splitlines()) == 1, r.stderr


def test_http_triggers_need_no_aiokatcp_and_katcp_ones_say_how_to_get_it(monkeypatch):
    """Before: serving HTTP triggers imported aiokatcp (an optional dependency), so a
    capture with a voltage ring failed to start where aiokatcp was not installed."""
    import sys
    from types import SimpleNamespace

    import pytest

    from voltstream.cli.dump import close_servers, serve_triggers
    from voltstream.errors import ConfigError

    monkeypatch.setitem(sys.modules, "aiokatcp", None)  # `import aiokatcp` fails
    monkeypatch.delitem(sys.modules, "voltstream.record.trigger_katcp", raising=False)
    http_only = SimpleNamespace(trigger_listen="127.0.0.1:0", trigger_katcp=None)
    servers = serve_triggers(object(), http_only)
    try:
        assert len(servers) == 1 and servers[0].address.startswith("127.0.0.1:")
    finally:
        close_servers(servers)
    with pytest.raises(ConfigError, match=r"--trigger-katcp needs aiokatcp.*voltstream\[control\]"):
        serve_triggers(object(), SimpleNamespace(trigger_listen=None, trigger_katcp="127.0.0.1:0"))
