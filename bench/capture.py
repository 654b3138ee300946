"""Capture benchmark: drain rate per engine (one capture core) and loss versus rate.

(a) Drain: the capture starts paused (or, for the baselines, nobody reads yet), N packets
    of 8192 bytes are queued in the kernel (socket queue raised with SO_RCVBUFFORCE, or
    the packet ring), then the clock runs while the engine empties the queue into
    chunks (a consumer thread releases them). Baselines measured in the same run: a
    Python recvfrom loop, a Python recv_into loop into one bytearray, and spead2's
    receivers when spead2 can be imported or installed from PyPI: its heap stream, and
    its chunk stream (bench/spead2_chunk.py: a C placement callback built with `cc`,
    the same 8192-byte packets queued by the same sender, 64-packet chunks released by
    a Python consumer), the fair baseline for assembly into chunks. The drain runs
    `--repeat` rounds (all receivers in turn per round); a table of medians follows.
(b) Sweep: a `_core.Sender` subprocess (sendmmsg + UDP GSO) paced at each rate for a few
    seconds to a running capture; sent, received, lost, kernel drops, receiver CPU.

Only 127.0.0.1 is used, and every phase is bounded in packets and time. On a 2-core
machine sender and receiver share the cores, so the sweep measures the sender's limit;
the drain rate is the engine's own ceiling. The xdp engine is not in the default list: on
loopback it runs in generic mode, where the GSO sender's super-frames arrive unsplit (each
counted malformed); its numbers over a veth are in docs/architecture.md ("AF_XDP engine").

    python bench/capture.py [--quick] [--engines socket,packet_ring] [--rates 1,2,5,10,20]
                            [--seconds 3] [--packets 40000] [--repeat 3] [--json out.json]
"""

from __future__ import annotations

import argparse
import importlib
import json
import resource
import socket
import subprocess
import sys
import threading
import time

import numpy as np

from voltstream import _core

PACKET = 8192  # bytes per UDP payload
HEADER = 10  # counter format: u64 index, u16 stream
SO_RCVBUFFORCE = 33


def cpu_seconds() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def counter_packets(n: int, first: int = 0) -> np.ndarray:
    buf = np.zeros((n, PACKET), np.uint8)
    buf[:, :8] = np.arange(first, first + n, dtype=">u8").view(np.uint8).reshape(n, 8)
    buf[:, HEADER:] = (np.arange(PACKET - HEADER, dtype=np.uint32) % 251).astype(np.uint8)
    return buf


def fill(dest: str, n: int) -> int:
    """Queues n counter packets at dest as fast as the GSO sender goes."""
    sent, tx, step = 0, _core.Sender(dest), 2048
    while sent < n:
        k = min(step, n - sent)
        sent += tx.send(counter_packets(k, sent), PACKET, 0)["packets"]
    return sent


class Consumer:
    """Releases chunks as they come, as a pipeline stage would."""

    def __init__(self, cap):
        self.cap, self.chunks, self.done = cap, 0, False
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()

    def run(self):
        while True:
            ch = self.cap.next_chunk(0.05)
            if ch is None:
                if self.done:
                    return
                continue
            ch.release()
            self.chunks += 1

    def close(self):
        self.done = True
        self.thread.join(timeout=10)


def capture(engine: str, rcvbuf: int):
    return _core.Capture(
        {
            "format": {"name": "counter", "payload_len": PACKET - HEADER},
            "network": {"bind": "127.0.0.1:0", "queue_bytes": rcvbuf},
            "engine": {"kind": engine},
            "chunks": {"packets_per_chunk": 64, "nchunks": 128, "window": 2},
        }
    )


def wait_packets(cap, n: int, limit: float) -> float:
    t0 = time.perf_counter()
    while cap.stats()["packets"] < n and time.perf_counter() - t0 < limit:
        time.sleep(0.0005)
    return time.perf_counter() - t0


def result(name, n, got, seconds, cpu, **extra):
    return {
        "receiver": name,
        "packets": n,
        "received": got,
        "seconds": seconds,
        "gbps": got * PACKET * 8 / seconds / 1e9 if seconds > 0 else 0.0,
        "mpps": got / seconds / 1e6 if seconds > 0 else 0.0,
        "cpu_s": cpu,
        **extra,
    }


