"""Log lines of the `voltstream` logger hierarchy, on stderr, as text or JSON lines.

stdout keeps the run's summary (what a script reads); stderr gets everything said
while it runs: warnings, "listening on", stop requests, errors. Text lines are the
message alone (each already names its verb, as `voltstream fold: error: ...`); JSON
lines are one object each (time, level, logger, message), for a log collector.
Python warnings (``warnings.warn``) go the same way, as one line each
(``warning: <message>``, logger ``voltstream.warnings``): not Python's own form, which
names the source file and repeats its line of code.
"""

from __future__ import annotations

import json
import logging
import sys
import time
import warnings
from typing import Any, TextIO

FORMATS = ("text", "json")
LEVELS = ("debug", "info", "warning", "error")


class JsonLines(logging.Formatter):
    """One JSON object per record."""

    def format(self, record: logging.LogRecord) -> str:
        doc = {
            "time": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
            + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        if record.exc_info:
            doc["exception"] = self.formatException(record.exc_info)
        return json.dumps(doc)


def setup(fmt: str = "text", level: str = "info", stream: TextIO | None = None) -> None:
    """Sends the `voltstream` loggers (and Python warnings) to ``stream`` (stderr)
    in ``fmt``, at ``level`` and above; called again, replaces what it set."""
    handler = logging.StreamHandler(stream if stream is not None else sys.stderr)
    handler.setFormatter(JsonLines() if fmt == "json" else logging.Formatter("%(message)s"))
    warnings.showwarning = _warning_line
    for name in ("voltstream", "py.warnings"):
        logger = logging.getLogger(name)
        for old in [h for h in logger.handlers if getattr(h, "voltstream", False)]:
            logger.removeHandler(old)
        handler.voltstream = True  # type: ignore[attr-defined]
        logger.addHandler(handler)
        logger.setLevel(level.upper())
        logger.propagate = False


def _warning_line(
    message: Warning | str, category: type[Warning], filename: str, lineno: int,
    file: Any = None, line: str | None = None,
) -> None:  # fmt: skip
    """``warnings.showwarning`` of the CLI: the message alone, one line, logged."""
    logging.getLogger("voltstream.warnings").warning("warning: %s", message)
