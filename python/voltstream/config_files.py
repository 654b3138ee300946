"""Configuration files read one way: TOML read and parsed, then validated by pydantic,
every failure a ConfigError that names the file and every wrong key.

Shared by the stream descriptions (``streams.py``), the capture files
(``capture/config.py``) and the pipeline files (``pipeline_file.py``), so all report
their errors alike. ``tomllib`` keeps no positions, so ``key_lines`` finds the line
of each key and table in the text, for errors that name their line too; ``to_toml``
writes a configuration back (``voltstream run --print-config``).
"""

from __future__ import annotations

import json
import re
import tomllib
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from pydantic import ValidationError

from voltstream.errors import ConfigError, FormatError

__all__ = ["key_lines", "line_of", "read_json_object", "read_toml", "to_toml", "validated"]

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


def validated(
    source: str,
    check: Callable[[Any], T],
    data: Any,
    skip: int = 0,
    where: Callable[[tuple[Any, ...]], str] | None = None,
) -> T:
    """``check(data)`` (a pydantic validation), its errors one ConfigError from
    ``source`` naming every wrong key, dotted; ``skip`` leading parts of each key are
    dropped (a tagged union puts its tag first, which the user never wrote).
    ``where(loc)``, when given, says where in the file a key is ("line 7"): each
    error then goes on a line of its own, led by it."""
    try:
        return check(data)
    except ValidationError as e:
        errors = [(err["loc"][skip:], err["msg"]) for err in e.errors()]
        raise ConfigError(problems_text(source, errors, where)) from None


def problems_text(
    source: str,
    errors: list[tuple[tuple[Any, ...], str]],
    where: Callable[[tuple[Any, ...]], str] | None = None,
) -> str:
    """Errors (key path, message) as one message from ``source``."""

    def key(loc: tuple[Any, ...]) -> str:
        return ".".join(str(p) for p in loc) or "(top)"

    if where is None:
        return f"{source}: " + "; ".join(f"{key(loc)}: {msg}" for loc, msg in errors)
    lines = [f"{source}: {len(errors)} error{'s' if len(errors) > 1 else ''}:"]
    lines += [f"  {where(loc)}: {key(loc)}: {msg}" for loc, msg in errors]
    return "\n".join(lines)


# A table header ([a.b] or [[a.b]]) and the key of a `key = value` line.
_HEADER = re.compile(r"^\s*\[\[?([^\[\]]+)\]\]?\s*(#.*)?$")
_PART = r"""(?:[A-Za-z0-9_-]+|"[^"]*"|'[^']*')"""  # bare, "quoted" or 'literal'
_KEY = re.compile(rf"^\s*({_PART}(?:\s*\.\s*{_PART})*)\s*=")


def _key_parts(text: str) -> tuple[str, ...]:
    parts = re.findall(r"""[A-Za-z0-9_-]+|"[^"]*"|'[^']*'""", text)
    return tuple(p.strip("\"'") for p in parts)


def _open_brackets(value: str) -> int:
    """Brackets ([ {) a value leaves open, strings and the comment left out."""
    depth, quote, k = 0, "", 0
    while k < len(value):
        c = value[k]
        if quote:
            if c == "\\" and quote == '"':
                k += 1
            elif c == quote:
                quote = ""
        elif c in "\"'":
            quote = c
        elif c == "#":
            break
        elif c in "[{":
            depth += 1
        elif c in "]}":
            depth -= 1
        k += 1
    return depth


def key_lines(text: str) -> dict[tuple[str, ...], int]:
    """The line (from 1) of every table header and key of a TOML text, by key path:
    ``[fold]`` then ``nbin = 0`` gives ("fold",) and ("fold", "nbin"). A value that
    spans lines (an array, a multi-line string) is its key's line; keys inside inline
    tables are their table's key. The first occurrence of a path wins."""
    found: dict[tuple[str, ...], int] = {}
    table: tuple[str, ...] = ()
    depth, in_string = 0, ""
    for number, line in enumerate(text.splitlines(), 1):
        if in_string:
            if in_string in line:
                in_string = ""
            continue
        if depth > 0:
            depth += _open_brackets(line)
            continue
        if m := _HEADER.match(line):
            table = _key_parts(m.group(1))
            found.setdefault(table, number)
            continue
        if m := _KEY.match(line):
            found.setdefault(table + _key_parts(m.group(1)), number)
            value = line[m.end() :]
            for quotes in ('"""', "'''"):
                if value.count(quotes) % 2 == 1:
                    in_string = quotes
            if not in_string:
                depth = max(0, _open_brackets(value))
    return found


def line_of(lines: dict[tuple[str, ...], int], loc: tuple[Any, ...]) -> str:
    """Where key path ``loc`` is: "line N" of the key, or of the nearest table or key
    above it that is in the file (a missing key: its table's header), or "not in
    the file" when none is (a missing table)."""
    keys = tuple(str(p) for p in loc)
    for n in range(len(keys), 0, -1):
        if (number := lines.get(keys[:n])) is not None:
            return f"line {number}"
    return "not in the file"


def to_toml(data: dict[str, Any]) -> str:
    """``data`` (tables of strings, numbers, booleans, lists and tables; None values
    left out) as TOML text that ``tomllib`` reads back to the same."""
    out: list[str] = []
    _write_table(out, (), data)
    return "\n".join(out).lstrip("\n") + "\n"


def _write_table(out: list[str], path: tuple[str, ...], table: dict[str, Any]) -> None:
    plain = {k: v for k, v in table.items() if v is not None and not _is_table(v)}
    if path and (plain or not any(_is_table(v) for v in table.values())):
        out += ["", f"[{'.'.join(_key(p) for p in path)}]"]
    out += [f"{_key(k)} = {_value(v)}" for k, v in plain.items()]
    for k, v in table.items():
        if isinstance(v, dict):
            _write_table(out, (*path, k), v)
        elif _is_table(v):
            for item in v:
                out += ["", f"[[{'.'.join(_key(p) for p in (*path, k))}]]"]
                out += [f"{_key(ik)} = {_value(iv)}" for ik, iv in item.items() if iv is not None]


def _is_table(v: Any) -> bool:
    return isinstance(v, dict) or (
        isinstance(v, list) and bool(v) and all(isinstance(i, dict) for i in v)
    )


def _key(k: str) -> str:
    return k if re.fullmatch(r"[A-Za-z0-9_-]+", k) else json.dumps(k)


def _value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int | float):
        return repr(v) if isinstance(v, float) else str(v)
    if isinstance(v, str):
        return json.dumps(v)  # a JSON string is a TOML basic string
    if isinstance(v, list | tuple):
        return "[" + ", ".join(_value(i) for i in v) + "]"
    raise TypeError(f"no TOML value for {v!r}")
