"""A capture's defaults, as the Python side reads them: the capture settings
(capture/config.py), the command line's options and the cluster's nodes use these
names. Each value is the core's own (``_core.capture_defaults()``, from
``CaptureSpec::new`` in crates/voltstream-core/src/capture/spec.rs): one source for
a TOML file, a verb and a bare ``_core.Capture`` alike. Imports only the extension:
every folder may use this module.
"""

from __future__ import annotations

from voltstream import _core

_DEFAULT = _core.capture_defaults()
NETWORK, ENGINE, CHUNKS, THREADS = (_DEFAULT[k] for k in ("network", "engine", "chunks", "threads"))

#: Packets per stream in one chunk.
PACKETS_PER_CHUNK: int = CHUNKS["packets_per_chunk"]
#: Chunks in the capture's pool.
NCHUNKS: int = CHUNKS["nchunks"]
#: Chunks open at once for late packets (the reorder window).
WINDOW: int = CHUNKS["window"]
#: A jump of more than this many chunks resynchronises the timeline.
RESYNC_CHUNKS: int = CHUNKS["resync_chunks"]
#: MiB of kernel memory for unread packets (socket buffer, ring, UMEM or queue).
QUEUE_MB: float = NETWORK["queue_bytes"] / 2**20
