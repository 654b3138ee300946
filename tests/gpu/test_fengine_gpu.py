"""The GPU F-engine against the NumPy float64 reference (docs/fengine.md).

Fresh random data per test (never zeros), outputs poisoned before each run. The
quantised outputs may differ by one step where a value lies within float32
rounding of a half-integer; everything else must be equal.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from voltstream.dsp.delay import DelayModel
from voltstream.dsp.pfb import channel_response, pfb_channelize, pfb_weights
from voltstream.dsp.quantize import slot_dither, splitmix64, unpack4
from voltstream.fengine.reference import FEngineReference, postprocess
from voltstream.sim.spead import pack_samples

pytestmark = pytest.mark.gpu

FS = 1712e6


@pytest.fixture(scope="module")
def cp():
    import cupy

    assert cupy.cuda.runtime.getDeviceCount() > 0, "no CUDA device visible to CuPy"
    return cupy


def gpu_engine(**kw):
    from voltstream.fengine.gpu import GpuFEngine

    return GpuFEngine(**kw)


def random_samples(rng, n, bits, scale=None):
    lim = (1 << (bits - 1)) - 1
    scale = scale or lim / 5
    x = np.clip(np.round(rng.standard_normal((2, n)) * scale), -lim, lim).astype(np.int64)
    x[x == 0] = 1  # never zeros
    return x


def quantised_close(got, want, bits, max_fraction=5e-3):
    """Equal, except a tiny fraction of parts one step apart (float32 vs float64 rounding)."""
    if bits == 4:
        got, want = unpack4(got), unpack4(want)
    diff = np.abs(got.astype(np.int64) - want.astype(np.int64))
    assert diff.max(initial=0) <= 1, f"outputs differ by up to {diff.max()} steps"
    frac = np.count_nonzero(diff) / max(diff.size, 1)
    assert frac <= max_fraction, f"{frac:.2e} of the outputs differ"
    return int(np.count_nonzero(diff))


@pytest.mark.parametrize("sample_bits", [8, 10, 12, 16])
@pytest.mark.parametrize("nchan,taps", [(32, 1), (64, 4), (1024, 16), (256, 7)])
def test_fir_fft_matches_reference(cp, sample_bits, nchan, taps):
    rng = np.random.default_rng()
    eng = gpu_engine(nchan=nchan, taps=taps, spectra_per_heap=4, sample_bits=sample_bits)
    nspec = 37
    x = random_samples(
        rng, (nspec + taps - 1) * 2 * nchan + 8 * int(rng.integers(0, 9)), sample_bits
    )
    got = eng.channelize(x)
    for p in range(2):
        want = pfb_channelize(x[p], nchan, taps)
        assert got[p].shape == want.shape
        err = np.linalg.norm(got[p] - want) / np.linalg.norm(want)
        assert err < 2e-6, f"pol {p}: relative error {err:.2e}"


@pytest.mark.parametrize("out_bits", [8, 4])
@pytest.mark.parametrize("dither", [False, True])
def test_postprocess_matches_reference(cp, out_bits, dither):
    from voltstream.fengine.kernels import FEngineTemplate

    rng = np.random.default_rng()
    nchan, sph, nslots = 96, 40, 5  # neither a multiple of the 32x32 tile
    total = nslots * sph
    scale = 60.0 if out_bits == 8 else 4.0  # some values clip
    spec = (
        rng.standard_normal((2, total, nchan + 1)) + 1j * rng.standard_normal((2, total, nchan + 1))
    ) * scale
    spec = spec.astype(np.complex64)
    tau = rng.uniform(-0.5, 0.5, (2, total)) / FS
    phi = rng.uniform(-1e4, 1e4, (2, total))  # large phases: the kernel reduces them
    gains = (rng.standard_normal((2, nchan)) + 1j * rng.standard_normal((2, nchan))).astype(
        np.complex64
    )
    send = np.array([0, 2, 3], dtype=np.int32)
    slot_ids = np.array([1000, 1002, 1003], dtype=np.int64)
    seed = int(rng.integers(0, 2**31))
    k = FEngineTemplate(8, 4, out_bits).instantiate(nchan)
    shape = (len(send), nchan, sph) + ((2, 2) if out_bits == 8 else (2,))
    out = cp.full(shape, 0x55, dtype=cp.int8 if out_bits == 8 else cp.uint8)  # poison
    sat = cp.zeros((len(send), 2), dtype=cp.uint64)  # the kernel adds to it
    key = int(splitmix64(np.array(seed, dtype=np.uint64))) if dither else None
    rot = cp.asarray(k.rotation(tau, phi, FS / (2 * nchan)))
    k.post(
        cp.asarray(spec), rot, cp.asarray(gains), cp.asarray(send), cp.asarray(slot_ids),
        out, sat, key,
    )  # fmt: skip
    out, sat = cp.asnumpy(out), cp.asnumpy(sat)
    f = np.arange(nchan) * FS / (2 * nchan)
    for z, (slot, sid) in enumerate(zip(send, slot_ids, strict=True)):
        rows = slice(slot * sph, (slot + 1) * sph)
        d = slot_dither(seed, int(sid), (2, sph, nchan)) if dither else None
        want, want_sat = postprocess(
            spec[:, rows, :nchan].astype(np.complex128), f, tau[:, rows], phi[:, rows],
            gains.astype(np.complex128), out_bits, d,
        )  # fmt: skip
        n_off = quantised_close(out[z], want, out_bits)
        assert np.all(np.abs(sat[z].astype(np.int64) - want_sat) <= n_off)
        assert want_sat.sum() > 0, "the test should exercise saturation"


def make_pair(**kw):
    args = dict(nchan=64, taps=8, spectra_per_heap=6, sample_rate_hz=FS, n_substreams=4)
    args.update(kw)
    sample_bits = args.pop("sample_bits", 16)
    return FEngineReference(**args), gpu_engine(sample_bits=sample_bits, **args)


def configure(engines, rng, nchan, sample_bits, out_bits, t0):
    # Delays that step by whole samples during the run (coarse-delay changes).
    models = [
        DelayModel(
            40.3 / FS, delay_rate=2e-4, phase_rad=0.3, phase_rate_rad_s=5e3, epoch_sample=t0
        ),
        DelayModel(3.7 / FS, delay_rate=-1e-4, phase_rad=-1.0, epoch_sample=t0 + 5000),
    ]
    # Output near 30 (8-bit) or 3 (4-bit) steps rms: a few values clip.
    scale = (30.0 if out_bits == 8 else 3.0) / (((1 << (sample_bits - 1)) - 1) / 5)
    gains = (rng.standard_normal((2, nchan)) + 1j * rng.standard_normal((2, nchan))) * scale
    for e in engines:
        e.set_gains(gains)
        for p in range(2):
            e.set_delay_model(p, models[p])


def assert_same_heaps(gpu_heaps, ref_heaps, bits):
    key = [(h.timestamp, h.frequency, h.substream) for h in ref_heaps]
    assert [(h.timestamp, h.frequency, h.substream) for h in gpu_heaps] == key
    assert len(key) > 0
    for g, r in zip(gpu_heaps, ref_heaps, strict=True):
        assert g.payload.shape == r.payload.shape and g.payload.dtype == r.payload.dtype
        quantised_close(g.payload, r.payload, bits)


@pytest.mark.parametrize("sample_bits,out_bits", [(16, 8), (10, 8), (8, 4), (12, 8)])
def test_engine_equals_reference_with_delays_gains_dither_and_loss(cp, sample_bits, out_bits):
    rng = np.random.default_rng()
    ref, gpu = make_pair(
        sample_bits=sample_bits, bits=out_bits, max_delay_samples=96, dither_seed=7
    )
    t0 = 123_456 * 8
    configure([ref, gpu], rng, 64, sample_bits, out_bits, t0)
    n = 40 * 768
    x = random_samples(rng, n, sample_bits)
    valid = np.ones((2, n), dtype=bool)
    valid[0, 9000:9008] = False  # one lost packet in pol 0
    valid[:, 21000:21100] = False  # a burst in both
    cuts = sorted({8 * int(c) for c in rng.integers(1, n // 8, 5)})
    edges = [0, *cuts, n]
    r_heaps, g_heaps = [], []
    for a, b in zip(edges[:-1], edges[1:], strict=True):
        r_heaps += ref.process(x[:, a:b], t0 + a, valid[:, a:b])
        g_heaps += gpu.process(x[:, a:b], t0 + a, valid[:, a:b])
    assert_same_heaps(g_heaps, r_heaps, out_bits)
    for name in ("spectra", "flagged_spectra", "heaps_made", "heaps_skipped"):
        assert getattr(gpu.counters, name) == getattr(ref.counters, name), name
    assert ref.counters.heaps_skipped > 0
    assert np.all(np.abs(gpu.counters.saturated - ref.counters.saturated) <= 50)


def test_both_engines_follow_the_plan_they_are_given(cp):
    """One FEnginePlan given to both engines (composition): the GPU engine keeps that
    plan and its host planner uses it, and with a plan whose windows are one spectrum
    late (a plan bug) both still agree, so a wrong plan is the plan's, caught by
    tests/test_fengine_plan.py, not hidden by one engine planning on its own."""
    from voltstream.fengine.plan import FEnginePlan, SpectrumWindows

    class LatePlan(FEnginePlan):
        def windows(self, slots, delay_models):
            w = super().windows(slots, delay_models)
            return SpectrumWindows(w.starts + self.step, w.residual_s, w.phase_rad, w.out_of_range)

    right = FEnginePlan.make(64, 8, 6, sample_rate_hz=FS, n_substreams=4, max_delay_samples=96)
    wrong = LatePlan(*(getattr(right, f) for f in right.__dataclass_fields__))
    rng = np.random.default_rng()
    t0 = 4096 * 300
    x = random_samples(rng, 24 * 768, 16)
    outputs = []
    for plan in (right, wrong):
        ref, gpu = FEngineReference(plan=plan), gpu_engine(plan=plan, sample_bits=16)
        assert gpu.plan is plan and gpu.slots.plan is plan
        configure([ref, gpu], np.random.default_rng(5), 64, 16, 8, t0)
        r_heaps, g_heaps = [], []
        for a in range(0, x.shape[1], 3072):
            r_heaps += ref.process(x[:, a : a + 3072], t0 + a)
            g_heaps += gpu.process(x[:, a : a + 3072], t0 + a)
        assert_same_heaps(g_heaps, r_heaps, 8)
        outputs.append(r_heaps)
    same = [(a, b) for a, b in zip(*outputs, strict=False) if a.timestamp == b.timestamp]
    assert same and any(not np.array_equal(a.payload, b.payload) for a, b in same)


def test_gap_and_async_path_equal_reference(cp):
    rng = np.random.default_rng()
    ref, gpu = make_pair(sample_bits=10, max_delay_samples=64, dither_seed=3, nchan=128)
    block = 4096
    t0 = 4096 * 1000
    configure([ref, gpu], rng, 128, 10, 8, t0)
    x = random_samples(rng, 12 * block, 10)
    r_heaps, g_heaps = [], []
    for i in range(12):
        if i == 7:
            continue  # a missing block: a gap between calls
        xs = x[:, i * block : (i + 1) * block]
        r_heaps += ref.process(xs, t0 + i * block)
        nbytes = 2 * block * 10 // 8
        pinned = cp.cuda.alloc_pinned_memory(nbytes)
        raw = np.frombuffer(pinned, dtype=np.uint8, count=nbytes).reshape(2, -1)
        raw[:] = np.stack([pack_samples(xs[p], 10) for p in range(2)])
        got = gpu.process_packed_async(raw, t0 + i * block)
        g_heaps += [dataclasses.replace(h, payload=h.payload.copy()) for h in got]
    g_heaps += gpu.flush()
    assert_same_heaps(g_heaps, r_heaps, 8)
    assert gpu.counters.heaps_skipped == ref.counters.heaps_skipped > 0


def test_tone_sweep_gives_the_weights_response_on_the_gpu(cp):
    nchan, taps = 1024, 16
    eng = gpu_engine(nchan=nchan, taps=taps, spectra_per_heap=4, sample_bits=16)
    w = pfb_weights(nchan, taps)
    k0 = 200
    offsets = np.linspace(-2.0, 2.0, 41)
    n = (taps + 3) * 2 * nchan
    t = np.arange(n)
    amp = 30000.0
    got = []
    for d in offsets:
        x = np.round(amp * np.cos(2 * np.pi * (k0 + d) * t / (2 * nchan)))
        spec = eng.channelize(np.stack([x, x]).astype(np.int64))
        got.append(np.abs(spec[0, :, k0]).mean())
    want = amp / 2 * channel_response(w, nchan, offsets)
    got_db = 20 * np.log10(np.array(got) / want.max())
    want_db = 20 * np.log10(want / want.max())
    deep = want_db > -60
    assert np.count_nonzero(~deep) > 0, "the sweep should reach the stop band"
    assert np.max(np.abs(got_db[deep] - want_db[deep])) < 1.0


def test_delay_shows_as_phase_slope_across_channels(cp):
    rng = np.random.default_rng()
    nchan = 256
    gpu = gpu_engine(nchan=nchan, taps=8, spectra_per_heap=32, sample_rate_hz=FS, sample_bits=16)
    tau = 0.37 / FS
    gpu.set_delay_model(1, DelayModel(delay_s=tau))
    gpu.set_gains(0.015)
    n = 40 * 2 * nchan * 32
    s = np.round(rng.standard_normal(n) * 2000).astype(np.int64)
    heaps = gpu.process(np.stack([s, s]), 0)
    assert heaps
    cross = np.zeros(nchan, dtype=np.complex128)
    for h in heaps:
        v = h.payload[..., 0].astype(np.float64) + 1j * h.payload[..., 1]  # (chan, spec, pol)
        cross += np.sum(v[:, :, 0] * np.conj(v[:, :, 1]), axis=1)
    f = np.arange(nchan) * FS / (2 * nchan)
    # X1 = X0 * exp(-2 pi i f tau): the cross product has phase +2 pi f tau.
    k = np.arange(8, nchan - 8)
    residual = np.angle(cross[k] * np.exp(-2j * np.pi * f[k] * tau))
    assert np.max(np.abs(residual)) < 0.05


def test_naive_baseline_equals_reference(cp):
    from voltstream.fengine.gpu import naive_channelize

    rng = np.random.default_rng()
    nchan, taps, sph = 128, 4, 8
    for bits in (8, 10, 16):
        x = random_samples(rng, (taps - 1 + 3 * sph) * 2 * nchan, bits)
        raw = np.stack([pack_samples(x[p], bits) for p in range(2)])
        gains = np.full((2, nchan), 0.03 + 0.01j, dtype=np.complex64)
        w = pfb_weights(nchan, taps)
        got = cp.asnumpy(
            naive_channelize(
                cp, cp.asarray(raw), bits, cp.asarray(w, dtype=cp.float32), nchan,
                cp.asarray(gains), sph,
            )
        )  # fmt: skip
        ref = FEngineReference(nchan, taps, sph, sample_rate_hz=FS)
        ref.set_gains(gains.astype(np.complex128))
        heaps = ref.process(x, 0)
        assert got.shape == (3, nchan, sph, 2, 2) and len(heaps) == 3
        for i, h in enumerate(heaps):
            quantised_close(got[i], h.payload, 8)


@pytest.mark.parametrize("out_bits,per_packet", [(8, 64), (4, 32)])
def test_packet_mode_gives_the_reference_heaps_as_packets(cp, out_bits, per_packet):
    """emit_packets: payloads copied from the GPU into their packets (after the
    headers) in pinned buffers; headers exact, payloads as the reference's."""
    from voltstream.fengine import encode_heap, heap_counter
    from voltstream.fengine.packets import PacketBatch, PacketFormat

    rng = np.random.default_rng()
    ref, gpu = make_pair(sample_bits=10, bits=out_bits, max_delay_samples=64, feng_id=1)
    t0 = 4096 * 100
    configure([ref, gpu], rng, 64, 10, out_bits, t0)
    fmt = PacketFormat(gpu.layout, per_packet, feng_id=1, n_fengs=2)
    gpu.emit_packets(fmt, queued_blocks=1)
    block = 4096
    gpu.warm_up(block)  # leaves no trace: the heaps and counters are a fresh engine's
    x = random_samples(rng, 10 * block, 10)
    r_heaps, batches = [], []
    for i in range(10):
        xs = x[:, i * block : (i + 1) * block]
        r_heaps += ref.process(xs, t0 + i * block)
        nbytes = 2 * block * 10 // 8
        raw = np.frombuffer(cp.cuda.alloc_pinned_memory(nbytes), np.uint8, nbytes).reshape(2, -1)
        raw[:] = np.stack([pack_samples(xs[p], 10) for p in range(2)])
        for b in gpu.process_packed_async(raw, t0 + i * block):
            assert isinstance(b, PacketBatch) and b.packets.shape == fmt.shape(len(b.slots))
            batches.append((b.packets.copy(), b.heaps()))
            b.release()  # the pool holds only ASYNC_DEPTH + 2 buffers: keeping them stalls
    assert gpu.packet_pool.waits == 0
    g_heaps = [h for _, hs in batches for h in hs] + gpu.flush()
    assert_same_heaps(g_heaps, r_heaps, out_bits)
    for name in ("spectra", "flagged_spectra", "heaps_made", "heaps_skipped"):
        assert getattr(gpu.counters, name) == getattr(ref.counters, name), name
    assert gpu.timing["calls"] == 10 and gpu.timing["gpu_busy_s"] > 0
    # Every packet's header is the one heap-by-heap encoding gives, and the payload
    # bytes sit after it.
    sph = gpu.layout.samples_per_heap
    for packets, heaps in batches:
        flat = packets.reshape(-1, fmt.packets_per_heap, fmt.packet_len)
        for got, h in zip(flat, heaps, strict=True):
            want = encode_heap(h, heap_counter(h.timestamp, sph, 1, 2), per_packet)
            np.testing.assert_array_equal(got, want)


def test_restart_in_place_starts_a_new_time_line(cp):
    """restart(): after a jump back in time the GPU engine, its buffers and pools kept,
    gives what a fresh reference gives for the new time line."""
    rng = np.random.default_rng()
    ref, gpu = make_pair(sample_bits=10)
    block = 4096
    x = random_samples(rng, 8 * block, 10)
    for i in range(4):
        gpu.process(x[:, i * block : (i + 1) * block], 10**6 + i * block)
    before = gpu.counters.heaps_made
    gpu.flush()
    gpu.restart()
    r_heaps, g_heaps = [], []
    for i in range(4, 8):
        t = 5000 * 8 + i * block  # earlier than everything fed so far
        r_heaps += ref.process(x[:, i * block : (i + 1) * block], t)
        g_heaps += gpu.process(x[:, i * block : (i + 1) * block], t)
    assert_same_heaps(g_heaps, r_heaps, 8)
    assert gpu.counters.heaps_made == before + ref.counters.heaps_made
