"""run_fengine on loopback with digitiser packets sent as soon as it listens: shared by
the F-engine pipeline tests and the spead2 interoperability tests."""

from __future__ import annotations

import threading

from voltstream import _core
from voltstream.capture.config import CaptureSettings
from voltstream.fengine.pipeline import run_fengine


def send_on_start(packet_sets, rate=0.3):
    """An ``on_start`` that sends each array of packets (one packet a row) at ``rate``
    Gb/s from a thread, and the list that thread goes into."""
    threads = []

    def on_start(addr):
        def go():
            sender = _core.Sender(addr)
            for pk in packet_sets:
                sender.send(pk, pk.shape[1], rate)

        threads.append(threading.Thread(target=go, daemon=True))
        threads[0].start()

    return on_start, threads


def run_local(engine, output, packet_sets, settings, *, rate=0.3, duration_s=20,
              idle_timeout_s=0.4, **kw):  # fmt: skip
    """run_fengine on 127.0.0.1 with ``packet_sets`` sent as soon as it listens, the
    digitiser stream as ``settings`` (an FEngineSettings) say; returns its report once
    the sender is done."""
    on_start, threads = send_on_start(packet_sets, rate)
    report = run_fengine(
        CaptureSettings.of("127.0.0.1:0"),
        settings,
        engine,
        output,
        duration_s=duration_s,
        idle_timeout_s=idle_timeout_s,
        on_start=on_start,
        **kw,
    )
    if threads:
        threads[0].join(5)
    return report
