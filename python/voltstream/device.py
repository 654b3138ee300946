"""Where work runs: the one answer to ``--device cpu|gpu|auto`` for every verb.

``gpu_available()`` says whether CuPy imports and sees a CUDA device;
``resolve_device(device, need=...)`` turns the option into ``"cpu"`` or ``"gpu"``:
``auto`` is the GPU when one is usable (and ``need()``, the product's own check, such
as its GPU engine importing, passes), else the CPU; ``gpu`` without a usable GPU is a
ConfigError that says why and what to use instead.
"""

from __future__ import annotations

from collections.abc import Callable

from voltstream.errors import ConfigError

__all__ = ["DEVICES", "gpu_available", "gpu_ids", "resolve_device"]

DEVICES = ("cpu", "gpu", "auto")


def gpu_available() -> bool:
    """True when CuPy imports and sees at least one CUDA device."""
    try:
        import cupy

        return cupy.cuda.runtime.getDeviceCount() > 0
    except Exception:  # no CuPy, no driver, no device: all mean "no GPU"
        return False


def gpu_ids() -> list[str]:
    """The GPUs this process may use, as ``CUDA_VISIBLE_DEVICES`` names them: that
    variable's list where it is set, else ``0 .. n-1`` of the devices CuPy sees
    (none without CuPy or a driver). A local cluster gives each node one of them."""
    import os

    given = os.environ.get("CUDA_VISIBLE_DEVICES")
    if given is not None:
        return [g.strip() for g in given.split(",") if g.strip() and g.strip() != "-1"]
    try:
        import cupy

        return [str(i) for i in range(cupy.cuda.runtime.getDeviceCount())]
    except Exception:  # no CuPy, no driver, no device
        return []


def resolve_device(device: str, need: Callable[[], object] | None = None) -> str:
    """``cpu``, ``gpu`` or ``auto`` to the device that will run: ``cpu`` or ``gpu``.

    ``need`` (optional) raises ConfigError when the product cannot run on the GPU
    even though one is there (its GPU module missing): ``gpu`` then fails with that
    reason, ``auto`` falls back to the CPU.
    """
    if device not in DEVICES:
        raise ConfigError(f"--device {device!r} is not known: use cpu, gpu or auto")
    if device == "cpu":
        return "cpu"
    if not gpu_available():
        if device == "gpu":
            raise ConfigError(
                "--device gpu: no usable CUDA GPU (CuPy missing or no device); use --device cpu"
            )
        return "cpu"
    if need is not None:
        try:
            need()
        except ConfigError:
            if device == "gpu":
                raise
            return "cpu"
    return "gpu"
