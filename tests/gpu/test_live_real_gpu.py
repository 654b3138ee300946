"""Real-sampled VDIF folded live on the GPU (issue 27 item 4): `fold --listen --real
--device gpu` takes the capture's chunks of 2-bit real frames, converts them to complex
baseband on the GPU (fold/gpu_real.py) and folds; the archive equals the CPU live fold
of the same frames (RealToComplex on the host), a lost frame included. Also four threads
of one real channel each (EDV3, a DBBC3's subbands: io/vdif_threads.py), as four
subbands of one polarisation and as two subbands of two: every thread folded, the
kernel reading each thread's frames as its block of channels and pol."""

from __future__ import annotations

import numpy as np
import pytest

from cli_process import run_cli
from loopback import free_bind, send
from test_cli_outcomes import Listening
from voltstream.io.psrfits import read_psrfits

pytestmark = pytest.mark.gpu

# Two threads (polarisations) of 8 real channels, 2 MS/s each (1 MHz complex channels).
REAL = ("--format", "vdif", "--real", "--bits", "2", "--nchan", "8", "--chan-bw", "1",
        "--vdif-payload", "1000")  # fmt: skip
# Four threads of one real channel each: four subbands (--npol 1), or two of two pols.
REAL4 = ("--format", "vdif", "--real", "--bits", "2", "--nchan", "1", "--chan-bw", "1",
         "--vdif-payload", "1000", "--vdif-threads", "0,1,2,3")  # fmt: skip
FOLD = ("--dm", "5", "--period", "0.02", "--nbin", "64", "--tsub", "0.1")


def _frames(tmp_path, fmt=REAL):
    path = tmp_path / "real.vdif"
    r = run_cli("simulate", *fmt, "--signal", "pulsar", "--dm", "5", "--period", "0.02",
                "--duty", "0.1", "--duration", "0.5", "--seed", "3", "-o", str(path))  # fmt: skip
    assert r.returncode == 0, r.stderr
    frames = np.fromfile(path, np.uint8).reshape(-1, 1032)
    return np.delete(frames, 301, axis=0)  # one frame of one thread lost


def live_fold(tmp_path, frames, device: str, fmt=REAL):
    bind, out = free_bind(), tmp_path / f"{device}.fits"
    fold = Listening("fold", "--listen", bind, *fmt, *FOLD, "--device", device,
                     "--engine", "socket", "--duration", "60", "--idle-timeout", "3",
                     "-o", str(out))  # fmt: skip
    send(bind, frames, pace_every=32)
    rc, o, err = fold.wait()
    assert rc == 0, o + err
    assert "real samples" in err and "missing=1  " in o
    return read_psrfits(out)


def test_real_vdif_folds_live_on_the_gpu_as_on_the_cpu(tmp_path):
    frames = _frames(tmp_path)
    cpu, gpu = live_fold(tmp_path, frames, "cpu"), live_fold(tmp_path, frames, "gpu")
    assert gpu.data.shape == cpu.data.shape and cpu.data.shape[2] == 8
    err = np.max(np.abs(gpu.data - cpu.data)) / np.max(np.abs(cpu.data))
    assert err < 2e-5, err
    np.testing.assert_allclose(gpu.weights, cpu.weights, rtol=1e-12)
    assert np.any(cpu.weights < 1)  # the lost frame's outputs were kept out


@pytest.mark.parametrize("npol,nchan", [("1", 4), ("2", 2)])
def test_four_real_threads_fold_live_on_the_gpu_as_on_the_cpu(tmp_path, npol, nchan):
    fmt = (*REAL4, "--npol", npol)
    frames = _frames(tmp_path, fmt)
    assert len(frames) == 999  # 250 frames of each of 4 threads, one lost
    cpu = live_fold(tmp_path, frames, "cpu", fmt)
    gpu = live_fold(tmp_path, frames, "gpu", fmt)
    assert gpu.data.shape == cpu.data.shape and cpu.data.shape[2] == nchan
    err = np.max(np.abs(gpu.data - cpu.data)) / np.max(np.abs(cpu.data))
    assert err < 2e-5, err
    np.testing.assert_allclose(gpu.weights, cpu.weights, rtol=1e-12)
    assert np.any(cpu.weights < 1)  # the lost frame's outputs were kept out
