"""The F-engine: digitiser samples to channelised-voltage SPEAD heaps.

``reference`` is the NumPy float64 oracle for the whole chain and ``heaps`` the
output heap layout and its SPEAD-64-48 packets; docs/fengine.md states the contract
the GPU implementation must match.
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
