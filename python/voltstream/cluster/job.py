"""`NodeJob`: what the driver hands one node (the driver makes it, the node and its
fold engines read it; a module of its own so that neither imports the other)."""

from __future__ import annotations

from dataclasses import dataclass, field

from voltstream.fold.reference import FoldSettings
from voltstream.formats import StreamFormat
from voltstream.observation import Observation


@dataclass(frozen=True)
class NodeJob:
    """Everything one node needs, made by the driver (pickled to the node's worker).

    ``source``: ``HOST:PORT`` to capture ``fmt`` (this subband's stream, its own
    centre frequency), or a file (DADA/VDIF) on that node. ``obs``: this subband, its
    start the observation's (phase 0, row 0). ``band_freqs_mhz``: every channel of the
    whole band, for the dedispersion's cut and the folder's reference frequency
    ``band_centre_mhz`` (the merged archive must be the whole band's fold);
    ``settings.nfft`` is the whole band's FFT length. The observation starts at packet
    ``start_packet`` of a live stream; a file's first sample is ``file_offset``
    samples after the start (from the file's own start time).
    """

    node: str
    source: str
    obs: Observation
    settings: FoldSettings
    band_freqs_mhz: tuple[float, ...]
    band_centre_mhz: float
    duration_s: float
    fmt: StreamFormat | None = None
    start_packet: int = 0
    file_offset: int = 0
    #: None: a node captures until the driver's stop (or its duration), however long
    #: its stream pauses: a sender that stalls for seconds (a busy machine) must not
    #: end one node's part of the observation while the others go on.
    idle_timeout_s: float | None = None
    device: str = "cpu"  # where the node folds: cpu (NumPy) or gpu (fold/gpu.py)
    merger: str = "voltstream-merger"  # the Dask Variable holding the merger's handle
    stop: str = "voltstream-stop"  # the Dask Event that ends the observation
    capture: dict = field(default_factory=dict)  # CaptureSettings keywords

    @property
    def is_file(self) -> bool:
        return self.source_is_file(self.source)

    @staticmethod
    def source_is_file(source: str) -> bool:
        """A path, not HOST:PORT (a path may hold a colon only after a slash)."""
        return ":" not in source or "/" in source.partition(":")[0]