def drain_engine(engine: str, n: int) -> dict:
    # Socket queues charge ~2x the payload per packet (skb truesize); the ring packs
    # 64 KiB GSO frames into 1 MiB blocks.
    cap = capture(engine, rcvbuf=n * PACKET * 2 + (64 << 20))
    cap.start(paused=True)
    cons = Consumer(cap)
    try:
        queued = fill(cap.address, n)
        time.sleep(0.05)
        drops_before = cap.stats()["kernel_drops"]
        c0 = cpu_seconds()
        cap.resume()
        secs = wait_packets(cap, queued - drops_before, 30)
        cpu = cpu_seconds() - c0
    finally:
        cap.stop()
        cons.close()
    st = cap.stats()
    return result(
        f"voltstream {st['engine']}",
        queued,
        st["streams"][0]["received"],
        secs,
        cpu,
        kernel_drops=st["kernel_drops"],
        dropped=st["streams"][0]["dropped"],
        chunks=cons.chunks,
        chunks_dropped=st["chunks_dropped"],
    )


def filled_socket(n: int):
    rx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    rx.setsockopt(socket.SOL_SOCKET, SO_RCVBUFFORCE, min(n * PACKET * 2 + (64 << 20), 2**30))
    rx.bind(("127.0.0.1", 0))
    host, port = rx.getsockname()
    return rx, fill(f"{host}:{port}", n)


def drain_python(kind: str, n: int) -> dict:
    rx, queued = filled_socket(n)
    rx.settimeout(0.5)
    got, buf = 0, bytearray(PACKET + 64)
    c0, t0 = cpu_seconds(), time.perf_counter()
    try:
        if kind == "recvfrom":
            while got < queued:
                rx.recvfrom(PACKET + 64)
                got += 1
        else:
            while got < queued:
                rx.recv_into(buf)
                got += 1
    except TimeoutError:
        pass
    secs, cpu = time.perf_counter() - t0, cpu_seconds() - c0
    rx.close()
    return result(f"python {kind}", queued, got, secs, cpu)


def load_spead2(install: bool):
    try:
        return importlib.import_module("spead2"), None
    except ImportError:
        if not install:
            return None, "spead2 not installed (--quick does not install it)"
    r = subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", "spead2"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    if r.returncode != 0:
        return None, f"pip install spead2 failed: {r.stderr.strip()[-300:]}"
    try:
        importlib.invalidate_caches()
        return importlib.import_module("spead2"), None
    except ImportError as e:
        return None, f"spead2 installed but cannot be imported: {e}"


def drain_spead2(spead2, n: int) -> dict:
    import spead2.recv
    import spead2.send

    rx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    rx.setsockopt(socket.SOL_SOCKET, SO_RCVBUFFORCE, min(n * PACKET * 2 + (64 << 20), 2**30))
    rx.bind(("127.0.0.1", 0))
    port = rx.getsockname()[1]
    pool = spead2.ThreadPool(1)
    tx = spead2.send.UdpStream(
        pool,
        [("127.0.0.1", port)],
        spead2.send.StreamConfig(max_packet_size=9000, rate=0, max_heaps=64),
    )
    ig = spead2.send.ItemGroup(flavour=spead2.Flavour(4, 64, 48, 0))
    ig.add_item(0x1600, "timestamp", "", shape=(), format=[("u", 48)])
    ig.add_item(0x3000, "payload", "", shape=(PACKET - 64,), dtype=np.uint8)
    ig["payload"].value = np.arange(PACKET - 64, dtype=np.uint32).astype(np.uint8)
    for i in range(n):
        ig["timestamp"].value = i
        tx.send_heap(ig.get_heap(descriptors="none", data="all"))
    rx_pool = spead2.ThreadPool(1)
    stream = spead2.recv.Stream(
        rx_pool,
        spead2.recv.StreamConfig(
            max_heaps=4, memory_allocator=spead2.MemoryPool(16384, 16384, 64, 64)
        ),
        spead2.recv.RingStreamConfig(heaps=n + 16),
    )
    c0, t0 = cpu_seconds(), time.perf_counter()
    stream.add_udp_reader(rx, max_size=9200)
    while stream.stats["packets"] < n and time.perf_counter() - t0 < 30:
        time.sleep(0.0005)
    secs, cpu = time.perf_counter() - t0, cpu_seconds() - c0
    got = stream.stats["packets"]
    stream.stop()
    rx.close()
    return result("spead2 heap stream", n, got, secs, cpu, note="SPEAD, 8192-byte packets")


