"""voltstream: real-time backend for radio telescopes.

Lossless UDP capture into time-ordered chunks with exact loss accounting,
coherent dedispersion and folding of pulsars, channelization, and recording.
"""

from voltstream.errors import (
    ConfigError,
    FormatError,
    TruncatedFileError,
    VoltstreamError,
)
from voltstream.observation import FoldedArchive, Observation

__all__ = [
    "ConfigError",
    "FoldedArchive",
    "FormatError",
    "Observation",
    "TruncatedFileError",
    "VoltstreamError",
]
__version__ = "0.1.0"
