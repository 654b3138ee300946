"""`voltstream simulate --signal frb`: dispersed bursts (sim/burst.py, sim/signal.py).
Each burst arrives at each channel at its cold-plasma delay with the fluence asked
for, scattering grows as f^-4, and the command line writes and sends them as it does
the pulsar: a DADA file and UDP packets carry exactly the synthesised samples, and the
single-pulse search finds the burst in the file."""

from __future__ import annotations

import select
import socket
import subprocess
import sys
import time

import numpy as np
import pytest

from cli_process import reaped, run_cli
from sp_data import filterbank
from voltstream.dsp.dedisperse import dispersion_delay_s
from voltstream.errors import ConfigError
from voltstream.io.dada import open_dada
from voltstream.observation import Observation
from voltstream.search.single_pulse import SearchSettings, search_filterbank
from voltstream.sim.burst import Burst
from voltstream.sim.packetize import YNAO_FRAME_LEN, depacketize_ynao, ynao_headers
from voltstream.sim.signal import quantize_int8, synthesize


@pytest.mark.parametrize("shape", ["gaussian", "boxcar"])
@pytest.mark.parametrize("tau_widths", [0.0, 0.3, 3.0, 30.0])
def test_profiles_have_unit_area_and_scattering_delays_them_by_tau(shape, tau_widths):
    b = Burst(times_s=(0.0,), width_s=1e-3, shape=shape)
    tau = tau_widths * b.width_s
    before, after = b.reach_s(tau)
    dt = b.width_s / 500
    t = np.arange(-before, after, dt)
    p = b.profile(t, tau)
    assert np.all(np.isfinite(p)) and p.min() >= 0
    assert np.sum(p) * dt == pytest.approx(1.0, rel=2e-3)
    # The exponential's mean adds to the symmetric profile's (centred on 0).
    assert np.sum(p * t) * dt == pytest.approx(tau, abs=1e-3 * b.width_s + 2e-3 * tau)


def _excess(x: np.ndarray) -> np.ndarray:
    """Power above the noise's (1 per polarisation), per channel: (nsamp, nchan)."""
    return (np.abs(x) ** 2).mean(axis=2) - 1.0


def test_bursts_arrive_at_each_channel_at_the_cold_plasma_delay_with_their_fluence():
    obs = Observation(nchan=4, npol=2, freq_mhz=1400.0, bw_mhz=-16.0, tsamp_s=0.25e-6)
    dm, times = 100.0, (0.01, 0.03)
    # Bright (F/SEFD 10 ms): noise (the burst's own too) moves the centroids by some
    # 10 us, the energies by 1-2%.
    b = Burst(times_s=times, width_s=5e-4, fluence_jy_ms=100.0, sefd_jy=10.0)
    ex = _excess(synthesize(obs, 0.045, signal="frb", dm=dm, burst=b, seed=4))
    t = np.arange(ex.shape[0]) * obs.tsamp_s
    for tb in times:
        for c, f in enumerate(obs.chan_freqs_mhz):
            arrive = tb + dispersion_delay_s(dm, f, obs.freq_mhz)
            near = np.abs(t - arrive) < 3e-3
            energy = ex[near, c].sum() * obs.tsamp_s
            assert energy == pytest.approx(b.energy_s, rel=0.05), (tb, c)
            centroid = (ex[near, c] * t[near]).sum() * obs.tsamp_s / energy
            assert centroid == pytest.approx(arrive, abs=3e-5), (tb, c)


def test_scattering_grows_as_f_to_the_minus_4():
    obs = Observation(nchan=4, npol=2, freq_mhz=400.0, bw_mhz=64.0, tsamp_s=62.5e-9)
    b = Burst(times_s=(0.002,), width_s=1e-4, fluence_jy_ms=200.0, sefd_jy=10.0,
              scattering_s=1e-3)  # fmt: skip
    ex = _excess(synthesize(obs, 0.02, signal="frb", dm=0.0, burst=b, seed=5))
    t = np.arange(ex.shape[0]) * obs.tsamp_s - 0.002
    near = (t > -1e-3) & (t < 0.013)  # 10 of the longest scattering times after
    taus = []
    for c in range(4):
        w = ex[near, c]
        taus.append((w * t[near]).sum() / w.sum())  # the exponential's mean: tau
    want = 1e-3 * (obs.chan_freqs_mhz / 400.0) ** -4
    np.testing.assert_allclose(taus, want, rtol=0.03)
    # Not f^-2: the lowest channel's scattering is 1.62x the highest's, not 1.27x.
    assert taus[0] / taus[3] == pytest.approx((424 / 376) ** 4, rel=0.08)


