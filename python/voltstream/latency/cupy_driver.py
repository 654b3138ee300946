"""A pure Python + CuPy host side for the latency kernels: GPU tests and the first
device probe, with no Rust (design sections 5 and 6).

It plays the part of Rust's session: it owns the host memory (acks, control word,
pinned staging slots, GPU-mapped slots for zerocopy), hands frames over in each of
the four modes and waits for each ack by polling the mapped ack entry for
``seq`` equality. One frame is in flight at a time.

Hand-over per mode, for sequence number ``s`` in slot ``s % nslots``:
- ``copy``: payload into staging; async copy to the device slot and
  latency_sum_frame on the copy stream; poll the stream until done, then the ack.
- ``persistent``: payload and trailer (seq included) into staging; one async copy of
  ``[0, payload_cap + 64)``, so seq is the last 8 bytes copied.
- ``persistent-flag``: the copy stops at ``payload_cap + 56``; then
  ``cuStreamWriteValue64_v2(trailer.seq, s)`` on the same stream (fenced by default).
- ``zerocopy``: payload and trailer fields written straight into the mapped slot,
  then seq with one aligned 8-byte store, last.
Round-trip times (``time.perf_counter_ns``) run from the moment the slot or staging
area is written and the hand-over starts, to the ack seen by the host.

Host ordering: x86 keeps stores in program order (TSO) and NumPy copies of <= 64 KiB
use ordinary stores, so the seq store, a single ``uint64`` element assignment on an
aligned address, becomes visible after the payload and trailer fields.

Example::

    from voltstream.latency.cupy_driver import CupyDriver, random_frames
    with CupyDriver("zerocopy", 8192, blocks=4, threads=128) as drv:
        result = drv.run(random_frames(1000, 8192))
    assert result.mismatches == 0
    print(np.percentile(result.rtt_ns, [50, 99]))

(Over 500 lines: a test host side that plays every part of the Rust session in one
class, the four hand-off modes side by side, so that the GPU tests can compare
them.)
"""

from __future__ import annotations

import ctypes
import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from voltstream.dsp.cuda import GpuError, cupy_module
from voltstream.errors import ConfigError
from voltstream.latency.gpu import LatencyGpu, check_launch
from voltstream.latency.reference import (
    ACK_BYTES,
    ACK_DTYPE,
    CONTROL_BYTES,
    DEFAULT_SLOTS,
    KIND_STOP,
    KIND_WHOLE,
    STATUS_STOPPED,
    TRAILER_BYTES,
    TRAILER_DTYPE,
    TRAILER_SEQ_OFFSET,
    frame_sums,
    launch_shape,
    pattern_payload,
)

__all__ = [
    "MODES",
    "Ack",
    "AckTimeout",
    "CupyDriver",
    "HostBuffer",
    "Libcuda",
    "RunResult",
    "pattern_frames",
    "probe",
    "random_frames",
]

MODES = ("copy", "persistent", "persistent-flag", "zerocopy")
PERSISTENT_MODES = ("persistent", "persistent-flag", "zerocopy")

#: A frame to hand over: (wire frame number, payload uint8 or None, kind).
Frame = tuple[int, np.ndarray | None, int]


class AckTimeout(GpuError, TimeoutError):
    """No ack with the expected seq arrived in time."""


@dataclass(frozen=True)
class Ack:
    seq: int
    sum: int
    sumsq: int
    status: int
    torn: int
    t_gpu_ns: int
    #: host round trip: hand-over start to ack seen (perf_counter_ns)
    rtt_ns: int


@dataclass
class RunResult:
    """Per handed-over frame (the STOP frame not included), in seq order."""

    mode: str
    seq: np.ndarray
    frame: np.ndarray
    kind: np.ndarray
    status: np.ndarray
    sum: np.ndarray
    sumsq: np.ndarray
    torn: np.ndarray
    rtt_ns: np.ndarray
    #: NumPy reference sums (0 for frames that are not whole)
    expected_sum: np.ndarray
    expected_sumsq: np.ndarray

    @property
    def mismatches(self) -> int:
        """Frames whose ack sums differ from the reference (skipped frames must ack 0)."""
        return int(
            np.count_nonzero((self.sum != self.expected_sum) | (self.sumsq != self.expected_sumsq))
        )


