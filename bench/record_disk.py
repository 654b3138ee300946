"""The disk side of bench/record.py: fio's baseline, the tmpfs it mounts, free space,
what the machine and its file systems are, and a cleaner for chunk files.

fio (Debian's `fio` package; a copy that runs without installing it is made by
scripts/fio_portable.sh) writes sequentially with O_DIRECT, one job per directory, all
jobs at once: `--rw=write --direct=1 --ioengine=libaio --iodepth=8 --bs=4M` (32 MiB in
flight per disk, as one 32 MiB chunk write of the recorder), `--end_fsync=1`, each job
bounded by `--runtime` seconds and by a size that fits the free space. Its rate is all
jobs' bytes over the longest job's run time.
"""

from __future__ import annotations

import contextlib
import json
import os
import platform
import shutil
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

FIO_MISSING = (
    "fio is required for the same-run baseline and was not found. Install it "
    "(Debian/Ubuntu: `apt-get install -y fio`), or on a machine without internet carry "
    "the folder scripts/fio_portable.sh makes and pass --fio FOLDER/fio; or pass --no-fio "
    "to run without the baseline (the JSON then says why fio_gbps is null)."
)

GIB = 1 << 30


def find_fio(path: str | None) -> str:
    """The fio to run: `path`, or fio on PATH; SystemExit with how to get it."""
    exe = path or shutil.which("fio")
    if exe is None or not os.access(exe, os.X_OK):
        raise SystemExit(FIO_MISSING if path is None else f"--fio {path}: not executable")
    return exe


def fio_version(exe: str) -> str:
    r = subprocess.run([exe, "--version"], capture_output=True, text=True, timeout=30)
    return r.stdout.strip() or r.stderr.strip()


def free_bytes(d: Path) -> int:
    st = os.statvfs(d)
    return st.f_bavail * st.f_frsize


def fio_write(
    exe: str, dirs: list[Path], seconds: float, *, bs: str, iodepth: int, direct: bool = True
) -> dict:
    """fio's sequential write to `dirs`, one job each, at once; sized to fit."""
    by_fs: dict[int, int] = {}
    for d in dirs:
        by_fs[os.stat(d).st_dev] = by_fs.get(os.stat(d).st_dev, 0) + 1
    jobs, sizes = [], []
    for k, d in enumerate(dirs):
        # Half of the free space, shared by the jobs on that file system, 64 GiB at most.
        share = free_bytes(d) // 2 // by_fs[os.stat(d).st_dev]
        size_mib = max(64, min(64 * 1024, share >> 20))
        sizes.append(size_mib)
        jobs += [f"--name=d{k}", f"--directory={d}", f"--size={size_mib}M"]
    cmd = [
        exe, "--rw=write", f"--bs={bs}", f"--direct={int(direct)}", "--ioengine=libaio",
        f"--iodepth={iodepth}", f"--runtime={seconds:g}", "--end_fsync=1",
        "--output-format=json", *jobs,
    ]  # fmt: skip
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=seconds + 120)
    finally:
        for k, d in enumerate(dirs):
            for f in d.glob(f"d{k}.*"):
                f.unlink(missing_ok=True)
        settled = settle(dirs)
    if r.returncode != 0:
        return {"error": (r.stderr.strip() or r.stdout.strip())[-400:], "command": cmd}
    out = json.loads(r.stdout[r.stdout.index("{") :])
    io = sum(j["write"]["io_bytes"] for j in out["jobs"])
    runtime_s = max(j["job_runtime"] for j in out["jobs"]) / 1e3
    return {
        "gbps": io * 8 / runtime_s / 1e9 if runtime_s > 0 else 0.0,
        "bytes": io,
        "seconds": runtime_s,
        "size_mib_per_job": sizes,
        "per_job_gbps": [j["write"]["bw_bytes"] * 8 / 1e9 for j in out["jobs"]],
        "direct": direct,
        "settle_s": settled,
        "command": " ".join(cmd),
    }


