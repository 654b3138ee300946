"""Choosing the F-engine implementation: ``make_engine("cpu" | "gpu" | "auto", **settings)``.

Every engine has the interface of ``FEngineReference``: the same constructor keywords
(``nchan, taps, spectra_per_heap, n_substreams, bits, sample_rate_hz,
max_delay_samples, feng_id, dither_seed``), ``process(samples, timestamp, valid) ->
list[OutputHeap]``, ``set_gains``, ``set_delay_model`` and ``counters``. The GPU
engine (``voltstream.fengine.gpu.GpuFEngine``) is imported only when asked for, so the
CPU path never needs CuPy.
"""

from __future__ import annotations

from voltstream.device import DEVICES
from voltstream.device import resolve_device as _resolve
from voltstream.errors import ConfigError, VoltstreamError

__all__ = ["DEVICES", "engine_device", "make_engine", "resolve_device"]


def _gpu_class():
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


def make_engine(device: str = "cpu", *, input_bits: int | None = None, **settings):
    """A new F-engine on ``device`` (``cpu``, ``gpu`` or ``auto``) with ``settings``.

    ``settings`` are FEngineReference's keywords. ``input_bits`` (the digitiser
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
    extra = {} if input_bits is None else {"input_bits": int(input_bits)}
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


def engine_device(engine) -> str:
    """``gpu`` for an engine of ``voltstream.fengine.gpu`` (or a subclass), else ``cpu``."""
    modules = {cls.__module__ for cls in type(engine).__mro__}
    return "gpu" if "voltstream.fengine.gpu" in modules else "cpu"
