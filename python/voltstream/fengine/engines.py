"""Choosing the F-engine implementation: ``make_engine("cpu" | "gpu" | "auto", **settings)``.

Every engine has the interface ``FEngine`` (a Protocol): the same constructor
keywords (``nchan, taps, spectra_per_heap, n_substreams, bits, sample_rate_hz,
max_delay_samples, feng_id, dither_seed``, or a ``plan``), ``process(samples,
timestamp, valid) -> list[OutputHeap]``, ``set_gains``, ``set_delay_model``, its
``plan`` and ``counters``. The GPU
engine (``voltstream.fengine.gpu.GpuFEngine``) is imported only when asked for, so the
CPU path never needs CuPy.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

import numpy as np
import numpy.typing as npt

from voltstream.device import DEVICES
from voltstream.device import resolve_device as _resolve
from voltstream.errors import ConfigError, VoltstreamError

if TYPE_CHECKING:
    from voltstream.dsp.delay import DelayModel
    from voltstream.fengine.heaps import HeapLayout, OutputHeap
    from voltstream.fengine.plan import FEnginePlan
    from voltstream.fengine.reference import FEngineCounters

__all__ = [
    "DEVICES",
    "FEngine",
    "PackedFEngine",
    "engine_device",
    "make_engine",
    "resolve_device",
]


class FEngine(Protocol):
    """What the pipeline, the control server and the tests use of an F-engine
    (``FEngineReference``, ``GpuFEngine``). GPU-only extras (``process_packed_async``,
    ``emit_packets``, ``warm_up``, ``timing``) are looked up where they are used."""

    plan: FEnginePlan
    feng_id: int
    gains: np.ndarray
    delay_models: list[DelayModel]
    counters: FEngineCounters

    @property
    def layout(self) -> HeapLayout: ...

    @property
    def nchan(self) -> int: ...

    def process(
        self, samples: npt.ArrayLike, timestamp: int, valid: npt.ArrayLike | None = None
    ) -> list[OutputHeap]: ...

    def set_gains(self, gains: npt.ArrayLike, pol: int | None = None) -> None: ...

    def set_delay_model(self, pol: int, model: DelayModel) -> None: ...


class PackedFEngine(FEngine, Protocol):
    """An F-engine that takes the digitiser's packed bytes as they arrive (the GPU
    engine): the live pipeline feeds it chunks without unpacking them on the host."""

    sample_bits: int
    last_copy: Any  # CUDA event: the input block's copy to the device completed

    def process_packed(
        self, raw: Any, timestamp: int, valid: npt.ArrayLike | None = None
    ) -> list[OutputHeap]: ...

    def process_packed_async(
        self, raw: Any, timestamp: int, valid: npt.ArrayLike | None = None, valid_step: int = 1
    ) -> list[Any]: ...

    def flush(self, copy: bool = True) -> list[OutputHeap]: ...

    def warm_up(self, block_samples: int, blocks: int = 4) -> None: ...

    def restart(self) -> None: ...


def _gpu_class() -> type:
    """The GPU engine class, or a ConfigError saying why it cannot be had."""
    try:
        from voltstream.fengine.gpu import GpuFEngine
    except ImportError as e:
        raise ConfigError(
            f"the GPU F-engine is not available ({e}); install CuPy with a CUDA GPU, "
            "or use --device cpu"
        ) from None
    return GpuFEngine


def resolve_device(device: str) -> str:
    """``cpu``, ``gpu`` or ``auto`` to the device the F-engine will run on
    (``voltstream.device.resolve_device``, with the GPU engine's import as its need)."""
    return _resolve(device, need=_gpu_class)


def make_engine(device: str = "cpu", *, sample_bits: int | None = None, **settings: Any) -> FEngine:
    """A new F-engine on ``device`` (``cpu``, ``gpu`` or ``auto``) with ``settings``.

    ``settings`` are FEngineReference's keywords. ``sample_bits`` (the digitiser
    sample width) goes to the GPU engine only, which then takes the packed heap
    bytes as they arrive (``process_packed``); the CPU engine takes unpacked samples.
    Errors from either engine (bad settings, no GPU, CUDA failures) come back as
    one-line VoltstreamErrors.
    """
    where = resolve_device(device)
    if where == "cpu":
        from voltstream.fengine.reference import FEngineReference

        return FEngineReference(**settings)
    cls = _gpu_class()
    extra = {} if sample_bits is None else {"sample_bits": int(sample_bits)}
    try:
        return cls(**settings, **extra)
    except ConfigError:
        raise
    except VoltstreamError as e:  # GpuError: no device, NVRTC, kernel sources
        raise ConfigError(f"the GPU F-engine could not start: {e}; or use --device cpu") from None
    except TypeError as e:  # a keyword the GPU engine does not take
        raise ConfigError(f"the GPU F-engine does not accept these settings: {e}") from None
    except Exception as e:  # CUDA or CuPy failures: say so in one line
        raise ConfigError(f"the GPU F-engine could not start: {type(e).__name__}: {e}") from None


def engine_device(engine: Any) -> str:
    """``gpu`` for an engine of ``voltstream.fengine.gpu`` (or a subclass), else ``cpu``."""
    modules = {cls.__module__ for cls in type(engine).__mro__}
    return "gpu" if "voltstream.fengine.gpu" in modules else "cpu"
