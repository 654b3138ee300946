# ruff: noqa: UP031  (the receiver and filler are scripts filled in with %)
"""Loss versus rate and drain rate over a veth between two namespaces (created and removed
here), per engine. The receiver runs in one namespace, the sender (bench/capture.py's paced
_core.Sender, sendmmsg + UDP GSO, 8192-byte payloads) in the other.

    python bench/capture_veth.py [--engines socket,packet_ring,xdp:native,xdp:skb]
                                  [--rates 1,5,0] [--seconds 2] [--drain 15000]
"""

import argparse
import json
import os
import subprocess
import sys
import textwrap
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "bench"))
import capture as bench  # noqa: E402  (bench/capture.py: SENDER, PACKET, HEADER)

RECEIVER = textwrap.dedent(
    """
    import json, resource, sys, threading, time
    from voltstream import _core
    engine, bind, rcvbuf, paused = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4] == "1"
    kw = {}
    if engine.startswith("xdp:"):
        engine, kw["xdp_mode"] = "xdp", engine[4:]
    cap = _core.Capture({
        "format": {"name": "counter", "payload_len": %d},
        "network": {"bind": bind, "queue_bytes": rcvbuf},
        "engine": {"kind": engine, **kw},
        "chunks": {"packets_per_chunk": 64, "nchunks": 128, "window": 2},
    })
    cap.start(paused=paused)
    cstart = None
    done = False
    def consume():
        while True:
            ch = cap.next_chunk(0.05)
            if ch is None:
                if done:
                    return
                continue
            ch.release()
    t = threading.Thread(target=consume, daemon=True)
    t.start()
    def cpu():
        r = resource.getrusage(resource.RUSAGE_SELF)
        return r.ru_utime + r.ru_stime
    cstart = cpu()
    print(cap.address, flush=True)
    cmd = sys.stdin.readline().split()
    if cmd[0] == "resume":  # drain: time until `n` packets were accounted
        n = int(cmd[1])
        drops0 = cap.stats()["kernel_drops"]
        c0, t0 = cpu(), time.perf_counter()
        cap.resume()
        while cap.stats()["packets"] < n - drops0 and time.perf_counter() - t0 < 30:
            time.sleep(0.0005)
        secs, c = time.perf_counter() - t0, cpu() - c0
        sys.stdin.readline()
    else:
        c0, t0 = cpu(), time.perf_counter()
        n = int(cmd[1])
        t1 = time.perf_counter()
        while (cap.stats()["packets"] + cap.stats()["kernel_drops"] < n
               and time.perf_counter() - t1 < 2):
            time.sleep(0.001)
        secs, c = 0, cpu() - cstart
    cap.stop()
    done = True
    t.join(5)
    st = cap.stats()
    print(json.dumps({"stats": st, "secs": secs, "cpu": c}), flush=True)
    """
    % (bench.PACKET - bench.HEADER)
)

FILL = textwrap.dedent(
    """
    import sys
    sys.path.insert(0, "%s/bench")
    import capture as bench
    print(bench.fill(sys.argv[1], int(sys.argv[2])))
    """
    % REPO
)


def sh(*a):
    subprocess.run(a, check=True, capture_output=True, timeout=10)


def setup():
    tag = os.getpid() % 10000
    rx_ns, tx_ns, rx_if, tx_if = f"vb{tag}r", f"vb{tag}t", f"vb{tag}a", f"vb{tag}b"
    sh("ip", "netns", "add", rx_ns)
    sh("ip", "netns", "add", tx_ns)
    sh(
        "ip",
        "link",
        "add",
        rx_if,
        "netns",
        rx_ns,
        "mtu",
        "9000",
        "type",
        "veth",
        "peer",
        "name",
        tx_if,
        "netns",
        tx_ns,
        "mtu",
        "9000",
    )
    for ns, i, h in ((rx_ns, rx_if, 1), (tx_ns, tx_if, 2)):
        sh("ip", "-n", ns, "addr", "add", f"10.77.{tag % 250}.{h}/30", "dev", i)
        sh("ip", "-n", ns, "link", "set", i, "up")
    return rx_ns, tx_ns, f"10.77.{tag % 250}.1"


def python_in(ns, code, *args):
    """The command line that runs Python ``code`` with ``args`` in namespace ``ns``."""
    return ["ip", "netns", "exec", ns, sys.executable, "-c", code, *args]


