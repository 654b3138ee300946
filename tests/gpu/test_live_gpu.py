"""Live folding on the GPU (pipeline/live.py fold_live_gpu: capture chunks straight to
the GPU through pipeline/gpu.py) against the file fold of the same packets recorded
the way `voltstream capture --output` records them.

The same simulated pulsar's packets are sent twice over loopback: once into the
capture's DADA sink, once into the live GPU fold. Without loss, the file is folded by
the CPU reference and by the GPU file path and the live archive must equal both (float
tolerance). With a lost packet, DADA cannot say which samples were lost (they are zero
in the file), so the live archive is compared with the CPU reference fed the recorded
samples together with the capture's validity mask: the lost samples are zeroed and
excluded in both.
"""

from __future__ import annotations

import numpy as np
import pytest

from loopback import free_bind, sender
from voltstream.capture.config import CaptureSettings
from voltstream.capture.run import run_capture
from voltstream.fold.gpu import gpu_available
from voltstream.fold.reference import FoldSettings, profile_snr
from voltstream.formats import make_format
from voltstream.io.dada import DadaWriter, open_dada
from voltstream.io.polyco import ConstantPeriod
from voltstream.pipeline.fold import fold_file
from voltstream.pipeline.gpu_file_fold import fold_file_gpu
from voltstream.pipeline.live import GpuChunking, LiveGpuRun, fold_live_gpu
from voltstream.sim.signal import quantize_int8, synthesize
from voltstream.testing import Drop, FaultPlan

from .test_kernels import compare_archives

pytestmark = pytest.mark.gpu

DM, PERIOD = 26.833, 0.0033


@pytest.fixture(scope="module", autouse=True)
def _gpu():
    assert gpu_available(), "no CUDA device visible to CuPy"


class Recorded:
    """The capture's samples and validity as a fold reader."""

    def __init__(self, obs, parts):
        self.obs = obs
        self.x = np.concatenate([s for s, _ in parts])
        self.valid = np.concatenate([v for _, v in parts])

    def read_blocks(self, n):
        for a in range(0, self.x.shape[0], n):
            blk = self.x[a : a + n].astype(np.float32).view(np.complex64)[..., 0]
            yield blk, self.valid[a : a + n]


@pytest.mark.parametrize("lose", [False, True])
@pytest.mark.parametrize(
    "name,kw",
    [("ynao", {}), ("vdif", dict(nchan=16, vdif_payload=4096))],
)
def test_live_gpu_fold_equals_the_file_fold_of_the_recorded_packets(tmp_path, name, kw, lose):
    fmt = make_format(name, chan_bw_mhz=4.0, **kw)
    obs = fmt.observation(start_mjd=60200, start_sec=100.0, source="LIVE")
    spp = fmt.samples_per_packet
    npkt = (int(0.1 / obs.tsamp_s) // spp) + 7
    x = synthesize(obs, (npkt + 1) * spp * obs.tsamp_s, signal="pulsar", dm=DM,
                   period_s=PERIOD, duty=0.05, pulse_phase=0.3, seed=11)  # fmt: skip
    q, _ = quantize_int8(x[: npkt * spp])
    packets = fmt.packetize(q, 5 * spp, obs)  # starts mid-chunk: a cut head
    lost = {fmt.streams * 400} if lose else set()  # one packet of stream 0
    packets = FaultPlan(at={k: Drop() for k in lost}).apply(packets).packets
    pred = ConstantPeriod(PERIOD, obs.start_mjd, obs.start_sec)
    tsub = 0.03
    ppc = 64

    path = tmp_path / "rec.dada"
    bind = free_bind()
    parts = []

    def sink(s, v):
        w.write(s)
        parts.append((s.copy(), v.copy()))

    with DadaWriter(path, obs) as w:
        settings = CaptureSettings.of(bind, packets_per_chunk=ppc, nchunks=512)
        rec = run_capture(fmt, settings, 30, sink=sink, idle_timeout_s=0.7,
                          on_start=sender(bind, packets))  # fmt: skip
    assert rec.totals["missing"] == len(lost) and rec.lost == len(lost)

    bind = free_bind()
    live, report = fold_live_gpu(
        fmt,
        CaptureSettings.of(bind),
        30,
        obs,
        FoldSettings(DM, pred, 128, tsub),
        GpuChunking(ppc),
        run=LiveGpuRun(idle_timeout_s=0.7, on_start=sender(bind, packets), status=False),
    )
    assert report.totals["missing"] == len(lost) and report.lost == len(lost)
    p = report.pipeline
    assert p["registered_bytes"] > 0 and p["registration_warning"] is None
    assert p["samples_fed"] == npkt * spp == rec.samples_written
    assert p["lost_samples"] == len(lost) * spp == live.excluded_samples

    if lose:
        ref = fold_file(Recorded(obs, parts), FoldSettings(DM, pred, 128, tsub))
        assert ref.excluded_samples == spp
        compare_archives(live, ref)
    else:  # the recording read back as the file the user would fold
        compare_archives(live, fold_file(open_dada(path), FoldSettings(DM, pred, 128, tsub)))
        filed = fold_file_gpu(open_dada(path), FoldSettings(DM, pred, 128, tsub))
        compare_archives(live, filed)
        # The file went through the live fold's runner: its counters, the same samples.
        assert set(filed.pipeline) <= set(p) and filed.pipeline["blocks"] > 0
        assert filed.pipeline["samples_fed"] == p["samples_fed"]
        assert filed.pipeline["lost_samples"] == 0
    assert profile_snr(live.profile()) > 20
    assert np.all(live.weights >= 0)
