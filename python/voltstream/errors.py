"""The exception hierarchy. Every error voltstream raises on purpose derives from
VoltstreamError; its message says what was wrong and what to do about it."""


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
