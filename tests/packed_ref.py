"""A NumPy decoder of packed samples written from the layout formula alone (not from
the kernel): the oracle of the packed unpack kernel (tests/gpu/test_packed.py) and of
the chunk layouts the capture hands the GPU (tests/test_gpu_handoff.py)."""

from __future__ import annotations

import numpy as np

from voltstream.dsp import packed
from voltstream.io.vdif import LEVELS_2BIT


def decode_ref(data: np.ndarray, layout: packed.PackedLayout, n: int) -> np.ndarray:
    """(n, ncp) complex128 samples of packed ``data``, from the layout's formula."""
    nb = layout.nbit
    bits = np.unpackbits(data, bitorder="little").reshape(-1, nb)
    codes = (bits * (1 << np.arange(nb))).sum(axis=1)
    if layout.encoding == "twos":
        vals = np.where(codes >= 1 << (nb - 1), codes - (1 << nb), codes).astype(np.float64)
    elif layout.encoding == "offset":
        vals = codes - float(1 << (nb - 1))
    else:
        vals = LEVELS_2BIT.astype(np.float64)[codes]
    s = np.arange(n)[:, None, None]
    c = np.arange(layout.nchan)[None, :, None]
    p = np.arange(layout.npol)[None, None, :]
    v = (s // layout.spf) * layout.s_blk + (s % layout.spf) * layout.s_t
    v = (v + layout.chan_offset(c) + p * layout.s_p).reshape(n, -1)
    return vals[v] + 1j * vals[v + 1] if layout.ndim == 2 else vals[v] + 0j
