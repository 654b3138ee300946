"""One latency run: the Rust hot loop (`_core.LatencySession`) joined to the GPU side
(`LatencyGpu`: the kernels, device memory and streams, in CuPy).

Who owns what (docs/gpu.md, "Low latency"): Rust owns every byte of host memory
(staging slots, GPU-mapped slots, acknowledgements, the abort word) and the receive
thread; CuPy owns the module, the device memory and the streams, and launches the
persistent kernel. Closing goes in the one safe order: stop the loop (the last frame
handed over is a stop frame), make sure the kernel has returned (abort word if it has
not), and only then free the host memory the kernel was reading.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from voltstream.errors import ConfigError, VoltstreamError
from voltstream.latency.reference import frame_shape

log = logging.getLogger("voltstream.latency")

MODES = ("copy", "persistent", "persistent-flag", "zerocopy")
#: Payload bytes of a ``vlat`` frame's packet when the run does not say.
VLAT_PAYLOAD_LEN = 1024
#: Threads per block of the copy mode's kernel when the settings leave it open.
DEFAULT_BLOCK_THREADS = 128
PERSISTENT_MODES = ("persistent", "persistent-flag", "zerocopy")


@dataclass(frozen=True)
class LatencySettings:
    """How frames reach the GPU. `blocks` None: enough blocks for every thread to do at
    most one 16-byte load of the frame (a zero-copy read costs one PCIe round trip per
    load in flight, so parallel loads are the whole game), at most 64."""

    mode: str = "zerocopy"
    packets_per_frame: int = 8
    slots: int = 16
    blocks: int | None = None
    threads: int | None = None
    window: int = 2
    timeout_us: int = 0
    check_pattern: bool = False
    write_combined: bool = False
    records: int = 200_000
    cpu: int | None = None
    standin: bool = False
    idle_limit_s: float = 30.0
    #: How the kernels load the payload (voltstream.latency.gpu.PAYLOAD_LOADS).
    payload_load: str = "cv"
    #: Block 0 alone polls the trailer and relays it to the other blocks in device
    #: memory. None: for zerocopy (its trailer is across PCIe; docs/latency.md).
    relay: bool | None = None
    #: A __threadfence_system() before the ack's release store (not needed; measured).
    ack_fence: bool = False

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ConfigError(f"latency mode {self.mode!r}: use one of {', '.join(MODES)}")

    @property
    def relays(self) -> bool:
        return self.mode == "zerocopy" if self.relay is None else self.relay

    def shape_for(self, frame_bytes: int) -> tuple[int, int]:
        """(blocks, threads per block): as given, else `reference.frame_shape`."""
        if self.blocks is not None:
            return self.blocks, self.threads or DEFAULT_BLOCK_THREADS
        blocks, threads = frame_shape(frame_bytes)
        return blocks, self.threads or threads


def latency_spec(
    bind: str,
    s: LatencySettings,
    format: str = "vlat",
    format_kwargs: dict[str, Any] | None = None,
    frame_field: dict[str, Any] | None = None,
    send_time: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """``_core.LatencySession``'s one argument: the format (``vlat``: FrameSender's
    frames, of ``VLAT_PAYLOAD_LEN`` bytes unless ``format_kwargs`` say), where frames
    arrive, how packets make frames and how frames reach the GPU. Every value is
    ``LatencySettings``' (the verb's defaults); the core fills in none of them."""
    fmt = dict(format_kwargs or {})
    if format == "vlat":
        fmt.setdefault("payload_len", VLAT_PAYLOAD_LEN)
    return {
        "format": {"name": format, **fmt},
        "network": {"bind": bind},
        "frames": {
            "packets_per_frame": s.packets_per_frame,
            "window": s.window,
            "timeout_us": s.timeout_us,
            "frame_field": frame_field,
            "send_time": send_time,
        },
        "handoff": {
            "mode": s.mode,
            "slots": s.slots,
            "threads": s.threads or DEFAULT_BLOCK_THREADS,
            "check_pattern": s.check_pattern,
            "write_combined": s.write_combined,
            "records": s.records,
            "standin": s.standin,
        },
    }


class LatencyRun:
    """A session bound and ready (`local_addr`); `start()` runs it, `wait()` reports,
    `close()` (or the `with` block) tears it down safely."""

    def __init__(
        self,
        bind: str,
        settings: LatencySettings,
        format: str = "vlat",
        format_kwargs: dict[str, Any] | None = None,
        frame_field: dict[str, Any] | None = None,
        send_time: dict[str, Any] | None = None,
    ) -> None:
        from voltstream import _core

        self.settings = s = settings
        self.session = _core.LatencySession(
            latency_spec(bind, s, format, format_kwargs, frame_field, send_time)
        )
        self.frame_bytes = int(self.session.frame_bytes)
        self.blocks, self.threads = s.shape_for(self.frame_bytes)
        self.gpu: Any = None
        self._started = False
        try:
            self._attach()
        except BaseException:
            self.close()
            raise

    def _attach(self) -> None:
        """The GPU side (CuPy: module, device memory, streams), then Rust's host memory
        with CuPy's handles, then the persistent kernel (it waits for frame 1)."""
        s = self.settings
        if s.standin:
            self.session.attach(self.blocks, self.threads)
            return
        from voltstream.latency.gpu import LatencyGpu

        self.gpu = gpu = LatencyGpu(
            self.frame_bytes, s.slots, s.payload_load, s.relays, s.ack_fence
        )
        self.session.attach(
            self.blocks, self.threads, context=gpu.context_handle,
            sum_frame=gpu.sum_frame_function_handle, copy_stream=gpu.copy_stream_ptr,
            device_slots=gpu.device_slots_ptr, accum=gpu.accum_ptr,
        )  # fmt: skip
        if s.mode in PERSISTENT_MODES:
            p = self.session.pointers()
            slots = p["mapped_slots"] if s.mode == "zerocopy" else gpu.device_slots_ptr
            gpu.start_persistent(
                slots,
                p["acks"],
                p["control"],
                self.blocks,
                self.threads,
                int(s.idle_limit_s * 1e9),
                s.check_pattern,
            )

    @property
    def local_addr(self) -> str:
        return str(self.session.local_addr)

    def __enter__(self) -> LatencyRun:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def start(
        self,
        frames: int | None = None,
        seconds: float | None = None,
        idle_s: float | None = None,
    ) -> None:
        self.session.start(cpu=self.settings.cpu, frames=frames, seconds=seconds, idle_s=idle_s)
        self._started = True

    def wait(self, timeout_s: float) -> dict[str, Any]:
        """The run's report once the loop ends (by its limits, or `stop()`); raises
        after `timeout_s` with the loop stopped."""
        report = self.session.join(timeout_s)
        if report is None:
            self.session.stop()
            report = self.session.join(5.0)
            if report is None:
                raise VoltstreamError(f"the latency loop did not stop within {timeout_s + 5} s")
        return dict(report)

    def stop(self) -> None:
        self.session.stop()

    def records(self) -> bytes:
        return bytes(self.session.records())

    def close(self) -> None:
        """Stop the loop, then the kernel, then free memory, in that order. Safe to
        call more than once."""
        if self._started and self.session.running():
            self.session.stop()
            self.session.join(5.0)
        if self.gpu is not None:
            if not self.gpu.wait_stopped(0.5):
                self.session.abort()
                if not self.gpu.wait_stopped(2.0):
                    # Freeing the host memory it reads would crash the GPU context:
                    # keep it (a leak of a few MiB) and say so.
                    log.error("the persistent kernel did not stop; host memory kept")
                    return
        # Host memory first (the kernel has returned; the hand-off synchronises
        # the copy stream as it goes), then the device side and its streams.
        self.session.close()
        if self.gpu is not None:
            self.gpu.close()
            self.gpu = None
