"""How every CUDA kernel of the package is built and run: one cached NVRTC loader,
and the two halves of a kernel, a :class:`Template` (a source and its compile-time
constants, validated, compiled once) and an :class:`Operation` (the template for one
problem size: named, typed buffers checked at each launch, the launch on a stream).

The kernels themselves sit in their product's folder: the fold path's in
``fold/kernels.py``, the F-engine's in ``fengine/kernels.py``. Their sources live
in ``dsp/kernels/*.cu``; each compiles on its own with the options in
:data:`NVRTC_OPTIONS` and defaults for its ``-D`` parameters, which is what
``scripts/check_kernels.py`` (CI, no GPU) does with the PyPI NVRTC.
CuPy is imported inside functions only, so this module imports on machines
without it.
"""

from __future__ import annotations

import functools
import re
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from voltstream.errors import ConfigError, VoltstreamError

__all__ = [
    "KERNEL_DIR",
    "NVRTC_OPTIONS",
    "Buffer",
    "GpuError",
    "Operation",
    "Template",
    "cupy_module",
    "kernel_source",
    "kernel_sources",
    "load_module",
]

KERNEL_DIR = Path(__file__).with_name("kernels")

# Shared by the runtime loader and the CI compile check. No fast-math: the fold
# kernel keeps the pulse phase in float64 and the detection in IEEE float32.
NVRTC_OPTIONS: tuple[str, ...] = ("--std=c++17",)


class GpuError(VoltstreamError, RuntimeError):
    """The GPU path cannot run here (no CuPy, no device, a kernel failed to build)."""


def kernel_sources() -> list[Path]:
    """Every CUDA source of the package, sorted by name (``*.cuh`` are included by them)."""
    return sorted(KERNEL_DIR.glob("*.cu"))


_INCLUDE = re.compile(r'^#include "([A-Za-z0-9_]+\.cuh)"$', re.M)


def kernel_source(name: str) -> str:
    """The text of ``kernels/<name>`` with its ``#include "x.cuh"`` lines replaced by
    those headers: what NVRTC compiles here and in CI, and what CuPy's kernel cache
    keys on (it hashes the source it is given, so an included file it never saw
    could change without a rebuild)."""
    path = KERNEL_DIR / name
    if not path.is_file():
        raise GpuError(f"kernel source {path} is missing; reinstall voltstream")
    return _INCLUDE.sub(lambda m: (KERNEL_DIR / m.group(1)).read_text(), path.read_text())


def cupy_module() -> Any:
    try:
        import cupy
    except ImportError as exc:
        raise GpuError(
            # No "--device cpu" advice here: not every verb has that option (latency's
            # way without a GPU is --standin); the verbs that do say so themselves.
            "the GPU path needs CuPy (pip install cupy-cuda12x or cupy-cuda13x) and an NVIDIA GPU"
        ) from exc
    return cupy


def load_module(name: str, defines: tuple[tuple[str, int], ...] = ()) -> Any:
    """Compile ``kernels/<name>`` once per process, option set and device; a CuPy RawModule.

    Keyed by the current device too: a loaded module belongs to one CUDA context,
    and the multi-GPU workers (pipeline/multi_gpu_fold.py) build engines on several.
    """
    cp = cupy_module()
    return _load_module(name, tuple(defines), cp.cuda.runtime.getDevice())


_LOAD_LOCK = threading.Lock()


@functools.cache
def _load_module(name: str, defines: tuple[tuple[str, int], ...], device: int) -> Any:
    with _LOAD_LOCK:  # worker threads build their engines at the same time
        return _compile_module(name, defines)


def _compile_module(name: str, defines: tuple[tuple[str, int], ...]) -> Any:
    cp = cupy_module()
    options = NVRTC_OPTIONS + tuple(f"-D{k}={int(v)}" for k, v in defines)
    module = cp.RawModule(code=kernel_source(name), options=options)
    try:
        module.compile()
    except Exception as exc:  # CuPy raises its own CompileException with the log
        raise GpuError(f"NVRTC could not compile {name} with {options}: {exc}") from exc
    return module


class Template:
    """The compile-time half of a kernel: ``source`` (a file of ``dsp/kernels``) and its
    ``-D`` constants. A subclass validates what it is given (a ConfigError saying what
    to change) before calling this, which compiles once per process, constant set and
    device (``load_module``'s cache): a second template with the same constants costs
    a dictionary look-up."""

    source: ClassVar[str]
    #: -D sets a run may ask this template for besides the file's defaults, stated
    #: beside the checks that allow them, so that CI's NVRTC check
    #: (scripts/check_kernels.py) builds every variant a GPU run can compile.
    VARIANTS: ClassVar[tuple[tuple[tuple[str, int], ...], ...]] = ()

    def __init__(self, constants: Mapping[str, int] | None = None) -> None:
        self.constants = {k: int(v) for k, v in (constants or {}).items()}
        self.module = load_module(self.source, tuple(self.constants.items()))
        self._kernels: dict[str, Any] = {}

    def kernel(self, name: str) -> Any:
        """The compiled ``__global__`` function ``name`` (a CuPy RawKernel)."""
        if name not in self._kernels:
            self._kernels[name] = self.module.get_function(name)
        return self._kernels[name]


@dataclass(frozen=True)
class Buffer:
    """One typed buffer of an Operation: its dtype and either its exact shape or the
    fewest values it must hold (kernels that take a prefix of a larger buffer)."""

    dtype: Any
    shape: tuple[int, ...] | None = None
    min_size: int = 0

    def check(self, name: str, arr: Any) -> None:
        dtype = np.dtype(self.dtype)
        if self.shape is not None:
            if arr.dtype != dtype or tuple(arr.shape) != self.shape:
                got = f"{arr.dtype} {tuple(arr.shape)}"
                raise ConfigError(f"{name} must be {dtype} shaped {self.shape}, got {got}")
            if not arr.flags.c_contiguous:
                raise ConfigError(f"{name} must be C-contiguous")
        elif arr.dtype != dtype or arr.size < self.min_size:
            raise ConfigError(
                f"{name} must be {dtype} with at least {self.min_size} values, "
                f"got {arr.dtype} with {arr.size}"
            )


class Operation:
    """The run-time half of a kernel: its template for one problem size. A subclass
    names its buffers (:meth:`check` with :class:`Buffer` specs) and launches with
    :meth:`launch`, so a wrong dtype or shape is a ConfigError, not a wrong result."""

    def __init__(self, template: Template) -> None:
        self.t = template

    @staticmethod
    def check(**buffers: tuple[Any, Buffer]) -> None:
        """Each ``name=(array, spec)``; an array of None is an absent optional buffer."""
        for name, (arr, spec) in buffers.items():
            if arr is not None:
                spec.check(name, arr)

    def launch(
        self,
        kernel: str,
        grid: tuple[int, ...],
        block: tuple[int, ...],
        args: tuple[Any, ...],
        stream: Any = None,
        shared_mem: int = 0,
    ) -> None:
        """Launches the template's ``kernel`` on ``stream`` (None: the current one)."""
        fn = self.t.kernel(kernel)
        # RawKernel launches on the current stream; make ``stream`` current for it.
        if stream is None:
            fn(grid, block, args, shared_mem=shared_mem)
        else:
            with stream:
                fn(grid, block, args, shared_mem=shared_mem)
