"""Low-latency acquisition, Python side (issue 14; docs/research/low-latency-design.md).

- :mod:`.reference`: the memory layout shared with Rust and the kernels, as constants
  and NumPy dtypes, and the NumPy reference of the kernels' sums and test pattern.
- :mod:`.gpu`: :class:`~.gpu.LatencyGpu`, the device side (CuPy): compiled kernels,
  device slots, accumulators, streams, and the raw handles Rust's session uses.
- :mod:`.cupy_driver`: a host side in Python + CuPy for GPU tests and device probes.

Only :mod:`.reference` is imported here; the others import CuPy when used.
"""

from voltstream.latency.reference import frame_sums, pattern_payload, payload_cap, slot_stride

__all__ = ["frame_sums", "pattern_payload", "payload_cap", "slot_stride"]
