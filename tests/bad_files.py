"""Files a reader must refuse, and the check that it does: shared by the tests of every
file format (DADA, PSRFITS, the baseband file source)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from voltstream.errors import FormatError


def random_file(path: Path, nbytes: int, seed: int = 0) -> Path:
    """``nbytes`` random bytes at ``path``: binary data of no format."""
    rng = np.random.default_rng(seed)
    path.write_bytes(rng.integers(0, 256, size=nbytes, dtype=np.uint8).tobytes())
    return path


def refuses(read: Callable[[Path], object], path: Path, match: str, error=FormatError) -> None:
    """``read(path)`` raises ``error`` with a message matching ``match``."""
    with pytest.raises(error, match=match):
        read(path)
