"""A capture's defaults, each set once for the Python side: the capture settings
(capture_config.py), the command line's options and the cluster's nodes read them here.

The Rust binding (``_core.Capture``) keeps defaults of its own for a direct call
(8 chunks, a window of 2, crates/voltstream-py/src/capture.rs); every capture the
package opens goes through ``CaptureSettings.capture_kwargs()``, which passes each of
these explicitly, so the binding's never apply to it. No imports: every folder may
use this module.
"""

from __future__ import annotations

#: Packets per stream in one chunk.
PACKETS_PER_CHUNK = 256
#: Chunks in the capture's pool.
NCHUNKS = 16
#: Chunks open at once for late packets (the reorder window).
WINDOW = 4
#: A jump of more than this many chunks resynchronises the timeline.
RESYNC_CHUNKS = 64
#: MiB of kernel memory for unread packets (socket buffer, ring, UMEM or queue).
QUEUE_MB = 64.0