def drain_spead2_chunks(spead2, n: int) -> dict:
    """spead2's chunk stream (C placement callback) on the same kind of filled socket."""
    import spead2_chunk

    rx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    rx.setsockopt(socket.SOL_SOCKET, SO_RCVBUFFORCE, min(n * PACKET * 2 + (64 << 20), 2**30))
    rx.bind(("127.0.0.1", 0))
    try:
        queued, secs, cpu, stats, consumed = spead2_chunk.drain_chunk_stream(
            spead2, _core.Sender, rx, n, PACKET, cpu_seconds
        )
    finally:
        rx.close()
    return result(
        "spead2 chunk stream",
        queued,
        stats["packets"],
        secs,
        cpu,
        chunks=consumed["chunks"],
        heaps_in_chunks=consumed["heaps"],
        spead2_stats=stats,
        note="SPEAD, 8192-byte packets, C placement callback",
    )


SENDER = """
import json, sys, time
import numpy as np
from voltstream import _core
dest, rate, seconds, plen = sys.argv[1], float(sys.argv[2]), float(sys.argv[3]), int(sys.argv[4])
n = 2048
buf = np.zeros((n, plen), np.uint8)
tx = _core.Sender(dest)
sent, t0 = 0, time.perf_counter()
while time.perf_counter() - t0 < seconds:
    buf[:, :8] = np.arange(sent, sent + n, dtype=">u8").view(np.uint8).reshape(n, 8)
    sent += tx.send(buf, plen, rate)["packets"]
el = time.perf_counter() - t0
print(json.dumps({"sent": sent, "seconds": el, "gbps": sent * plen * 8 / el / 1e9}))
"""


def sweep_point(engine: str, rate: float, seconds: float) -> dict:
    cap = capture(engine, rcvbuf=64 << 20)
    cap.start()
    cons = Consumer(cap)
    try:
        c0, t0 = cpu_seconds(), time.perf_counter()
        r = subprocess.run(
            [sys.executable, "-c", SENDER, cap.address, str(rate), str(seconds), str(PACKET)],
            capture_output=True,
            text=True,
            timeout=seconds + 60,
        )
        if r.returncode != 0:
            raise RuntimeError(f"sender failed: {r.stderr.strip()[-500:]}")
        sent = json.loads(r.stdout)
        wait_packets(cap, sent["sent"], 2)
        cpu, wall = cpu_seconds() - c0, time.perf_counter() - t0
    finally:
        cap.stop()
        cons.close()
    st = cap.stats()
    s0 = st["streams"][0]
    return {
        "engine": st["engine"],
        "rate_gbps": rate,
        "sent_gbps": sent["gbps"],
        "sent": sent["sent"],
        "received": s0["received"],
        "dropped": s0["dropped"],
        "lost": sent["sent"] - s0["received"] - s0["dropped"],
        "missing": s0["missing"],
        "kernel_drops": st["kernel_drops"],
        "chunks_dropped": st["chunks_dropped"],
        "receiver_cpu": cpu / wall,
    }


def drain_round(engines, n: int, baselines: bool, spead2, notes: list, rnd: int = 0) -> list:
    """One drain run of every receiver on freshly filled queues. The order rotates with
    the round, so that no receiver always runs first or right after another one."""
    jobs = [(f"voltstream {e}", lambda e=e: drain_engine(e, n)) for e in engines]
    if baselines:
        jobs += [(f"python {k}", lambda k=k: drain_python(k, n)) for k in ("recvfrom", "recv_into")]
        if spead2 is not None:
            jobs.append(("spead2 heap stream", lambda: drain_spead2(spead2, n)))
            jobs.append(("spead2 chunk stream", lambda: drain_spead2_chunks(spead2, n)))
    shift = rnd % len(jobs)
    rows = []
    for name, run in jobs[shift:] + jobs[:shift]:
        try:
            rows.append(run())
        except Exception as e:  # noqa: BLE001 - report and go on
            if not name.startswith("spead2"):
                raise
            notes.append(f"{name} run failed: {type(e).__name__}: {e}")
    return rows


def drain_medians(rows: list[dict]) -> list[dict]:
    """Per receiver: median, min and max Gb/s over the rounds, and the ratio of the
    median to spead2's chunk stream (the baseline that also assembles chunks)."""
    by: dict[str, list[dict]] = {}
    for d in rows:
        by.setdefault(d["receiver"], []).append(d)
    meds = []
    for name, ds in by.items():
        g = sorted(d["gbps"] for d in ds)
        meds.append(
            {
                "receiver": name,
                "rounds": len(ds),
                "gbps_median": float(np.median(g)),
                "gbps_min": g[0],
                "gbps_max": g[-1],
                "cpu_s_median": float(np.median([d["cpu_s"] for d in ds])),
                # Bits per CPU-second of the receiving process (all its threads, the
                # polling main thread included): less sensitive than wall time to other
                # load on a shared machine.
                "gbps_per_cpu_median": float(
                    np.median([d["received"] * PACKET * 8e-9 / max(d["cpu_s"], 1e-6) for d in ds])
                ),
                "complete_rounds": sum(d["received"] == d["packets"] for d in ds),
            }
        )
    ref = next((m for m in meds if m["receiver"] == "spead2 chunk stream"), None)
    for m in meds:
        m["vs_spead2_chunks"] = (
            m["gbps_median"] / ref["gbps_median"] if ref and ref["gbps_median"] > 0 else None
        )
    return meds


