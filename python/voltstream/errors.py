"""The exception hierarchy. Every error voltstream raises on purpose derives from
VoltstreamError; its message says what was wrong and what to do about it."""

from types import ModuleType


class VoltstreamError(Exception):
    """Base class of every deliberate voltstream error."""


class ConfigError(VoltstreamError, ValueError):
    """A command-line option or configuration value is invalid."""


class FormatError(VoltstreamError, ValueError):
    """A file or packet does not follow its format (bad header, missing key...)."""


class TruncatedFileError(FormatError):
    """A file ends before the data its header promises."""


class CaptureError(VoltstreamError, OSError):
    """The capture engine could not start or run (port in use, permissions...)."""


class RecordError(VoltstreamError, OSError):
    """Writing data failed (disk full, file system gone read-only...)."""


def optional_module(name: str, needed_by: str, extra: str = "control") -> ModuleType:
    """Import ``name``, a module that needs an optional dependency (``extra``), or
    raise a ConfigError naming the option that asked for it and how to install it."""
    import importlib

    try:
        return importlib.import_module(name)
    except ImportError as exc:
        raise ConfigError(
            f"{needed_by} needs {exc.name or name}, which is not installed: pip install "
            f"'voltstream[{extra}]'"
        ) from None
