"""Multi-core capture benchmark: the lossless ceiling of K capture cores on loopback.

For K in --cores (default 1, 2, 4): K receiver processes, each pinned to its own core
(os.sched_setaffinity before the capture starts, so the Rust capture thread and the
consumer thread inherit it), each capturing its own UDP port on 127.0.0.1 into chunks
(counter format, 8192-byte packets) with a consumer thread releasing them; and S sender
processes per port pinned to the remaining cores, each a `_core.Sender` (sendmmsg + UDP
GSO). The senders of one port take blocks of packet indices from a shared counter, so
the port sees one index sequence, reordered by at most a few blocks (the capture window
covers that). `voltstream simulate` is not used: it synthesises a signal before sending
and has no counter format, so it is slower than stamping indices into a fixed buffer.

For each receiver kind and K, the senders first run unpaced; if that is lossless the
ceiling is at least the senders' rate ("sender-bound"), otherwise the total rate is
bisected between 0 and that rate. Each point runs --seconds; every counter of every
receiver is reported (received, late, duplicate, dropped, missing, malformed, foreign,
kernel drops, chunks emitted/dropped, resyncs), with the receivers' CPU (user + system
time of the process over the sending window, so 1.0 = one core busy).

Receiver kinds (--receivers): `socket` and `packet_ring` are voltstream's engines with
assembly into chunks; `recvmmsg` is the same-run baseline for scale: a receiver that only
counts, one bare recvmmsg(64 messages) loop per port, called from Python through ctypes
(one call per 64 packets, so the interpreter's cost is small), on the same ports, cores,
senders and receive buffer. On loopback the kernel's receive work (and, for packet_ring,
the copy into the ring) runs on the senders' cores; the receiver's core pays the copy
to user space (socket, recvmmsg) or the read of the ring (packet_ring).

Every run is bounded: --seconds per point (at most 10), a per-sender packet cap, hard
timeouts on every child process, and --budget seconds for the whole run after which the
remaining points are skipped (and said so). Only 127.0.0.1 is used.

    python bench/capture_multicore.py [--quick] [--cores 1,2,4] [--seconds 2]
        [--receivers socket,packet_ring,recvmmsg] [--rates 5,10] [--senders-per-port N]
        [--steps 4] [--budget 280] [--json out.json]
"""

from __future__ import annotations

import argparse
import ctypes
import json
import multiprocessing as mp
import os
import platform
import resource
import socket
import threading
import time

import numpy as np

PACKET = 8192  # UDP payload bytes
HEADER = 10  # counter format: u64 index, u16 stream
SO_RCVBUFFORCE = 33
# Chunks of 512 packets (4 MiB) and a window of 8 chunks: 4096 packets of reordering
# between the senders of one port are absorbed before a packet would count as late.
PACKETS_PER_CHUNK = 512
NCHUNKS = 32
WINDOW = 8
BLOCK = 256  # packets a sender stamps and sends per call
MAX_SENDER_GBPS = 200.0  # for the per-sender packet cap only
STEP_LIMIT_S = 30.0  # hard limit on any wait for a child


def cpu_seconds() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def pin(core: int) -> None:
    os.sched_setaffinity(0, {core})


# ---------------------------------------------------------------- receivers (children)