class Libcuda:
    """The few driver calls CuPy does not wrap, by ctypes on libcuda.so.1 (the library
    CuPy already loaded, so the same context)."""

    def __init__(self) -> None:
        try:
            lib = ctypes.CDLL("libcuda.so.1")
        except OSError as exc:
            raise GpuError(f"cannot load libcuda.so.1 (the NVIDIA driver): {exc}") from exc
        u64, u32, vp = ctypes.c_uint64, ctypes.c_uint, ctypes.c_void_p
        self._host_ptr = self._fn(
            lib, "cuMemHostGetDevicePointer_v2", [ctypes.POINTER(u64), vp, u32]
        )
        self._write64 = self._fn(lib, "cuStreamWriteValue64_v2", [vp, u64, u64, u32])
        self._ctx_get = self._fn(lib, "cuCtxGetCurrent", [ctypes.POINTER(vp)])
        self._ctx_set = self._fn(lib, "cuCtxSetCurrent", [vp])
        self._attr = self._fn(
            lib, "cuDeviceGetAttribute", [ctypes.POINTER(ctypes.c_int), ctypes.c_int, ctypes.c_int]
        )
        self._launch = self._fn(
            lib, "cuLaunchKernel", [vp, u32, u32, u32, u32, u32, u32, u32, vp, vp, vp]
        )

    @staticmethod
    def _fn(lib: Any, name: str, argtypes: list[Any]) -> Any:
        try:
            fn = getattr(lib, name)
        except AttributeError as exc:
            raise GpuError(f"libcuda.so.1 has no {name}: driver too old") from exc
        fn.argtypes = argtypes
        fn.restype = ctypes.c_int
        return fn

    @staticmethod
    def _check(rc: int, what: str) -> None:
        if rc != 0:
            raise GpuError(f"{what} failed with CUresult {rc}")

    def device_pointer(self, host_ptr: int) -> int:
        """cuMemHostGetDevicePointer: the device address of mapped host memory."""
        out = ctypes.c_uint64()
        self._check(self._host_ptr(ctypes.byref(out), host_ptr, 0), "cuMemHostGetDevicePointer")
        return out.value

    def stream_write_value64(self, stream: int, device_ptr: int, value: int) -> None:
        """cuStreamWriteValue64 with default flags (a fence before the write)."""
        self._check(self._write64(stream, device_ptr, value, 0), "cuStreamWriteValue64")

    def current_context(self) -> int:
        ctx = ctypes.c_void_p()
        self._check(self._ctx_get(ctypes.byref(ctx)), "cuCtxGetCurrent")
        return ctx.value or 0

    def set_current_context(self, ctx: int) -> None:
        self._check(self._ctx_set(ctx), "cuCtxSetCurrent")

    def device_attribute(self, attr: int, device: int) -> int:
        out = ctypes.c_int()
        self._check(self._attr(ctypes.byref(out), attr, device), f"cuDeviceGetAttribute({attr})")
        return out.value

    def launch(
        self,
        function: int,
        blocks: int,
        threads: int,
        stream: int,
        params: Sequence[ctypes.c_uint64 | ctypes.c_uint32],
    ) -> None:
        """cuLaunchKernel(function, (blocks,), (threads,)) with ``params`` by value, as
        Rust will launch latency_sum_frame."""
        ptrs = (ctypes.c_void_p * len(params))(
            *(ctypes.cast(ctypes.pointer(p), ctypes.c_void_p) for p in params)
        )
        rc = self._launch(function, blocks, 1, 1, threads, 1, 1, 0, stream, ptrs, None)
        self._check(rc, "cuLaunchKernel")


class HostBuffer:
    """Page-locked host memory from cudaHostAlloc (portable; GPU-mapped when
    ``mapped``), zeroed, with a NumPy view and, when mapped, its device pointer."""

    def __init__(self, nbytes: int, mapped: bool, libcuda: Libcuda | None = None) -> None:
        cp = cupy_module()
        rt = cp.cuda.runtime
        flags = rt.hostAllocPortable | (rt.hostAllocMapped if mapped else 0)
        self.nbytes = nbytes
        self.host_ptr = int(rt.hostAlloc(nbytes, flags))
        self.u8: np.ndarray = np.ctypeslib.as_array(
            (ctypes.c_uint8 * nbytes).from_address(self.host_ptr)
        )
        self.u8[:] = 0
        self.device_ptr = 0
        if mapped:
            self.device_ptr = (libcuda or Libcuda()).device_pointer(self.host_ptr)

    def free(self) -> None:
        """cudaFreeHost. Only once no kernel can touch the memory (the driver may
        synchronise here)."""
        if self.host_ptr:
            self.u8 = np.empty(0, np.uint8)  # no view of freed memory survives
            cupy_module().cuda.runtime.freeHost(self.host_ptr)
            self.host_ptr = self.device_ptr = 0