def receiver(rx_ns, engine, bind, rcvbuf, paused):
    p = subprocess.Popen(
        python_in(rx_ns, RECEIVER, engine, bind, str(rcvbuf), "1" if paused else "0"),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    addr = p.stdout.readline().strip()
    if not addr:
        raise RuntimeError(p.stderr.read())
    return p, addr


def sweep_point(rx_ns, tx_ns, ip, engine, rate, seconds):
    p, addr = receiver(rx_ns, engine, f"{ip}:7300", 64 << 20, False)
    # Warm-up datagram to another port, so ARP is resolved before the clock runs.
    subprocess.run(
        python_in(tx_ns, f"import socket; socket.socket(2, 2).sendto(b'x', ('{ip}', 7301))"),
        check=True,
        timeout=10,
    )
    time.sleep(0.1)
    r = subprocess.run(
        python_in(tx_ns, bench.SENDER, addr, str(rate), str(seconds), str(bench.PACKET)),
        capture_output=True,
        text=True,
        timeout=seconds + 60,
    )
    if r.returncode:
        raise RuntimeError(r.stderr[-500:])
    sent = json.loads(r.stdout)
    out, err = p.communicate(f"stop {sent['sent']}\n", timeout=60)
    res = json.loads(out.strip().splitlines()[-1])
    st = res["stats"]
    s0 = st["streams"][0]
    return {
        "engine": engine,
        "rate": rate,
        "sent_gbps": sent["gbps"],
        "sent": sent["sent"],
        "received": s0["received"],
        "dropped": s0["dropped"],
        "lost": sent["sent"] - s0["received"] - s0["dropped"],
        "malformed": st["malformed"],
        "kernel_drops": st["kernel_drops"],
        "rx_cpu": res["cpu"] / sent["seconds"],
        "xdp": st.get("xdp"),
    }


def drain_point(rx_ns, tx_ns, ip, engine, n):
    p, addr = receiver(rx_ns, engine, f"{ip}:7302", n * bench.PACKET * 3 + (64 << 20), True)
    r = subprocess.run(
        ["ip", "netns", "exec", tx_ns, sys.executable, "-c", FILL, addr, str(n)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    if r.returncode:
        raise RuntimeError(r.stderr[-500:])
    queued = int(r.stdout)
    time.sleep(0.1)
    p.stdin.write(f"resume {queued}\n")
    p.stdin.flush()
    out, err = p.communicate("stop\n", timeout=60)
    res = json.loads(out.strip().splitlines()[-1])
    st = res["stats"]
    got = st["streams"][0]["received"]
    return {
        "engine": engine,
        "queued": queued,
        "received": got,
        "secs": res["secs"],
        "gbps": got * bench.PACKET * 8 / res["secs"] / 1e9,
        "cpu": res["cpu"],
        "kernel_drops": st["kernel_drops"],
        "malformed": st["malformed"],
    }


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--engines", default="socket,packet_ring,xdp:native,xdp:skb")
    ap.add_argument("--rates", default="1,5,0")
    ap.add_argument("--seconds", type=float, default=2.0)
    ap.add_argument("--drain", type=int, default=0, help="packets queued per drain run (0: skip)")
    a = ap.parse_args()
    rx_ns, tx_ns, ip = setup()
    try:
        engines = a.engines.split(",")
        if a.drain:
            print("| engine | received/queued | s | Gb/s | rx CPU s | kernel drops | malformed |")
            print("|---|---|---|---|---|---|---|")
            for e in engines:
                d = drain_point(rx_ns, tx_ns, ip, e, a.drain)
                print(
                    f"| {e} | {d['received']}/{d['queued']} | {d['secs']:.3f} | {d['gbps']:.1f} "
                    f"| {d['cpu']:.2f} | {d['kernel_drops']} | {d['malformed']} |",
                    flush=True,
                )
        print(
            "\n| engine | asked Gb/s | sent Gb/s | sent | received | chunk-dropped | lost "
            "| malformed | kernel drops | rx CPU |"
        )
        print("|---|---|---|---|---|---|---|---|---|---|")
        for e in engines:
            for rate in [float(r) for r in a.rates.split(",")]:
                s = sweep_point(rx_ns, tx_ns, ip, e, rate, a.seconds)
                print(
                    f"| {e} | {rate:g} | {s['sent_gbps']:.1f} | {s['sent']} | {s['received']} "
                    f"| {s['dropped']} | {s['lost']} | {s['malformed']} | {s['kernel_drops']} "
                    f"| {s['rx_cpu']:.0%} |",
                    flush=True,
                )
    finally:
        for ns in (rx_ns, tx_ns):
            subprocess.run(["ip", "netns", "del", ns], capture_output=True, timeout=10)


if __name__ == "__main__":
    main()
