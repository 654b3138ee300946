"""The fold product: coherent dedispersion, detection and folding into pulse profiles.

``reference`` is the NumPy float64 folder (the oracle) and ``FoldSettings`` (what a fold
is asked for); ``plan`` the ``FoldPlan`` (the fold's one Dedisperser and its numbers, made
once per fold); ``gpu`` the GPU engine's operations, with ``gpu_ingest`` (chunks into
device buffers) and ``gpu_output`` (accumulators read out) (``gpu_naive`` its unfused
baseline), and ``kernels`` its Templates and Operations (sources in ``dsp/kernels``).
The drivers that feed them from files or a capture are in ``pipeline/``. Importing this
package needs no CuPy.
"""

from voltstream.fold.reference import Folder, FoldSettings, profile_snr

__all__ = ["FoldSettings", "Folder", "profile_snr"]
