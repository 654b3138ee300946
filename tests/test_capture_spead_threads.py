"""One SPEAD digitiser stream pair over two capture threads by chunk (`threads.count = 2`,
`spread = chunks`): packet rings in one PACKET_FANOUT_CBPF group steered by each heap's
time stamp item (item pointer 4, the simulator's order) over loopback. Each thread gets
only its chunk ids, every heap is placed once with the bytes sent, counters exact."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import numpy as np

from capture_spec import capture
from cli_process import reaped, run_cli
from loopback import free_bind, send
from voltstream.sim.spead import packetize_spead_dig

SPP, BITS, PPC, HEAPS, FIRST = 256, 10, 4, 32, 40


def test_spead_heaps_spread_over_two_threads_by_chunk():
    rng = np.random.default_rng(5)
    cap = capture(
        "spead",
        "127.0.0.1:0",
        PPC,
        digitiser_ids=[7, 9],
        samples_per_heap=SPP,
        sample_bits=BITS,
        engine="packet_ring",
        threads=2,
        spread="chunks",
    )
    cap.start()
    heap = SPP * BITS // 8
    sent, packets = {}, []
    for stream, dig in enumerate((7, 9)):
        samples = rng.integers(-512, 512, HEAPS * SPP)
        pkts = packetize_spead_dig(
            samples, bits=BITS, samples_per_heap=SPP, timestamp=FIRST * SPP, digitiser_id=dig
        )
        packets.extend(pkts)
        for k, p in enumerate(pkts):
            sent[(stream, FIRST + k)] = bytes(p[-heap:])
    send(cap.address, packets)
    cap.stop()
    got, ids = {}, []
    for t in range(2):
        while (ch := cap.next_chunk(0.05, thread=t)) is not None:
            assert ch.thread == t and ch.chunk_id % 2 == t, (t, ch.chunk_id)
            data = np.frombuffer(ch, np.uint8).reshape(ch.nstreams, PPC, -1)
            present = np.frombuffer(ch.present, np.uint8).reshape(ch.nstreams, PPC)
            for s, k in zip(*np.nonzero(present), strict=True):
                got[(int(s), ch.chunk_id * PPC + int(k))] = data[s, k].tobytes()
            ids.append(ch.chunk_id)
            del data
            ch.release()
    assert got == sent
    assert sorted(ids) == list(range(FIRST // PPC, (FIRST + HEAPS) // PPC))
    st = cap.stats()
    assert st["totals"]["received"] == 2 * HEAPS and st["totals"]["missing"] == 0
    assert st["foreign"] == 0 and st["malformed"] == 0
    # The kernel gave each thread its own chunks' packets: half of them each.
    assert [th["packets"] for th in st["threads"]] == [HEAPS, HEAPS]
    assert [th["chunks_emitted"] for th in st["threads"]] == [HEAPS // PPC // 2] * 2


def test_cli_capture_of_the_simulated_digitiser_on_two_threads_counts_exactly():
    """`voltstream capture --format spead-dig --threads 2 --spread chunks` fed by
    `voltstream simulate --format spead-dig`: each thread receives half of the heaps."""
    bind = free_bind()
    proc = subprocess.Popen(
        [sys.executable, "-m", "voltstream.cli", "capture", "--format", "spead-dig",
         "--listen", bind, "--threads", "2", "--spread", "chunks",
         "--engine", "packet_ring", "--duration", "30", "--idle-timeout", "6"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env=dict(os.environ, PYTHONUNBUFFERED="1"),
    )  # fmt: skip
    with reaped(proc):
        line = proc.stderr.readline()
        assert "listening on" in line, line + proc.stderr.read()
        sim = run_cli("simulate", "--format", "spead-dig", "--heaps", "512", "--dest", bind)
        assert sim.returncode == 0, sim.stderr
        out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    text = out
    assert "received=1024  missing=0" in text and "malformed=0  foreign=0  dropped=0" in text
    for t in (0, 1):
        assert re.search(
            rf"thread {t} \(cpu \S+, streams \[0, 1\]\): received=512  missing=0", text
        )