def print_drain_medians(meds: list[dict], rounds: int) -> None:
    print(f"\n## Drain rate, median of {rounds} round(s)\n")
    print(
        "| receiver | Gb/s median | min-max | CPU s | Gb/s per CPU-s | complete rounds "
        "| / spead2 chunks |"
    )
    print("|---|---|---|---|---|---|---|")
    for m in meds:
        ratio = "-" if m["vs_spead2_chunks"] is None else f"{m['vs_spead2_chunks']:.2f}x"
        print(
            f"| {m['receiver']} | {m['gbps_median']:.1f} | {m['gbps_min']:.1f}-"
            f"{m['gbps_max']:.1f} | {m['cpu_s_median']:.3f} | {m['gbps_per_cpu_median']:.1f} | "
            f"{m['complete_rounds']}/{m['rounds']} | {ratio} |"
        )


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="small counts (CI smoke run)")
    ap.add_argument("--engines", default="socket,packet_ring")
    ap.add_argument("--rates", default=None, help="Gb/s list; 0 = sender's limit")
    ap.add_argument("--seconds", type=float, default=None, help="per sweep point")
    ap.add_argument("--packets", type=int, default=None, help="queued per drain run")
    ap.add_argument("--repeat", type=int, default=None, help="drain rounds (default 3; quick 1)")
    ap.add_argument("--no-baselines", action="store_true")
    ap.add_argument("--json", default=None, metavar="PATH")
    a = ap.parse_args(argv)
    engines = [e for e in a.engines.split(",") if e]
    n = a.packets or (2000 if a.quick else 40000)
    n = min(n, 100_000)  # bounded: at most ~800 MB queued
    rates = [float(r) for r in (a.rates or ("0.5,1" if a.quick else "1,2,5,10,20,0")).split(",")]
    seconds = min(a.seconds or (0.3 if a.quick else 3.0), 10.0)

    out = {"packet_bytes": PACKET, "drain_packets": n, "drain": [], "sweep": [], "notes": []}
    spead2 = None
    if not a.no_baselines:
        spead2, why = load_spead2(install=not a.quick)
        if spead2 is None:
            out["notes"].append(why)
    rounds = max(1, min(a.repeat or (1 if a.quick else 3), 10))
    out["drain_rounds"] = rounds
    for rnd in range(rounds):
        rows = drain_round(engines, n, not a.no_baselines, spead2, out["notes"], rnd)
        out["drain"] += [dict(d, round=rnd) for d in rows]
    out["drain_median"] = drain_medians(out["drain"])
    for e in engines:
        for r in rates:
            out["sweep"].append(sweep_point(e, r, seconds))

    print(f"## Drain rate, one capture core, {n} x {PACKET}-byte packets pre-queued\n")
    print("| receiver | received/queued | Gb/s | Mpkt/s | CPU s | kernel drops | chunk-dropped |")
    print("|---|---|---|---|---|---|---|")
    for d in out["drain"]:
        print(
            f"| {d['receiver']} | {d['received']}/{d['packets']} | {d['gbps']:.1f} | "
            f"{d['mpps']:.2f} | {d['cpu_s']:.2f} | {d.get('kernel_drops', '-')} | "
            f"{d.get('dropped', '-')} |"
        )
    print_drain_medians(out["drain_median"], rounds)
    print(f"\n## Loss versus rate, loopback, {seconds:g} s per point (0 = sender's limit)\n")
    print(
        "| engine | asked Gb/s | sent Gb/s | sent | received | chunk-dropped | lost "
        "| kernel drops | rx CPU |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for s in out["sweep"]:
        print(
            f"| {s['engine']} | {s['rate_gbps']:g} | {s['sent_gbps']:.1f} | {s['sent']} | "
            f"{s['received']} | {s['dropped']} | {s['lost']} | {s['kernel_drops']} | "
            f"{s['receiver_cpu']:.0%} |"
        )
    for note in out["notes"]:
        print(f"\nNote: {note}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(out, f, indent=2)
    return out


if __name__ == "__main__":
    main()
