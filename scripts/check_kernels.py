#!/usr/bin/env python3
"""Compile every CUDA kernel of voltstream with NVRTC, without a GPU or driver.

Loads libnvrtc from the PyPI wheel (nvidia-cuda-nvrtc-cu12) through ctypes and
compiles each python/voltstream/dsp/kernels/*.cu for compute_90 with the same
options as the runtime loader (voltstream.dsp.cuda.NVRTC_OPTIONS). Prints each
log; exits non-zero on any failure, or when there is no kernel at all.

Usage: python scripts/check_kernels.py [--arch compute_90]
"""

from __future__ import annotations

import argparse
import ctypes
import glob
import os
import site
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "python"))

import voltstream.fengine.kernels  # noqa: E402, F401 - its Templates state their variants
import voltstream.fold.kernels  # noqa: E402, F401
import voltstream.latency.gpu  # noqa: E402, F401
import voltstream.search.kernels  # noqa: E402, F401
from voltstream.dsp.cuda import (  # noqa: E402
    NVRTC_OPTIONS,
    Template,
    kernel_source,
    kernel_sources,
)


def template_variants() -> dict[str, list[tuple[tuple[str, int], ...]]]:
    """Every -D set each source's Templates may compile (their VARIANTS)."""
    found: dict[str, list[tuple[tuple[str, int], ...]]] = {}
    todo = list(Template.__subclasses__())
    while todo:
        t = todo.pop()
        todo += t.__subclasses__()
        found.setdefault(t.source, []).extend(
            v for v in t.VARIANTS if v not in found.get(t.source, [])
        )
    return found


def find_nvrtc() -> str:
    """Path of libnvrtc: $NVRTC_LIB, then the PyPI wheel in any site-packages."""
    if os.environ.get("NVRTC_LIB"):
        return os.environ["NVRTC_LIB"]
    roots = list(site.getsitepackages()) + [site.getusersitepackages()] + sys.path
    for root in roots:
        for pattern in ("nvidia/cuda_nvrtc/lib/libnvrtc.so*", "nvidia/cu*/lib/libnvrtc.so*"):
            hits = sorted(p for p in glob.glob(os.path.join(root, pattern)) if "builtins" not in p)
            if hits:
                return hits[0]
    raise SystemExit(
        "libnvrtc not found: pip install nvidia-cuda-nvrtc-cu12 into this Python "
        "(make kernels does), or set NVRTC_LIB to the library's path"
    )


class Nvrtc:
    def __init__(self, path: str):
        self.lib = ctypes.CDLL(path)
        L = self.lib
        L.nvrtcGetErrorString.restype = ctypes.c_char_p
        L.nvrtcCreateProgram.argtypes = [
            ctypes.POINTER(ctypes.c_void_p),
            ctypes.c_char_p,
            ctypes.c_char_p,
            ctypes.c_int,
            ctypes.c_void_p,
            ctypes.c_void_p,
        ]
        L.nvrtcCompileProgram.argtypes = [
            ctypes.c_void_p,
            ctypes.c_int,
            ctypes.POINTER(ctypes.c_char_p),
        ]
        L.nvrtcGetProgramLogSize.argtypes = [ctypes.c_void_p, ctypes.POINTER(ctypes.c_size_t)]
        L.nvrtcGetProgramLog.argtypes = [ctypes.c_void_p, ctypes.c_char_p]
        L.nvrtcGetPTXSize.argtypes = [ctypes.c_void_p, ctypes.POINTER(ctypes.c_size_t)]
        L.nvrtcDestroyProgram.argtypes = [ctypes.POINTER(ctypes.c_void_p)]

    def version(self) -> str:
        major, minor = ctypes.c_int(), ctypes.c_int()
        self.lib.nvrtcVersion(ctypes.byref(major), ctypes.byref(minor))
        return f"{major.value}.{minor.value}"

    def compile(self, source: str, name: str, options: list[str]) -> tuple[bool, str, int]:
        """(ok, log, ptx_bytes) for one translation unit."""
        prog = ctypes.c_void_p()
        rc = self.lib.nvrtcCreateProgram(
            ctypes.byref(prog), source.encode(), name.encode(), 0, None, None
        )
        if rc != 0:
            return False, self.lib.nvrtcGetErrorString(rc).decode(), 0
        try:
            opts = (ctypes.c_char_p * len(options))(*(o.encode() for o in options))
            rc = self.lib.nvrtcCompileProgram(prog, len(options), opts)
            size = ctypes.c_size_t()
            self.lib.nvrtcGetProgramLogSize(prog, ctypes.byref(size))
            buf = ctypes.create_string_buffer(size.value)
            self.lib.nvrtcGetProgramLog(prog, buf)
            log = buf.value.decode(errors="replace").strip()
            ptx = ctypes.c_size_t()
            if rc == 0:
                self.lib.nvrtcGetPTXSize(prog, ctypes.byref(ptx))
            else:
                log = f"{self.lib.nvrtcGetErrorString(rc).decode()}\n{log}"
            return rc == 0, log, ptx.value
        finally:
            self.lib.nvrtcDestroyProgram(ctypes.byref(prog))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--arch", default="compute_90", help="virtual architecture (compute_90)")
    args = ap.parse_args(argv)
    sources = kernel_sources()
    if not sources:
        print("no CUDA sources under python/voltstream/dsp/kernels: nothing was checked")
        return 1
    nvrtc = Nvrtc(find_nvrtc())
    options = [*NVRTC_OPTIONS, f"--gpu-architecture={args.arch}"]
    print(f"NVRTC {nvrtc.version()}, options: {' '.join(options)}")
    failed = []
    builds = 0
    variants = template_variants()
    for path in sources:
        # The defaults first, then every -D set a Template may ask for (its VARIANTS).
        for defines in ((), *variants.get(path.name, ())):
            flags = [f"-D{k}={v}" for k, v in defines]
            name = " ".join([path.name, *flags])
            ok, log, ptx = nvrtc.compile(kernel_source(path.name), path.name, options + flags)
            builds += 1
            status = f"ok ({ptx} bytes of PTX)" if ok else "FAILED"
            print(f"{name}: {status}")
            if log:
                print("  " + log.replace("\n", "\n  "))
            if not ok:
                failed.append(name)
    if failed:
        print(f"{len(failed)} of {builds} kernel builds failed to compile: {', '.join(failed)}")
        return 1
    print(f"all {len(sources)} kernels compiled ({builds} builds with their -D variants)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
