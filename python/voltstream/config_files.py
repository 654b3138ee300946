"""Configuration files read one way: TOML read and parsed, then validated by pydantic,
every failure a ConfigError that names the file and every wrong key.

Shared by the stream descriptions (``streams.py``) and the capture files
(``capture_config.py``), so both report their errors alike.
"""

from __future__ import annotations

import json
import tomllib
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from pydantic import ValidationError

from voltstream.errors import ConfigError, FormatError

__all__ = ["read_json_object", "read_toml", "validated"]

T = TypeVar("T")


def read_json_object(path: Path, what: str) -> dict[str, Any] | None:
    """A JSON object from ``path`` (a recording's manifest, a VDIF sidecar), None when
    the file is not there; FormatError naming ``what`` when it is not readable JSON or
    not an object."""
    if not path.is_file():
        return None
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as e:
        raise FormatError(f"{path}: not a readable {what} ({e})") from None
    if not isinstance(data, dict):
        raise FormatError(f"{path}: a {what} is a JSON object, not {type(data).__name__}")
    return data


def read_toml(path: Path, what: str) -> dict[str, Any]:
    """The parsed TOML file; ``what`` (e.g. "the stream description") names it in the
    error when it cannot be read."""
    try:
        return tomllib.loads(path.read_text())
    except OSError as e:
        raise ConfigError(f"cannot read {what} {path}: {e.strerror}") from None
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(f"{path}: not valid TOML: {e}") from None


def validated(source: str, check: Callable[[Any], T], data: Any, skip: int = 0) -> T:
    """``check(data)`` (a pydantic validation), its errors one ConfigError from
    ``source`` naming every wrong key, dotted; ``skip`` leading parts of each key are
    dropped (a tagged union puts its tag first, which the user never wrote)."""
    try:
        return check(data)
    except ValidationError as e:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in err['loc'][skip:]) or '(top)'}: {err['msg']}"
            for err in e.errors()
        )
        raise ConfigError(f"{source}: {problems}") from None
