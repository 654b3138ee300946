"""A band that arrives as several streams (issue 26 item 1), folded live on the GPU:
three YNAO subbands on three ports, one capture thread each, the chunk's streams read
by the unpack kernel as channel blocks; the archive equals the CPU live fold's."""

from __future__ import annotations

import numpy as np
import pytest

from cli_process import run_cli
from loopback import free_ports
from test_capture_spread import FOLD, YNAO
from test_cli_outcomes import Listening
from voltstream.io.psrfits import read_psrfits

pytestmark = pytest.mark.gpu


def live_fold(tmp_path, device: str):
    ports = free_ports(3)
    out = tmp_path / f"{device}.fits"
    fold = Listening("fold", "--listen", f"127.0.0.1:{ports[0]}+2", *YNAO, *FOLD,
                     "--device", device, "--duration", "60", "--idle-timeout", "3",
                     "-o", str(out))  # fmt: skip
    dest = ",".join(f"127.0.0.1:{p}" for p in ports)
    r = run_cli("simulate", *YNAO, "--subbands", "3", "--duration", "0.2", "--seed", "5",
                "--signal", "pulsar", "--dm", "10", "--period", "0.0125", "--dest", dest,
                "--rate", "0.5")  # fmt: skip
    assert r.returncode == 0, r.stderr
    rc, o, err = fold.wait()
    assert rc == 0, o + err
    return read_psrfits(out)


def test_a_band_in_three_streams_folds_on_the_gpu_as_on_the_cpu(tmp_path):
    cpu, gpu = live_fold(tmp_path, "cpu"), live_fold(tmp_path, "gpu")
    assert gpu.data.shape == cpu.data.shape and cpu.data.shape[2] == 96
    err = np.max(np.abs(gpu.data - cpu.data)) / np.max(np.abs(cpu.data))
    assert err < 2e-5, err