class CupyDriver:
    """Runs frames through one mode; see the module docstring. Use as a context
    manager (``start`` on enter; abort, wait and free on exit)."""

    def __init__(
        self,
        mode: str,
        frame_bytes: int,
        *,
        nslots: int = DEFAULT_SLOTS,
        blocks: int | None = None,
        threads: int = 128,
        check_pattern: bool = False,
        idle_limit_ns: int = 10_000_000_000,
        timeout_s: float = 2.0,
        relay: bool = False,
    ) -> None:
        if mode not in MODES:
            raise ConfigError(f"mode must be one of {', '.join(MODES)}, got {mode!r}")
        self.mode = mode
        self.blocks = blocks if blocks is not None else launch_shape(frame_bytes, threads)[0]
        self.threads = threads
        check_launch(self.blocks, threads)
        self.check_pattern = check_pattern
        self.idle_limit_ns = idle_limit_ns
        self.timeout_s = timeout_s
        self.libcuda = Libcuda()
        self.gpu = LatencyGpu(frame_bytes, nslots, relay=relay)
        self.nslots = nslots
        self.frame_bytes = frame_bytes
        self.cap = self.gpu.payload_cap
        self.stride = self.gpu.slot_stride
        # All host memory is allocated before any kernel runs: a page-locked
        # allocation or free may wait for the device.
        self.acks = HostBuffer(nslots * ACK_BYTES, mapped=True, libcuda=self.libcuda)
        self.control = HostBuffer(CONTROL_BYTES, mapped=True, libcuda=self.libcuda)
        self.slots = HostBuffer(
            nslots * self.stride, mapped=mode == "zerocopy", libcuda=self.libcuda
        )
        self._ack_seq = self.acks.u8.view("<u8")[:: ACK_BYTES // 8]  # seq of each entry
        self._ack_rec = self.acks.u8.view(ACK_DTYPE)
        self._abort = self.control.u8.view("<u4")
        self._slot_u64 = self.slots.u8.view("<u8")
        self._next_seq = 1
        self._t0: dict[int, int] = {}
        self._started = False
        self._freed = False

    # -- life cycle --------------------------------------------------------------

    def start(self) -> None:
        """Zeroes acks, control and host slots (a leftover ack or trailer of seq 1
        would pass as new), then launches the persistent kernel in its modes."""
        if self._started:
            raise GpuError("this CupyDriver was already started")
        self.acks.u8[:] = 0
        self.control.u8[:] = 0
        self.slots.u8[:] = 0
        self._started = True
        if self.mode in PERSISTENT_MODES:
            slots = self.slots.device_ptr if self.mode == "zerocopy" else self.gpu.device_slots_ptr
            self.gpu.start_persistent(
                slots,
                self.acks.device_ptr,
                self.control.device_ptr,
                self.blocks,
                self.threads,
                self.idle_limit_ns,
                self.check_pattern,
            )

    def abort(self, timeout_s: float = 1.0) -> bool:
        """Sets the control word's abort; True once the persistent kernel returned."""
        self._abort[0] = 1
        return self.gpu.wait_stopped(timeout_s)

    def stop(self, timeout_s: float = 1.0) -> Ack | None:
        """Hands over a STOP frame and waits for its ack (status 3) and the kernel's
        return. Mode copy has no kernel to stop: None."""
        if self.mode not in PERSISTENT_MODES:
            return None
        seq = self.publish(0, None, KIND_STOP)
        ack = self.wait_ack(seq, timeout_s)
        if ack.status != STATUS_STOPPED:
            raise GpuError(f"STOP frame {seq} acked with status {ack.status}, expected 3")
        if not self.gpu.wait_stopped(timeout_s):
            raise GpuError(f"the persistent kernel acked STOP but did not return in {timeout_s} s")
        return ack

    def close(self) -> None:
        """Aborts a still running kernel, waits for it (2 s), frees everything. If the
        kernel will not stop, the memory is left allocated (freeing it could hang or
        let the kernel write into freed memory) and GpuError says so."""
        if self._freed:
            return
        if self.gpu.running and not self.abort(2.0):
            raise GpuError(
                "the persistent latency kernel did not return within 2 s of abort; its "
                "memory is left allocated (it returns by itself after its idle limit)"
            )
        self._freed = True
        empty = np.empty(0, np.uint8)
        # No view of the freed memory may survive (a later read would crash).
        self._ack_seq, self._ack_rec = empty.view("<u8"), empty.view(ACK_DTYPE)
        self._abort, self._slot_u64 = empty.view("<u4"), empty.view("<u8")
        for buf in (self.acks, self.control, self.slots):
            buf.free()
        self.gpu.close()

    def __enter__(self) -> CupyDriver:
        try:
            self.start()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # -- frames ------------------------------------------------------------------

    def publish(self, frame: int, payload: np.ndarray | None, kind: int = KIND_WHOLE) -> int:
        """Hands the next seq over; returns it. ``payload``: uint8, at most frame_bytes."""
        if not self._started:
            raise GpuError("start() the driver before publishing frames")
        data = np.empty(0, np.uint8) if payload is None else np.asarray(payload).view(np.uint8)
        n = data.size
        if n > self.frame_bytes:
            raise ConfigError(f"payload of {n} bytes exceeds frame_bytes {self.frame_bytes}")
        seq = self._next_seq
        self._next_seq += 1
        slot = seq % self.nslots
        base = slot * self.stride
        self.slots.u8[base : base + n] = data
        if self.mode != "copy":
            trailer = self.slots.u8[base + self.cap : base + self.cap + TRAILER_BYTES]
            rec = trailer.view(TRAILER_DTYPE)
            rec["frame"] = frame
            rec["bytes"] = n
            rec["kind"] = kind
            rec["t_send_ns"] = time.monotonic_ns()
        t0 = time.perf_counter_ns()
        self._t0[seq] = t0
        if self.mode == "zerocopy":
            self._slot_u64[(base + self.cap + TRAILER_SEQ_OFFSET) // 8] = seq  # last store
            return seq
        rt = cupy_module().cuda.runtime
        stream = self.gpu.copy_stream_ptr
        dev = self.gpu.device_slots_ptr + base
        host = self.slots.host_ptr + base
        if self.mode == "copy":
            if n:
                rt.memcpyAsync(dev, host, n, rt.memcpyHostToDevice, stream)
            self.gpu.launch_sum_frame(
                seq,
                frame,
                n,
                kind,
                self.acks.device_ptr,
                self.blocks,
                self.threads,
                self.check_pattern,
            )
        elif self.mode == "persistent":
            self._slot_u64[(base + self.cap + TRAILER_SEQ_OFFSET) // 8] = seq
            rt.memcpyAsync(dev, host, self.cap + TRAILER_BYTES, rt.memcpyHostToDevice, stream)
        else:  # persistent-flag
            rt.memcpyAsync(dev, host, self.cap + TRAILER_SEQ_OFFSET, rt.memcpyHostToDevice, stream)
            self.libcuda.stream_write_value64(stream, dev + self.cap + TRAILER_SEQ_OFFSET, seq)
        return seq

    def wait_ack(self, seq: int, timeout_s: float | None = None) -> Ack:
        """Spins until ack entry ``seq % nslots`` holds exactly ``seq`` (a stale ack of
        ``seq - nslots`` never passes); AckTimeout after ``timeout_s``."""
        timeout = self.timeout_s if timeout_s is None else timeout_s
        deadline = time.perf_counter_ns() + int(timeout * 1e9)
        entry = seq % self.nslots
        if self.mode == "copy":
            # The baseline synchronises its stream, then reads the ack.
            stream = self.gpu.copy_stream
            while not stream.done:
                if time.perf_counter_ns() > deadline:
                    raise AckTimeout(f"mode copy: frame {seq} not done within {timeout} s")
        while int(self._ack_seq[entry]) != seq:
            if time.perf_counter_ns() > deadline:
                found = self._ack_rec[entry]
                raise AckTimeout(
                    f"mode {self.mode}: no ack for seq {seq} within {timeout} s (entry {entry} "
                    f"holds seq {int(found['seq'])} status {int(found['status'])}; kernel "
                    f"{'running' if self.gpu.running else 'not running'})"
                )
        t1 = time.perf_counter_ns()
        rec = self._ack_rec[entry]
        return Ack(
            seq=seq,
            sum=int(rec["sum"]),
            sumsq=int(rec["sumsq"]),
            status=int(rec["status"]),
            torn=int(rec["torn"]),
            t_gpu_ns=int(rec["t_gpu_ns"]),
            rtt_ns=t1 - self._t0.pop(seq, t1),
        )

    def send(self, frame: int, payload: np.ndarray | None, kind: int = KIND_WHOLE) -> Ack:
        """publish + wait_ack: one frame in flight."""
        return self.wait_ack(self.publish(frame, payload, kind))

    def run(self, frames: Iterable[Frame], stop: bool = True) -> RunResult:
        """Sends each (frame, payload, kind) and collects the acks; then STOP (in the
        persistent modes) unless ``stop`` is False. Reference sums are computed after
        each ack, outside the timed round trip."""
        cols: dict[str, list[int]] = {k: [] for k in RunResult.__dataclass_fields__}
        del cols["mode"]
        for frame, payload, kind in frames:
            ack = self.send(frame, payload, kind)
            exp = frame_sums(payload) if kind == KIND_WHOLE and payload is not None else (0, 0)
            for key, value in (
                ("seq", ack.seq),
                ("frame", frame),
                ("kind", kind),
                ("status", ack.status),
                ("sum", ack.sum),
                ("sumsq", ack.sumsq),
                ("torn", ack.torn),
                ("rtt_ns", ack.rtt_ns),
                ("expected_sum", exp[0]),
                ("expected_sumsq", exp[1]),
            ):
                cols[key].append(value)
        if stop:
            self.stop()
        arrays = {k: np.array(v, dtype=np.uint64) for k, v in cols.items()}
        return RunResult(mode=self.mode, **arrays)


def random_frames(
    count: int, frame_bytes: int, seed: int | None = None, first_frame: int = 0
) -> Iterator[Frame]:
    """``count`` whole frames of random bytes, wire frames numbered from ``first_frame``."""
    rng = np.random.default_rng(seed)
    for i in range(count):
        yield first_frame + i, rng.integers(0, 256, frame_bytes, dtype=np.uint8), KIND_WHOLE


def pattern_frames(count: int, frame_bytes: int, first_frame: int = 1) -> Iterator[Frame]:
    """``count`` whole pattern frames (the ordering test's payload)."""
    for i in range(count):
        frame = first_frame + i
        yield frame, pattern_payload(frame, frame_bytes), KIND_WHOLE


def _attribute_or_none(lib: Libcuda, attr: int, device: int) -> int | None:
    try:
        return lib.device_attribute(attr, device)
    except GpuError:  # a driver that does not know the attribute
        return None


def probe() -> dict[str, Any]:
    """What the first device call records: device, versions, the attributes the modes
    depend on, and whether CuPy's handles are what the driver API expects."""
    cp = cupy_module()
    rt = cp.cuda.runtime
    dev = rt.getDevice()
    props = rt.getDeviceProperties(dev)
    lib = Libcuda()
    gpu = LatencyGpu(1024, 2)
    buf = HostBuffer(4096, mapped=True, libcuda=lib)
    try:
        return {
            "name": props["name"].decode() if isinstance(props["name"], bytes) else props["name"],
            "sm_count": int(props["multiProcessorCount"]),
            "driver_version": int(rt.driverGetVersion()),
            "runtime_version": int(rt.runtimeGetVersion()),
            "cupy_version": cp.__version__,
            # cudaDevAttrCanMapHostMemory = 19, cudaDevAttrCanUseHostPointerForRegisteredMem = 91
            "can_map_host_memory": int(rt.deviceGetAttribute(19, dev)),
            "host_pointer_for_registered_mem": int(rt.deviceGetAttribute(91, dev)),
            # CU_DEVICE_ATTRIBUTE_CAN_USE_64_BIT_STREAM_MEM_OPS (CUDA >= 12 numbering)
            "stream_mem_ops_64": _attribute_or_none(lib, 122, dev),
            "mapped_device_ptr_equals_host_ptr": buf.device_ptr == buf.host_ptr,
            "cupy_context_is_current": lib.current_context() == gpu.context_handle,
            "sum_frame_function_handle_nonzero": gpu.sum_frame_function_handle != 0,
        }
    finally:
        buf.free()
        gpu.close()
