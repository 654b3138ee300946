"""The command line as a user runs it: `python -m voltstream.cli` in a process of its own,
for the tests of the CLI and of each verb."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


def run_cli(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """Runs ``voltstream <args>``; returns its exit status, stdout and stderr (text)."""
    return subprocess.run(
        [sys.executable, "-m", "voltstream.cli", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
    )


@contextmanager
def reaped(proc: subprocess.Popen[str]) -> Iterator[subprocess.Popen[str]]:
    """``proc`` for the block; killed and waited for if it still runs when the block
    ends (a failed assertion or a timeout in it), so that no test leaves it behind."""
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)


def fold_of_a_file(sim: tuple[str, ...], fold: tuple[str, ...], path: Path) -> Path:
    """``voltstream <sim> --output path`` and then the CPU fold of that file with
    ``fold``'s options: the archive (``file.fits`` beside it) that a live fold of the
    same packets must equal."""
    r = run_cli(*sim, "--output", str(path))
    assert r.returncode == 0, r.stderr
    archive = path.with_name("file.fits")
    r = run_cli("fold", str(path), *fold, "--device", "cpu", "-o", str(archive))
    assert r.returncode == 0, r.stderr
    return archive