class VoltstreamReceiver:
    """A voltstream capture on its own port, chunks released by a consumer thread."""

    def __init__(self, engine: str, rcvbuf: int):
        from capture import Consumer  # bench/capture.py: releases chunks on a thread
        from voltstream import _core

        self.cap = _core.Capture(
            {
                "format": {"name": "counter", "payload_len": PACKET - HEADER},
                "network": {"bind": "127.0.0.1:0", "queue_bytes": rcvbuf},
                "engine": {"kind": engine},
                "chunks": {
                    "packets_per_chunk": PACKETS_PER_CHUNK,
                    "nchunks": NCHUNKS,
                    "window": WINDOW,
                },
            }
        )
        self.cap.start()
        self.address = self.cap.address
        self.consumer = Consumer(self.cap)

    def seen(self) -> int:
        st = self.cap.stats()
        return st["packets"] + st["kernel_drops"]

    def finish(self) -> dict:
        self.cap.stop()
        self.consumer.close()
        st = self.cap.stats()
        t = st["totals"]
        return {
            "engine": st["engine"],
            "received": t["received"],
            "late": t["late"],
            "duplicate": t["duplicate"],
            "dropped": t["dropped"],
            "missing": t["missing"],
            "malformed": st["malformed"],
            "foreign": st["foreign"],
            "accounted": st["packets"],
            "kernel_drops": st["kernel_drops"],
            "chunks_emitted": st["chunks_emitted"],
            "chunks_dropped": st["chunks_dropped"],
            "chunks_released": self.consumer.chunks,
            "resyncs": st["resyncs"],
            "rcvbuf": st["rcvbuf"],
        }


class Iovec(ctypes.Structure):
    _fields_ = [("iov_base", ctypes.c_void_p), ("iov_len", ctypes.c_size_t)]


class Msghdr(ctypes.Structure):
    _fields_ = [
        ("msg_name", ctypes.c_void_p),
        ("msg_namelen", ctypes.c_uint32),
        ("msg_iov", ctypes.POINTER(Iovec)),
        ("msg_iovlen", ctypes.c_size_t),
        ("msg_control", ctypes.c_void_p),
        ("msg_controllen", ctypes.c_size_t),
        ("msg_flags", ctypes.c_int),
    ]


class Mmsghdr(ctypes.Structure):
    _fields_ = [("msg_hdr", Msghdr), ("msg_len", ctypes.c_uint)]


def udp_socket_drops(port: int) -> int:
    """The kernel's drop count of our UDP socket on `port` (last column of /proc/net/udp)."""
    with open("/proc/net/udp") as f:
        next(f)
        for line in f:
            cols = line.split()
            if int(cols[1].split(":")[1], 16) == port:
                return int(cols[-1])
    return 0