def settle(dirs: list[Path], quiet_s: float = 1.0, limit_s: float = 20.0) -> float:
    """After files were written and deleted: sync, then wait until the disks under
    `dirs` have been quiet (no sector written or discarded, nothing in flight) for
    `quiet_s`, at most `limit_s` (an ext4 mounted with `discard` trims a deleted
    file's blocks for seconds, which would slow the next measurement). Seconds spent."""
    t0 = time.monotonic()
    os.sync()
    stats = []
    for d in dirs:
        dev = os.stat(d).st_dev
        path = Path(f"/sys/dev/block/{os.major(dev)}:{os.minor(dev)}/stat")
        if path.exists() and path not in stats:
            stats.append(path)
    if not stats:  # tmpfs: no block device
        return time.monotonic() - t0

    def activity() -> list[list[str]]:
        # write sectors, in flight, discard sectors (where the kernel counts them)
        return [(f := p.read_text().split())[6:7] + f[8:9] + f[13:14] for p in stats]

    last, quiet_since = activity(), time.monotonic()
    while time.monotonic() - t0 < limit_s:
        time.sleep(0.1)
        now, cur = time.monotonic(), activity()
        if cur != last:
            last, quiet_since = cur, now
        elif now - quiet_since >= quiet_s:
            break
    return time.monotonic() - t0


@contextlib.contextmanager
def tmpfs(size_gib: int) -> Iterator[dict]:
    """A tmpfs of `size_gib` mounted under a temporary folder (and unmounted after);
    /dev/shm where mounting is not allowed. Yields {'path', 'how'}."""
    top = Path(tempfile.mkdtemp(prefix="vs-record-tmpfs-"))
    r = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size_gib}g,mode=700", "tmpfs", str(top)],
        capture_output=True,
        text=True,
    )
    try:
        if r.returncode == 0:
            yield {"path": top, "how": f"tmpfs of {size_gib} GiB mounted by the benchmark"}
        else:
            shm = Path(tempfile.mkdtemp(prefix="vs-record-", dir="/dev/shm"))
            try:
                why = r.stderr.strip()[-200:]
                yield {"path": shm, "how": f"/dev/shm (mount refused: {why})"}
            finally:
                shutil.rmtree(shm, ignore_errors=True)
    finally:
        if r.returncode == 0:
            subprocess.run(["umount", str(top)], capture_output=True)
        with contextlib.suppress(OSError):
            top.rmdir()


def filesystem(d: Path) -> str:
    """'SOURCE fstype' of the mount holding `d` (findmnt), or ''."""
    exe = shutil.which("findmnt")
    if exe is None:
        return ""
    r = subprocess.run([exe, "-no", "SOURCE,FSTYPE", "-T", str(d)], capture_output=True, text=True)
    return " ".join(r.stdout.split())


def machine(label: str | None) -> str:
    """CPU model, cores, memory and kernel; `label` first when given."""
    cpu = platform.processor() or platform.machine()
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / GIB
    text = f"{cpu}, {os.cpu_count()} cores, {mem:.0f} GiB, Linux {platform.release()}"
    return f"{label}: {text}" if label else text


class Cleaner:
    """Deletes chunk files (complete ones only: never a `.partial`) from `<dir>/<scan>`
    while a trial runs, so a tmpfs (or a small disk) never fills; counts them."""

    def __init__(self, dirs: list[Path], scan: str, period_s: float = 0.02):
        self.folders = [d / scan for d in dirs]
        self.period_s, self.deleted = period_s, 0
        self.stop_event = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()

    def sweep(self) -> None:
        for f in self.folders:
            with contextlib.suppress(FileNotFoundError):
                for e in os.scandir(f):
                    if not e.name.endswith(".partial"):
                        with contextlib.suppress(FileNotFoundError):
                            os.unlink(e.path)
                            self.deleted += 1

    def run(self) -> None:
        while not self.stop_event.wait(self.period_s):
            self.sweep()

    def close(self) -> int:
        self.stop_event.set()
        self.thread.join(timeout=10)
        return self.deleted
