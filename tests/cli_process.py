"""The command line as a user runs it: `python -m voltstream.cli` in a process of its own,
for the tests of the CLI and of each verb."""

from __future__ import annotations

import subprocess
import sys


def run_cli(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """Runs ``voltstream <args>``; returns its exit status, stdout and stderr (text)."""
    return subprocess.run(
        [sys.executable, "-m", "voltstream.cli", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
    )
