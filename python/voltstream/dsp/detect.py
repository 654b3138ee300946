"""Detection: complex voltages (nchan, npol, nsamp) to powers (nchan, npol_out, nsamp).

Modes (A and B are the two receptors, in file order):

- ``"AA+BB"``: total intensity |A|^2 + |B|^2 (just |A|^2 for one polarisation).
- ``"AABBCRCI"``: the coherence products |A|^2, |B|^2, Re(A B*), Im(A B*)
  (PSRFITS POL_TYPE AABBCRCI).
- ``"IQUV"``: Stokes parameters in the PSR/IEEE sense (van Straten et al. 2010).
  For a linear basis (A = X, B = Y):
  I = |X|^2 + |Y|^2, Q = |X|^2 - |Y|^2, U = 2 Re(X* Y), V = 2 Im(X* Y).
  For a circular basis (A = L, B = R, with L = (X + iY)/sqrt 2 and
  R = (X - iY)/sqrt 2), the same Stokes vector is
  I = |L|^2 + |R|^2, Q = 2 Re(L* R), U = -2 Im(L* R), V = |R|^2 - |L|^2,
  so both bases give identical I, Q, U, V for the same wave.
"""

from __future__ import annotations

import numpy as np

from voltstream.errors import ConfigError

__all__ = ["POL_MODES", "detect", "npol_out"]

POL_MODES = ("AA+BB", "AABBCRCI", "IQUV")


def npol_out(mode: str) -> int:
    """Number of output polarisation products of a detection mode."""
    if mode not in POL_MODES:
        raise ConfigError(f"unknown detection mode {mode!r}: use one of {', '.join(POL_MODES)}")
    return 1 if mode == "AA+BB" else 4


def _power(z: np.ndarray) -> np.ndarray:
    return z.real.astype(np.float64) ** 2 + z.imag.astype(np.float64) ** 2


def detect(x: np.ndarray, mode: str = "AA+BB", basis: str = "linear") -> np.ndarray:
    """Detect (nchan, npol, nsamp) complex voltages; returns float64 (nchan, npol_out, nsamp).

    ``basis`` ("linear" or "circular") only matters for ``"IQUV"``.
    """
    npol_out(mode)
    x = np.asarray(x)
    if x.ndim != 3:
        raise ConfigError(f"detect expects (nchan, npol, nsamp) voltages, got shape {x.shape}")
    npol = x.shape[1]
    if mode == "AA+BB":
        if npol not in (1, 2):
            raise ConfigError(f"AA+BB needs 1 or 2 polarisations, the data have {npol}")
        return _power(x).sum(axis=1, keepdims=True)
    if npol != 2:
        raise ConfigError(f"{mode} needs 2 polarisations, the data have {npol}: use AA+BB")
    if basis not in ("linear", "circular"):
        raise ConfigError(f"unknown polarisation basis {basis!r}: use 'linear' or 'circular'")
    a = x[:, 0].astype(np.complex128)
    b = x[:, 1].astype(np.complex128)
    aa, bb = _power(a), _power(b)
    cross = a * np.conj(b)  # A B*
    out = np.empty((x.shape[0], 4, x.shape[2]), dtype=np.float64)
    if mode == "AABBCRCI":
        out[:, 0], out[:, 1], out[:, 2], out[:, 3] = aa, bb, cross.real, cross.imag
        return out
    # A* B = conj(A B*): Re equal, Im opposite.
    out[:, 0] = aa + bb
    if basis == "linear":
        out[:, 1], out[:, 2], out[:, 3] = aa - bb, 2 * cross.real, -2 * cross.imag
    else:
        out[:, 1], out[:, 2], out[:, 3] = 2 * cross.real, 2 * cross.imag, bb - aa
    return out
