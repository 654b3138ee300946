"""Fixtures several test files share."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest


@pytest.fixture
def disks() -> Iterator[list[Path]]:
    """Three directories on a RAM file system (/dev/shm), standing in for disks:
    these tests check what lands, not how fast a disk is (bench/record.py does)."""
    base = Path(tempfile.mkdtemp(dir="/dev/shm" if Path("/dev/shm").is_dir() else None))
    dirs = [base / f"disk{k}" for k in range(3)]
    for d in dirs:
        d.mkdir()
    yield dirs
    shutil.rmtree(base, ignore_errors=True)