BAND = ["--format", "ynao", "--chan-bw", "0.5", "--freq", "1400"]  # 32 x 0.5 MHz
FRB = ["--signal", "frb", "--dm", "500", "--width", "0.000256", "--fluence", "1.6",
       "--sefd", "10", "--burst-times", "0.1", "--seed", "3"]  # fmt: skip
OBS = Observation(nchan=32, npol=2, freq_mhz=1400.0, bw_mhz=16.0, tsamp_s=2e-6)
BURST = Burst(times_s=(0.1,), width_s=256e-6, fluence_jy_ms=1.6, sefd_jy=10.0)


def _reference(duration: float) -> np.ndarray:
    return quantize_int8(synthesize(OBS, duration, signal="frb", dm=500.0, burst=BURST, seed=3))[0]


def test_a_burst_written_to_dada_is_the_synthesised_one_and_the_search_finds_it(tmp_path):
    path = tmp_path / "frb.dada"
    r = run_cli("simulate", *BAND, *FRB, "--duration", "0.2", "--output", str(path))
    assert r.returncode == 0, r.stderr
    assert "1 burst(s) at DM 500" in r.stdout and "matched-filter S/N 46.1" in r.stdout
    with open_dada(path) as f:
        raw = np.array(f.read_raw(0, f.nsamp))
    assert np.array_equal(raw, _reference(0.2)[: raw.shape[0]])
    x = raw.astype(np.float32).view(np.complex64)[..., 0]
    data, freqs, tsamp = filterbank(x, OBS, nfft=16)
    st = SearchSettings(dm_min=450, dm_max=550, window_s=0.2)
    c = search_filterbank(data, freqs, tsamp, settings=st).candidates[0]
    t_top = 0.1 + dispersion_delay_s(500.0, freqs.max(), OBS.freq_mhz)
    assert abs(c.dm - 500.0) < 5 and abs(c.time_s - t_top) < 256e-6 and c.snr > 30


def _receive_until_quiet(s: socket.socket, proc: subprocess.Popen) -> list[bytes]:
    """Every datagram until the sender has exited and the socket is quiet for 0.5 s."""
    got: list[bytes] = []
    deadline = time.monotonic() + 60
    quiet_since = None
    while time.monotonic() < deadline:
        if select.select([s], [], [], 0.1)[0]:
            got.append(s.recv(65536))
            quiet_since = None
        elif proc.poll() is not None:
            quiet_since = quiet_since or time.monotonic()
            if time.monotonic() - quiet_since > 0.5:
                break
    return got


def test_bursts_go_over_udp_as_the_pulsar_does():
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)
        s.bind(("127.0.0.1", 0))
        dest = f"127.0.0.1:{s.getsockname()[1]}"
        argv = [*BAND, *FRB, "--burst-times", "0.002", "--duration", "0.004",
                "--dest", dest, "--rate", "0.1"]  # fmt: skip
        proc = subprocess.Popen(
            [sys.executable, "-m", "voltstream.cli", "simulate", *argv],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        with reaped(proc):
            got = _receive_until_quiet(s, proc)
            out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    pkts = np.frombuffer(b"".join(got), dtype=np.uint8).reshape(-1, YNAO_FRAME_LEN)
    order = np.argsort(ynao_headers(pkts)["sequence"], kind="stable")
    _, x = depacketize_ynao(pkts[order])
    ref = quantize_int8(
        synthesize(
            OBS,
            0.004,
            signal="frb",
            dm=500.0,
            seed=3,
            burst=Burst(times_s=(0.002,), width_s=256e-6, fluence_jy_ms=1.6),
        )  # fmt: skip
    )[0]
    want = ref[: x.shape[0]].astype(np.float32).view(np.complex64)[..., 0]
    assert x.shape[0] == 1984 and np.array_equal(x, want)


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--width", "1e-7"], "below two samples"),
        (["--burst-times", "0.1,oops"], "expected times in seconds"),
        (["--burst-times", "-1"], "expected times in seconds"),
        (["--sefd", "0"], "--sefd"),
    ],
)
def test_burst_option_errors_are_one_clear_line(tmp_path, argv, message):
    r = run_cli("simulate", *BAND, "--signal", "frb", "--duration", "0.01", *argv,
                "--output", str(tmp_path / "x.dada"))  # fmt: skip
    assert r.returncode == 2 and message in r.stderr and "Traceback" not in r.stderr
    assert len(r.stderr.strip().splitlines()) <= 2, r.stderr


def test_a_burst_needs_a_sane_width_in_the_library_too():
    obs = Observation(nchan=2, npol=1, freq_mhz=1400.0, bw_mhz=2.0, tsamp_s=1e-6)
    with pytest.raises(ConfigError, match="burst shape"):
        synthesize(obs, 0.001, signal="frb", burst=Burst(times_s=(0.0,), shape="tophat"))
