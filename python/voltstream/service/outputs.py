"""Output paths checked before a run's work starts: a fold or a capture that can only
fail at its end, after minutes of work, on a missing directory fails at once instead.

Each path's parent directory must exist and be writable; the error names the option
(``-o``, ``--report``, ``--plot``, ``--output``), one line, exit status 2.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

from voltstream.errors import ConfigError


def check_output_path(option: str, path: str | os.PathLike | None) -> None:
    """Raises ConfigError unless ``path`` can be written: its directory exists, is a
    directory and is writable, and ``path`` itself is not a directory."""
    if path is None or path == "":
        return
    p = Path(path)
    parent = p.parent if str(p.parent) else Path(".")
    if p.is_dir():
        raise ConfigError(f"{option} {path}: is a directory; give a file name")
    if not parent.exists():
        raise ConfigError(
            f"{option} {path}: the directory {parent} does not exist; create it first "
            "(mkdir -p) or write elsewhere"
        )
    if not parent.is_dir():
        raise ConfigError(f"{option} {path}: {parent} is not a directory")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise ConfigError(f"{option} {path}: the directory {parent} is not writable")


def check_outputs(pairs: Iterable[tuple[str, str | os.PathLike | None]]) -> None:
    """:func:`check_output_path` for each (option, path) given."""
    for option, path in pairs:
        check_output_path(option, path)
