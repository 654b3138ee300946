"""The F-engine: digitiser samples to channelised-voltage SPEAD heaps.

``plan`` is what both engines are given (shape, PFB weights, where each spectrum's
window lies); ``reference`` the NumPy float64 oracle for the whole chain; ``gpu`` the
CUDA engine's operations checked against it (``kernels``, ``slots``), with
``gpu_ingest`` (blocks in) and ``gpu_output`` (heaps out), ``gpu_naive`` its baseline;
``heaps`` and ``packets`` the output heaps and their SPEAD-64-48 packets, sent by
``output``; ``pipeline`` the live ``voltstream fengine`` (capture to output) with its
katcp ``control``. docs/fengine.md states the contract.
"""

from voltstream.fengine.heaps import (
    DecodedHeap,
    HeapLayout,
    OutputHeap,
    decode_output_heap,
    decode_packets,
    encode_heap,
    heap_counter,
)
from voltstream.fengine.reference import FEngineCounters, FEngineReference, postprocess

__all__ = [
    "DecodedHeap",
    "FEngineCounters",
    "FEngineReference",
    "HeapLayout",
    "OutputHeap",
    "decode_output_heap",
    "decode_packets",
    "encode_heap",
    "heap_counter",
    "postprocess",
]
