"""`voltstream fold --device gpu` on a DADA file: the CLI's GPU path (one engine and
two workers on one GPU) gives the CPU reference's archive and finds the pulse."""

from __future__ import annotations

import numpy as np
import pytest

from voltstream.cli import build_parser
from voltstream.cli.commands import _fold_on
from voltstream.device import resolve_device
from voltstream.fold.reference import FoldSettings, profile_snr
from voltstream.io.dada import DadaWriter, open_dada
from voltstream.io.polyco import ConstantPeriod
from voltstream.observation import Observation
from voltstream.sim.signal import quantize_int8, synthesize_blocks

pytestmark = pytest.mark.gpu

DM, PERIOD, PHASE = 26.833, 0.0071, 0.4


@pytest.fixture(scope="module")
def dada(tmp_path_factory):
    obs = Observation(
        nchan=8,
        npol=2,
        freq_mhz=1420.0,
        bw_mhz=-16.0,
        tsamp_s=0.5e-6,
        start_mjd=60100,
        start_sec=456.0,
    )
    path = tmp_path_factory.mktemp("cli") / "psr.dada"
    seed = int(np.random.default_rng().integers(1 << 30))
    with DadaWriter(path, obs) as w:
        for block in synthesize_blocks(
            obs,
            0.12,
            signal="pulsar",
            dm=DM,
            period_s=PERIOD,
            duty=0.03,
            pulse_phase=PHASE,
            seed=seed,
        ):
            w.write(quantize_int8(block)[0])
    return path


def fold(path, *extra):
    args = build_parser().parse_args(
        [
            "fold",
            str(path),
            "--dm",
            str(DM),
            "--period",
            str(PERIOD),
            "--nbin",
            "64",
            "-o",
            "unused.fits",
            *extra,
        ]
    )
    reader = open_dada(path)
    pred = ConstantPeriod(PERIOD, reader.obs.start_mjd, reader.obs.start_sec)
    device = resolve_device(args.device)
    settings = FoldSettings(args.dm, pred, args.nbin, 0.03, pol_mode=args.pol)
    return device, _fold_on(device, args, reader, settings)


@pytest.mark.parametrize("extra", [(), ("--workers-per-gpu", "2")])
def test_cli_gpu_fold_equals_cpu(dada, extra):
    dev_cpu, cpu = fold(dada, "--device", "cpu")
    dev_gpu, gpu = fold(dada, "--device", "gpu", *extra)
    assert (dev_cpu, dev_gpu) == ("cpu", "gpu")
    assert gpu.data.shape == cpu.data.shape
    err = np.max(np.abs(gpu.data - cpu.data)) / np.max(np.abs(cpu.data))
    assert err < 2e-5, err
    np.testing.assert_allclose(gpu.weights, cpu.weights, rtol=1e-12)
    prof = gpu.profile()
    assert profile_snr(prof) > 10
    assert abs((np.argmax(prof) + 0.5) / gpu.nbin - PHASE) < 0.03


def test_record_and_fold_on_the_gpu_in_one_process(tmp_path):
    """A pipeline file's [record] and [fold] with device = "gpu": the recorder writes
    every chunk and passes it on; the GPU folds the written chunks where they lie
    (whole packets in their slots for the vbs layout) and finds the pulsar."""
    import json
    import time

    from loopback import free_bind, wait_bound
    from test_pipeline_file import _simulate, _start, record_and_fold_toml

    bind = free_bind()
    for d in ("d0", "d1"):
        (tmp_path / d).mkdir()
    # The idle timeout also bounds the wait for the first packet: longer than the sleep.
    toml = record_and_fold_toml(bind, "g1", "gpu", engine="socket", idle_timeout=20)
    (tmp_path / "pipe.toml").write_text(toml)
    proc = _start(["run", "pipe.toml"], tmp_path)
    time.sleep(8)  # the GPU folder is made after the recording starts (docs/pipeline.md)
    try:
        wait_bound(bind, 30)
        sent = _simulate(bind, "0.2")
    except AssertionError as e:
        proc.kill()
        raise AssertionError(f"{e}\nthe pipeline said: {proc.communicate()}") from e
    out, err = proc.communicate(timeout=180)
    assert proc.returncode == 0, err
    report = json.loads((tmp_path / "r.json").read_text())
    rec, fold = report["record"], report["fold"]
    assert rec["capture"]["totals"]["received"] == sent
    written = rec["record"]["chunks_written"]
    assert written > 0 and rec["record"]["chunks_forwarded"] == written
    assert rec["record"]["chunks_not_forwarded"] == 0
    assert fold["snr"] > 20
