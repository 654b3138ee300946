"""The GPU filterbank's host side, without CuPy: what each chunk makes, and which
output samples are lost, by the reference's rules (search/filterbank.py).

Per chunk of ``n`` complex input samples (``valid``: one bool each, or None):

- with dedispersion, the overlap-save's frames: ``nblock`` FFTs that the carried
  and new samples fill (the fold's rule, fold/plan.py), whose valid middles are
  ``nsrc = nblock * step`` new filtered samples; an output of them is valid when
  every input of its filter span was (``ValidCarry``, StreamingOverlapSave's rule);
- without, the chunk itself: ``nsrc = n``, valid as given (nothing is carried: the
  engine frames each chunk as one frame of its own length);
- then the output samples: the filtered samples carried from the last chunk (fewer
  than one output sample's ``span``) and the new ones make ``k`` whole output
  samples; one is lost when any sample of its span is.

Gathered in :class:`FilterbankSteps`, which also keeps the reference's counters, so
the GPU engine's report equals the CPU's; CI checks it against
``FilterbankReference`` (tests/test_filterbank_gpu_host.py).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from voltstream.fold.gpu_ingest import ValidCarry
from voltstream.search.filterbank import FilterbankPlan

__all__ = ["ChunkStep", "FilterbankSteps"]


@dataclass(frozen=True)
class ChunkStep:
    """What the engine does with one chunk."""

    n: int  # complex input samples
    nblock: int  # overlap-save frames (1 without dedispersion: the chunk)
    nsrc: int  # new filtered samples
    carry_len: int  # filtered samples carried in front of them
    k: int  # whole output samples made
    nout: int  # filtered samples they take (k * span); the rest is carried on
    out_valid: np.ndarray  # (k,) bool
    gap: bool  # every input lost, nothing carried into its frames: zeros


class FilterbankSteps:
    """The reference's framing, validity and counters, chunk by chunk."""

    def __init__(self, plan: FilterbankPlan) -> None:
        self.plan = plan
        self.span = plan.span
        self.dm = plan.ols is not None
        if plan.ols is not None:
            response, head, tail = plan.ols
            self.nfft, self.head = int(response.shape[-1]), int(head)
            self.overlap = int(head) + int(tail)
            self.step_len = self.nfft - self.overlap
            self.valid_carry = ValidCarry(self.overlap)
        self.ols_carry = 0  # input samples the overlap-save holds
        self.carry_ok = np.ones(0, dtype=bool)  # the filtered samples carried, valid
        self.samples_in = 0
        self.lost_in = 0
        self.samples_out = 0
        self.lost_out = 0

    def blocks(self, carry_len: int, n: int) -> int:
        """Overlap-save FFTs that ``carry_len`` carried and ``n`` new samples fill."""
        return max(0, (carry_len + n - self.overlap) // self.step_len)

    def max_src(self, chunk: int) -> int:
        """The most filtered samples one chunk of ``chunk`` inputs makes."""
        if not self.dm:
            return chunk
        return self.blocks(self.nfft - 1, chunk) * self.step_len

    def step(self, n: int, valid: np.ndarray | None) -> ChunkStep:
        """The next chunk: ``n`` inputs, ``valid`` one bool each (None: all there)."""
        ok = None if valid is None else np.asarray(valid, dtype=bool).reshape(n)
        lost = 0 if ok is None else n - int(np.count_nonzero(ok))
        gap = n > 0 and lost == n
        self.samples_in += n
        self.lost_in += lost
        if self.dm:
            nblock = self.blocks(self.ols_carry, n)
            nsrc = nblock * self.step_len
            src_ok = self.valid_carry.step(ok, n, nsrc)
            self.ols_carry += n - nsrc
            gap = False  # the frames hold the carried samples too
        else:
            nblock, nsrc, src_ok = 1, n, ok
        carry_len = self.carry_ok.size
        total = carry_len + nsrc
        k = total // self.span
        nout = k * self.span
        out_ok: np.ndarray
        if src_ok is None and self.carry_ok.all():
            out_ok = np.ones(k, dtype=bool)
            self.carry_ok = np.ones(total - nout, dtype=bool)
        else:
            src = np.ones(nsrc, dtype=bool) if src_ok is None else src_ok[:nsrc]
            v = np.concatenate([self.carry_ok, src])
            out_ok = np.asarray(v[:nout].reshape(k, self.span).all(axis=1))
            self.carry_ok = v[nout:].copy()
        self.samples_out += k
        self.lost_out += k - int(np.count_nonzero(out_ok))
        return ChunkStep(n, nblock, nsrc, carry_len, k, nout, out_ok, gap)
