"""Two folds of the same samples compared, live against file: the one place they
may differ is the sample at phase zero.

With ``--period`` phase zero is the start, so the first sample sits on the edge of
bins 0 and nbin - 1; a live fold's start (the capture's clock) and a file's (its
frames' stamps) round its phase to either side. Every other bin must agree, and the
two edge bins together."""

from __future__ import annotations

import numpy as np


def assert_same_fold(live, file, rtol: float = 1e-5) -> None:
    assert live.data.shape == file.data.shape and np.abs(file.data).max() > 0
    atol = 1e-6 * np.abs(file.data).max()
    np.testing.assert_allclose(live.data[..., 1:-1], file.data[..., 1:-1], rtol=rtol, atol=atol)
    edge = live.data[..., 0] + live.data[..., -1], file.data[..., 0] + file.data[..., -1]
    np.testing.assert_allclose(*edge, rtol=rtol, atol=atol)