class CountingReceiver:
    """Baseline: a bare recvmmsg loop that only counts packets and bytes (no assembly)."""

    BATCH = 64
    MSG_WAITFORONE = 0x10000

    def __init__(self, rcvbuf: int):
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.setsockopt(socket.SOL_SOCKET, SO_RCVBUFFORCE, rcvbuf)
        # Wake every 50 ms when idle, to see the stop flag.
        timeval = np.array([0, 50_000], np.int64).tobytes()  # struct timeval: 0 s, 50000 us
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, timeval)
        self.sock.bind(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.address = f"127.0.0.1:{self.port}"
        self.packets = self.bytes = self.short = 0
        self.stop_flag = False
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()

    def run(self):
        libc = ctypes.CDLL(None, use_errno=True)
        recvmmsg = libc.recvmmsg
        recvmmsg.restype = ctypes.c_int
        recvmmsg.argtypes = [
            ctypes.c_int,
            ctypes.POINTER(Mmsghdr),
            ctypes.c_uint,
            ctypes.c_int,
            ctypes.c_void_p,
        ]
        bufs = np.zeros((self.BATCH, PACKET + 64), np.uint8)
        iovs = (Iovec * self.BATCH)()
        msgs = (Mmsghdr * self.BATCH)()
        for i in range(self.BATCH):
            iovs[i].iov_base = bufs[i].ctypes.data
            iovs[i].iov_len = PACKET + 64
            msgs[i].msg_hdr.msg_iov = ctypes.pointer(iovs[i])
            msgs[i].msg_hdr.msg_iovlen = 1
        # The kernel's msg_len fields seen as one strided array: summing them costs ~2 us
        # per call, where a Python loop over the messages would cost ~20 us.
        lens = np.ndarray(
            (self.BATCH,),
            np.uint32,
            buffer=msgs,
            offset=Mmsghdr.msg_len.offset,
            strides=(ctypes.sizeof(Mmsghdr),),
        )
        fd = self.sock.fileno()
        while not self.stop_flag:
            n = recvmmsg(fd, msgs, self.BATCH, self.MSG_WAITFORONE, None)
            if n <= 0:
                continue  # timeout (EAGAIN) or EINTR
            got = lens[:n]
            self.packets += n
            self.bytes += int(got.sum())
            self.short += n - int(np.count_nonzero(got == PACKET))

    def seen(self) -> int:
        return self.packets + udp_socket_drops(self.port)

    def finish(self) -> dict:
        self.stop_flag = True
        self.thread.join(timeout=10)
        drops = udp_socket_drops(self.port)
        self.sock.close()
        return {
            "engine": "recvmmsg",
            "received": self.packets,
            "bytes": self.bytes,
            "wrong_size": self.short,
            "accounted": self.packets,
            "kernel_drops": drops,
        }


def settle(rx, expected: int, limit: float = 3.0) -> None:
    """Waits until every sent packet is received or dropped, or the count stops moving."""
    t0, last, last_t = time.perf_counter(), -1, time.perf_counter()
    while time.perf_counter() - t0 < limit:
        seen = rx.seen()
        if seen >= expected:
            return
        if seen != last:
            last, last_t = seen, time.perf_counter()
        elif time.perf_counter() - last_t > 0.3:
            return
        time.sleep(0.005)


def receiver_main(kind: str, core: int, rcvbuf: int, conn) -> None:
    try:
        pin(core)
        rx = CountingReceiver(rcvbuf) if kind == "recvmmsg" else VoltstreamReceiver(kind, rcvbuf)
        conn.send(("ready", rx.address))
        conn.recv()  # go
        c0, t0 = cpu_seconds(), time.perf_counter()
        _, sent = conn.recv()  # senders done: how many they sent to this port
        settle(rx, sent)
        cpu, wall = cpu_seconds() - c0, time.perf_counter() - t0
        res = rx.finish()
        res.update(core=core, cpu_s=cpu, wall_s=wall, cpu_frac=cpu / wall if wall > 0 else 0.0)
        conn.send(("done", res))
    except BaseException as e:  # noqa: BLE001 - the parent reports it
        conn.send(("error", f"receiver {kind} on core {core}: {type(e).__name__}: {e}"))


# ------------------------------------------------------------------ senders (children)


def sender_main(dest, core, rate_gbps, seconds, next_index, max_packets, conn) -> None:
    try:
        from voltstream import _core

        pin(core)
        tx = _core.Sender(dest)
        buf = np.zeros((BLOCK, PACKET), np.uint8)
        buf[:, HEADER:] = (np.arange(PACKET - HEADER, dtype=np.uint32) % 251).astype(np.uint8)
        offsets = np.arange(BLOCK, dtype=np.uint64)
        conn.send(("ready", None))
        conn.recv()  # go
        # The schedule is kept here, across calls: each call paces its own burst (25%
        # faster than the target, so it ends before the next is due) from its own start,
        # and short calls alone would lose the time between them.
        pace = rate_gbps * 1.25 if rate_gbps > 0 else 0.0
        sent, gso, t0 = 0, None, time.perf_counter()
        while time.perf_counter() - t0 < seconds and sent < max_packets:
            if rate_gbps > 0:
                ahead = t0 + sent * PACKET * 8 / (rate_gbps * 1e9) - time.perf_counter()
                if ahead > 0:
                    time.sleep(ahead)
            with next_index.get_lock():
                first = next_index.value
                next_index.value += BLOCK
            idx = (offsets + np.uint64(first)).astype(">u8")
            buf[:, :8] = idx.view(np.uint8).reshape(BLOCK, 8)
            r = tx.send(buf, PACKET, pace)
            sent, gso = sent + r["packets"], r["gso"]
        secs = time.perf_counter() - t0
        conn.send(("done", {"core": core, "sent": sent, "seconds": secs, "gso": gso}))
    except BaseException as e:  # noqa: BLE001 - the parent reports it
        conn.send(("error", f"sender on core {core}: {type(e).__name__}: {e}"))


# ----------------------------------------------------------------------- orchestration


def expect(conn, what: str, limit: float):
    if not conn.poll(limit):
        raise TimeoutError(f"no '{what}' from a child within {limit:g} s")
    tag, value = conn.recv()
    if tag == "error":
        raise RuntimeError(value)
    if tag != what:
        raise RuntimeError(f"expected '{what}' from a child, got '{tag}'")
    return value


def cpu_topology() -> dict:
    """Which logical CPUs share a physical core (hyperthreads), for the record."""
    out = {}
    for cpu in sorted(os.sched_getaffinity(0)):
        path = f"/sys/devices/system/cpu/cpu{cpu}/topology/thread_siblings_list"
        try:
            with open(path) as f:
                out[cpu] = f.read().strip()
        except OSError:
            out[cpu] = "?"
    return out


def plan_cores(k: int, senders_per_port: int | None, allowed) -> dict:
    """The first allowed core for this process, the next K for receivers, the rest
    for senders; shares cores (and says so) when there are too few."""
    cpus = sorted(allowed)
    receivers = [cpus[(1 + i) % len(cpus)] for i in range(k)]
    free = [c for c in cpus[1 + k :]]
    s = senders_per_port or max(1, min(4, len(free) // k))
    pool = free or [c for c in cpus if c not in receivers] or cpus
    senders = [[pool[(p * s + j) % len(pool)] for j in range(s)] for p in range(k)]
    shared = len(cpus) < 1 + k + k * s
    return {"receivers": receivers, "senders": senders, "shared_cores": shared}


def run_point(ctx, kind: str, k: int, rate_gbps: float, seconds: float, cores: dict, rcvbuf):
    """One measurement: K receivers of `kind`, their senders at `rate_gbps` in total."""
    procs, rx_conns, tx_conns = [], [], []
    counters = []  # kept alive until the children have them (start() drops its args)
    s = len(cores["senders"][0])
    per_sender = rate_gbps / (k * s)
    max_packets = int(seconds * MAX_SENDER_GBPS * 1e9 / (8 * PACKET))
    try:
        for core in cores["receivers"]:
            a, b = ctx.Pipe()
            p = ctx.Process(target=receiver_main, args=(kind, core, rcvbuf, b), daemon=True)
            p.start()
            procs.append(p)
            rx_conns.append(a)
        addrs = [expect(c, "ready", STEP_LIMIT_S) for c in rx_conns]
        port_of_sender = []
        for port, (addr, sender_cores) in enumerate(zip(addrs, cores["senders"], strict=True)):
            counter = ctx.Value("Q", 0)
            counters.append(counter)
            for core in sender_cores:
                a, b = ctx.Pipe()
                args = (addr, core, per_sender, seconds, counter, max_packets, b)
                p = ctx.Process(target=sender_main, args=args, daemon=True)
                p.start()
                procs.append(p)
                tx_conns.append(a)
                port_of_sender.append(port)
        for c in tx_conns:
            expect(c, "ready", STEP_LIMIT_S)
        for c in rx_conns + tx_conns:
            c.send(("go", None))
        senders = [expect(c, "done", seconds + STEP_LIMIT_S) for c in tx_conns]
        sent = [0] * k
        for port, r in zip(port_of_sender, senders, strict=True):
            sent[port] += r["sent"]
        for port, c in enumerate(rx_conns):
            c.send(("sent", sent[port]))
        receivers = [expect(c, "done", STEP_LIMIT_S) for c in rx_conns]
    finally:
        for p in procs:
            p.join(timeout=5)
            if p.is_alive():
                p.kill()
                p.join(timeout=5)
    return summarise(kind, k, rate_gbps, seconds, sent, senders, receivers)


LOSS_KEYS = ("late", "duplicate", "dropped", "missing", "malformed", "foreign")
CHUNK_KEYS = ("chunks_emitted", "chunks_dropped", "chunks_released", "resyncs")


def summarise(kind, k, rate_gbps, seconds, sent, senders, receivers) -> dict:
    window = max(r["seconds"] for r in senders)
    total_sent = sum(sent)
    received = sum(r["received"] for r in receivers)
    ports = []
    for port, (n, r) in enumerate(zip(sent, receivers, strict=True)):
        ports.append(dict(r, port=port, sent=n, lost=n - r["received"]))
    point = {
        "receiver": kind,
        "cores": k,
        "asked_gbps": rate_gbps,
        "seconds": window,
        "sent": total_sent,
        "received": received,
        "lost": total_sent - received,
        "kernel_drops": sum(r["kernel_drops"] for r in receivers),
        "offered_gbps": total_sent * PACKET * 8 / window / 1e9,
        "received_gbps": received * PACKET * 8 / window / 1e9,
        "receiver_cpu": [r["cpu_frac"] for r in receivers],
        "senders": len(senders),
        "sender_gso": all(r["gso"] for r in senders),
        "ports": ports,
    }
    for key in LOSS_KEYS + CHUNK_KEYS:
        point[key] = sum(r.get(key, 0) for r in receivers)
    point["lossless"] = all(p["lost"] == 0 for p in ports) and point["chunks_dropped"] == 0
    return point


def find_ceiling(run, steps: int, rates: list[float] | None, deadline: float) -> dict:
    """Runs the fixed `rates`, or: unpaced first, then bisection below it if it lost."""
    points, note = [], None

    def out_of_time():
        return time.monotonic() > deadline

    if rates:
        for r in rates:
            if out_of_time():
                note = "budget spent: remaining rates skipped"
                break
            points.append(run(r))
    else:
        top = run(0.0)
        points.append(top)
        lo, hi = 0.0, top["offered_gbps"]
        if top["lossless"]:
            note = "sender-bound: lossless at the senders' unpaced rate"
        for _ in range(0 if top["lossless"] else steps):
            if out_of_time():
                note = "budget spent: bisection cut short"
                break
            p = run((lo + hi) / 2)
            points.append(p)
            if p["lossless"]:
                lo = max(lo, p["offered_gbps"])
            else:
                hi = (lo + hi) / 2
    good = [p for p in points if p["lossless"]]
    best = max(good, key=lambda p: p["received_gbps"]) if good else None
    return {
        "lossless_gbps": best["received_gbps"] if best else 0.0,
        "lossless_cpu": best["receiver_cpu"] if best else None,
        "lowest_lossy_gbps": min(
            (p["offered_gbps"] for p in points if not p["lossless"]), default=None
        ),
        "note": note,
        "points": points,
    }


def print_tables(out: dict) -> None:
    print("## Lossless ceiling per receiver and number of capture cores\n")
    print(
        "| receiver | cores | senders | lossless Gb/s | lowest lossy offered Gb/s | rx CPU | note |"
    )
    print("|---|---|---|---|---|---|---|")
    for c in out["ceilings"]:
        lossy = "-" if c["lowest_lossy_gbps"] is None else f"{c['lowest_lossy_gbps']:.1f}"
        cpu = "-" if c["lossless_cpu"] is None else ", ".join(f"{x:.0%}" for x in c["lossless_cpu"])
        print(
            f"| {c['receiver']} | {c['cores']} | {c['senders']} | {c['lossless_gbps']:.1f} | "
            f"{lossy} | {cpu} | {c['note'] or ''} |"
        )
    print("\n## Every point\n")
    print(
        "| receiver | cores | asked Gb/s | offered Gb/s | received Gb/s | sent | received "
        "| lost | kernel drops | late | dropped | missing | chunks dropped | rx CPU |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for p in out["points"]:
        cpu = ", ".join(f"{x:.0%}" for x in p["receiver_cpu"])
        asked = f"{p['asked_gbps']:.1f}" if p["asked_gbps"] > 0 else "max"
        print(
            f"| {p['receiver']} | {p['cores']} | {asked} | {p['offered_gbps']:.1f} "
            f"| {p['received_gbps']:.1f} | {p['sent']} | {p['received']} | {p['lost']} | "
            f"{p['kernel_drops']} | {p['late']} | {p['dropped']} | {p['missing']} | "
            f"{p['chunks_dropped']} | {cpu} |"
        )
    for note in out["notes"]:
        print(f"\nNote: {note}")


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="K=1, 0.5 and 1 Gb/s, 0.5 s points")
    ap.add_argument("--cores", default=None, help="capture core counts K (default 1,2,4)")
    ap.add_argument("--receivers", default="socket,packet_ring,recvmmsg")
    ap.add_argument("--rates", default=None, help="total Gb/s list instead of the bisection")
    ap.add_argument("--seconds", type=float, default=None, help="per point (default 2)")
    ap.add_argument("--senders-per-port", type=int, default=None, help="default: fit the cores")
    ap.add_argument("--steps", type=int, default=4, help="bisection steps below the top")
    ap.add_argument("--rcvbuf", type=int, default=64 << 20, help="bytes, every receiver")
    ap.add_argument("--budget", type=float, default=280.0, help="seconds for the whole run")
    ap.add_argument("--json", default=None, metavar="PATH")
    a = ap.parse_args(argv)
    ks = [int(x) for x in (a.cores or ("1" if a.quick else "1,2,4")).split(",") if x]
    kinds = [x for x in a.receivers.split(",") if x]
    rates = [float(r) for r in a.rates.split(",")] if a.rates else ([0.5, 1.0] if a.quick else None)
    seconds = min(a.seconds or (0.5 if a.quick else 2.0), 10.0)
    deadline = time.monotonic() + a.budget
    ctx = mp.get_context("spawn")  # children start clean: no inherited threads or sockets

    out = {
        "machine": {
            "cpus": sorted(os.sched_getaffinity(0)),
            "thread_siblings": cpu_topology(),
            "kernel": platform.release(),
            "python": platform.python_version(),
        },
        "packet_bytes": PACKET,
        "seconds_per_point": seconds,
        "capture": {"packets_per_chunk": PACKETS_PER_CHUNK, "nchunks": NCHUNKS, "window": WINDOW},
        "rcvbuf": a.rcvbuf,
        "points": [],
        "ceilings": [],
        "notes": [],
    }
    # This process only waits on its children: keep it on the first core, off theirs.
    allowed = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {min(allowed)})
    try:
        run_all(ctx, out, ks, kinds, rates, seconds, deadline, a, allowed)
    finally:
        os.sched_setaffinity(0, allowed)
    print_tables(out)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(out, f, indent=2)
    return out


def run_all(ctx, out, ks, kinds, rates, seconds, deadline, a, allowed) -> None:
    for k in ks:
        cores = plan_cores(k, a.senders_per_port, allowed)
        if cores["shared_cores"]:
            out["notes"].append(
                f"K={k}: {len(out['machine']['cpus'])} cores are too few for this process, "
                f"{k} receivers and {k * len(cores['senders'][0])} senders each on its own "
                "core: some share a core, so these figures are not the receivers' ceiling"
            )
        for kind in kinds:

            def run(rate, kind=kind, k=k, cores=cores):
                return run_point(ctx, kind, k, rate, seconds, cores, a.rcvbuf)

            try:
                c = find_ceiling(run, a.steps, rates, deadline)
            except (RuntimeError, TimeoutError, EOFError, OSError) as e:
                # One receiver kind failing (say packet_ring without CAP_NET_RAW) must
                # not cost the other kinds' figures.
                out["notes"].append(f"{kind}, K={k}: failed: {type(e).__name__}: {e}")
                continue
            for p in c["points"]:
                p["receiver_cores"], p["sender_cores"] = cores["receivers"], cores["senders"]
            out["points"] += c.pop("points")
            out["ceilings"].append(
                dict(c, receiver=kind, cores=k, senders=k * len(cores["senders"][0]))
            )


if __name__ == "__main__":
    main()
