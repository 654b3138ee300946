"""The CuPy half of the low-latency hand-off (issue 14, design section 2, "hybrid A").

:class:`LatencyGpu` owns what lives on the device: the compiled ``latency.cu`` module,
the device slots (modes copy/persistent/persistent-flag), the per-slot accumulators,
and two non-blocking streams, one for the persistent kernel and one for copies and
per-frame launches. Host memory (staging and mapped slots, acks, the control word) is
the caller's: Rust's session, or ``cupy_driver`` in tests. The raw handles Rust needs
are properties (``context_handle``, ``sum_frame_function_handle``, ``*_ptr``).

Never a hang: nothing here synchronises a stream or the device once a persistent
kernel may be spinning (a device free or sync would wait for it forever);
``wait_stopped`` polls with a deadline, and ``close`` refuses while the kernel runs.
CuPy is imported when a LatencyGpu is built, so this module imports without it.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from voltstream.dsp.cuda import GpuError, Template, cupy_module
from voltstream.errors import ConfigError
from voltstream.latency.reference import (
    ACCUM_BYTES,
    DEFAULT_SLOTS,
    payload_cap,
    slot_stride,
)

__all__ = ["LatencyGpu", "LatencyTemplate", "check_launch"]


#: LATENCY_LOAD values of latency.cu: how the kernels load a frame's payload.
PAYLOAD_LOADS = {"cv": 0, "plain": 1, "cg": 2, "volatile": 3}


class LatencyTemplate(Template):
    """``dsp/kernels/latency.cu``: latency_sum_frame and latency_persistent;
    LATENCY_LOAD picks the payload load instruction (PAYLOAD_LOADS), LATENCY_RELAY
    whether block 0 alone polls the trailer and relays it to the other blocks."""

    source = "latency.cu"
    VARIANTS = (
        *(
            (("LATENCY_LOAD", v), ("LATENCY_RELAY", r))
            for v in PAYLOAD_LOADS.values()
            for r in (0, 1)
        ),
        (("LATENCY_ACK_FENCE", 1),),
    )


def check_launch(blocks: int, threads: int, max_blocks: int | None = None) -> None:
    """The kernels' launch rules: whole warps (their reduction shuffles full warps),
    at most 1024 threads, and for a persistent kernel at most one block per SM, so
    that every block is resident at once (each takes part in every frame)."""
    if threads < 32 or threads > 1024 or threads % 32:
        raise ConfigError(f"threads per block must be a multiple of 32 in 32..1024, got {threads}")
    if blocks < 1:
        raise ConfigError(f"blocks must be >= 1, got {blocks}")
    if max_blocks is not None and blocks > max_blocks:
        raise ConfigError(
            f"a persistent kernel needs all its blocks resident: at most {max_blocks} "
            f"(the device's SM count), got {blocks}"
        )


class LatencyGpu:
    """Device side of one latency session: ``frame_bytes`` per frame, ``nslots`` slots."""

    def __init__(
        self,
        frame_bytes: int,
        nslots: int = DEFAULT_SLOTS,
        payload_load: str = "cv",
        relay: bool = False,
        ack_fence: bool = False,
    ) -> None:
        if nslots < 2 or nslots & (nslots - 1):
            # One slot would put an abort ack and a real ack in the same entry.
            raise ConfigError(f"nslots must be a power of two >= 2, got {nslots}")
        cp = cupy_module()
        self.frame_bytes = frame_bytes
        self.nslots = nslots
        self.payload_cap = payload_cap(frame_bytes)
        self.slot_stride = slot_stride(frame_bytes)
        if payload_load not in PAYLOAD_LOADS:
            raise ConfigError(
                f"payload load {payload_load!r}: use one of {', '.join(PAYLOAD_LOADS)}"
            )
        template = LatencyTemplate(
            {
                "LATENCY_LOAD": PAYLOAD_LOADS[payload_load],
                "LATENCY_RELAY": int(relay),
                "LATENCY_ACK_FENCE": int(ack_fence),
            }
        )
        self._sum_frame = template.kernel("latency_sum_frame")
        self._persistent = template.kernel("latency_persistent")
        self.slots = cp.zeros(nslots * self.slot_stride, dtype=cp.uint8)
        self.accum = cp.zeros(nslots * ACCUM_BYTES, dtype=cp.uint8)
        # The zeros ran on the legacy default stream, which non-blocking streams do
        # not wait for: finish them now, while no persistent kernel can be running.
        cp.cuda.Stream.null.synchronize()
        self.kernel_stream = cp.cuda.Stream(non_blocking=True)
        self.copy_stream = cp.cuda.Stream(non_blocking=True)
        self.device = cp.cuda.runtime.getDevice()
        self.sm_count = int(cp.cuda.runtime.getDeviceProperties(self.device)["multiProcessorCount"])
        self._context = int(cp.cuda.driver.ctxGetCurrent())
        self._launched = False
        self._closed = False

    # Raw handles for the Rust side (integers; valid until close()).
    @property
    def context_handle(self) -> int:
        """The CUcontext CuPy runs in (the device's primary context)."""
        return self._context

    @property
    def sum_frame_function_handle(self) -> int:
        """The CUfunction of latency_sum_frame (CuPy's ``RawKernel.kernel.ptr``)."""
        return int(self._sum_frame.kernel.ptr)

    @property
    def device_slots_ptr(self) -> int:
        return int(self.slots.data.ptr)

    @property
    def accum_ptr(self) -> int:
        return int(self.accum.data.ptr)

    @property
    def kernel_stream_ptr(self) -> int:
        return int(self.kernel_stream.ptr)

    @property
    def copy_stream_ptr(self) -> int:
        """CUstream for copies, stream writes and per-frame launches."""
        return int(self.copy_stream.ptr)

    @property
    def running(self) -> bool:
        """A persistent kernel was launched and has not returned."""
        return self._launched and not self.kernel_stream.done

    def start_persistent(
        self,
        slots_device_ptr: int,
        acks_device_ptr: int,
        control_device_ptr: int,
        blocks: int,
        threads: int,
        idle_limit_ns: int,
        check_pattern: bool = False,
    ) -> None:
        """Launches latency_persistent on the kernel stream; it waits for seq 1.

        ``slots_device_ptr`` is :attr:`device_slots_ptr` (persistent modes) or the
        device pointer of mapped host slots (zerocopy); the caller zeroes host slots
        and acks before this (a leftover trailer or ack of seq 1 would pass as new).
        The accumulators and device slots are zeroed on the kernel stream first.
        ``idle_limit_ns``: return (status 4) after this long without a frame; 0 never.
        """
        self._check_open()
        if self.running:
            raise GpuError("a persistent latency kernel is still running; stop it first")
        check_launch(blocks, threads, self.sm_count)
        if idle_limit_ns < 0:
            raise ConfigError(f"idle_limit_ns must be >= 0, got {idle_limit_ns}")
        cp = cupy_module()
        stream = self.kernel_stream.ptr
        cp.cuda.runtime.memsetAsync(self.accum_ptr, 0, self.accum.nbytes, stream)
        cp.cuda.runtime.memsetAsync(self.device_slots_ptr, 0, self.slots.nbytes, stream)
        # The first frame's copy goes on the copy stream: it must not race these
        # memsets (a zeroed trailer would leave the kernel waiting for seq 1). The
        # event is recorded before the launch, so the copy stream waits for the
        # memsets only, never for the kernel.
        zeroed = cp.cuda.Event(disable_timing=True)
        zeroed.record(self.kernel_stream)
        self.copy_stream.wait_event(zeroed)
        args = (
            np.uint64(slots_device_ptr),
            np.uint64(self.slot_stride),
            np.uint32(self.payload_cap),
            np.uint32(self.nslots),
            np.uint64(acks_device_ptr),
            np.uint64(self.accum_ptr),
            np.uint64(control_device_ptr),
            np.uint64(idle_limit_ns),
            np.uint32(1 if check_pattern else 0),
        )
        with self.kernel_stream:
            self._persistent((blocks,), (threads,), args)
        self._launched = True

    def launch_sum_frame(
        self,
        seq: int,
        frame: int,
        frame_bytes: int,
        kind: int,
        acks_device_ptr: int,
        blocks: int,
        threads: int,
        check_pattern: bool = False,
    ) -> None:
        """Mode copy from Python: latency_sum_frame over device slot ``seq % nslots``
        on the copy stream (after the caller's copy on that stream). Rust launches the
        same function through :attr:`sum_frame_function_handle`."""
        self._check_open()
        check_launch(blocks, threads)
        if not 0 <= frame_bytes <= self.payload_cap:
            raise ConfigError(f"frame_bytes must be in 0..{self.payload_cap}, got {frame_bytes}")
        slot = self.device_slots_ptr + (seq % self.nslots) * self.slot_stride
        args = (
            np.uint64(slot),
            np.uint32(frame_bytes),
            np.uint64(seq),
            np.uint64(frame),
            np.uint32(kind),
            np.uint64(acks_device_ptr),
            np.uint32(self.nslots),
            np.uint64(self.accum_ptr),
            np.uint32(1 if check_pattern else 0),
        )
        with self.copy_stream:
            self._sum_frame((blocks,), (threads,), args)

    def wait_stopped(self, timeout_s: float) -> bool:
        """True once the persistent kernel has returned (or none was launched); False
        after ``timeout_s``. Polls the stream: a blocking synchronise could wait
        forever on a kernel that spins."""
        deadline = time.monotonic() + timeout_s
        while self.running:
            if time.monotonic() > deadline:
                return False
            time.sleep(0.0005)
        return True

    def close(self) -> None:
        """Drops the device memory and streams. Refuses while the persistent kernel
        runs (set the control word's abort first): freeing or synchronising then
        would hang, and freeing memory it reads would be worse."""
        if self._closed:
            return
        if self.running:
            raise GpuError(
                "the persistent latency kernel is still running: set abort in the control "
                "block and wait_stopped() before close()"
            )
        self._closed = True
        self._launched = False
        # Back to CuPy's pools; streams are destroyed when collected (no sync).
        self.slots = self.accum = None
        self.kernel_stream = self.copy_stream = None

    def _check_open(self) -> None:
        if self._closed:
            raise GpuError("this LatencyGpu was closed")

    def __enter__(self) -> LatencyGpu:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
