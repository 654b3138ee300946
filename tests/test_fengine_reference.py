import math

import numpy as np
import pytest

from voltstream.dsp.delay import DelayModel
from voltstream.dsp.pfb import pfb_weights
from voltstream.dsp.quantize import slot_dither, unpack4
from voltstream.errors import ConfigError, FormatError
from voltstream.fengine import FEngineReference, HeapLayout, OutputHeap
from voltstream.fengine.heaps import decode_output_heap, decode_packets, encode_heap, heap_counter

FS = 1e6


def engine(**kw):
    args = dict(nchan=16, taps=4, spectra_per_heap=8, sample_rate_hz=FS)
    args.update(kw)
    return FEngineReference(**args)


def noise(rng, n, scale=40.0):
    return np.round(rng.standard_normal((2, n)) * scale).astype(np.int16)


def run_blocks(eng, x, t0, cuts, valid=None):
    heaps = []
    edges = [0, *cuts, x.shape[1]]
    for a, b in zip(edges[:-1], edges[1:], strict=True):
        v = None if valid is None else valid[:, a:b]
        heaps += eng.process(x[:, a:b], t0 + a, v)
    return heaps


def same_heaps(a, b):
    assert [(h.timestamp, h.frequency, h.substream) for h in a] == [
        (h.timestamp, h.frequency, h.substream) for h in b
    ]
    for ha, hb in zip(a, b, strict=True):
        np.testing.assert_array_equal(ha.payload, hb.payload)


def test_heap_equals_chain_computed_by_hand():
    nchan, taps, nspec, nsub, seed = 16, 4, 8, 4, 9
    step, length = 2 * nchan, taps * 2 * nchan
    rng = np.random.default_rng(10)
    models = [
        DelayModel(delay_s=5.3 / FS, delay_rate=1e-3, phase_rad=0.4, phase_rate_rad_s=30.0),
        DelayModel(delay_s=2.1 / FS, phase_rad=-1.1, epoch_sample=300),
    ]
    gains = (rng.standard_normal((2, nchan)) + 1j * rng.standard_normal((2, nchan))) * 0.3
    eng = engine(n_substreams=nsub, max_delay_samples=16, dither_seed=seed)
    for p in range(2):
        eng.set_delay_model(p, models[p])
    eng.set_gains(gains)
    t_in = 1000
    x = noise(rng, 3000)
    heaps = eng.process(x, t_in)
    assert len(heaps) > 0 and len(heaps) % nsub == 0
    heap_len = nspec * step
    # First slot: first multiple of 256 samples at or after 1000 + 16.
    assert heaps[0].timestamp == 1024
    w = pfb_weights(nchan, taps)
    n = np.arange(length)
    dft = np.exp(-2j * np.pi * np.outer(np.arange(nchan), n) / step) * w  # (chan, n)
    for first in range(0, len(heaps), nsub):
        t0 = heaps[first].timestamp
        slot = t0 // heap_len
        dither = slot_dither(seed, slot, (2, nspec, nchan))
        expected = np.zeros((nchan, nspec, 2, 2), dtype=np.int64)
        for p in range(2):
            m = models[p]
            for s in range(nspec):
                t = t0 + s * step
                dt = (t - m.epoch_sample) / FS
                tau = m.delay_s + m.delay_rate * dt
                phi = m.phase_rad + m.phase_rate_rad_s * dt
                coarse = math.floor(tau * FS + 0.5)
                frac = tau - coarse / FS
                window = x[p, t - coarse - t_in : t - coarse - t_in + length].astype(float)
                spec = dft @ window
                f = np.arange(nchan) * FS / step
                z = spec * np.exp(1j * (phi - 2 * np.pi * f * frac)) * gains[p]
                for k in range(nchan):
                    for part, v in enumerate((z[k].real, z[k].imag)):
                        q = round(v + dither[p, s, k, part])
                        expected[k, s, p, part] = max(-127, min(127, q))
        for sub in range(nsub):
            h = heaps[first + sub]
            assert (h.timestamp, h.substream, h.frequency) == (t0, sub, sub * nchan // nsub)
            assert h.payload.dtype == np.int8 and h.payload.shape == (4, nspec, 2, 2)
            np.testing.assert_array_equal(h.payload, expected[sub * 4 : sub * 4 + 4])
    assert eng.counters.heaps_made == len(heaps)
    assert eng.counters.heaps_skipped == 0


def test_blockwise_equals_one_shot():
    rng = np.random.default_rng(11)
    n = 9000
    x = noise(rng, n)
    valid = np.ones((2, n), dtype=bool)
    valid[1, 5000:5003] = False
    # Delay rate moves the coarse delay by ~18 samples over the run, mid-heap too.
    models = [
        DelayModel(delay_s=3.6 / FS, delay_rate=2e-3, phase_rate_rad_s=50.0),
        DelayModel(delay_s=10.2 / FS, delay_rate=-1e-3, phase_rad=0.3),
    ]
    gains = 0.5 * np.exp(1j * rng.uniform(0, 2 * np.pi, (2, 16)))

    def make():
        eng = engine(n_substreams=2, max_delay_samples=32, dither_seed=4)
        for p in range(2):
            eng.set_delay_model(p, models[p])
        eng.set_gains(gains)
        return eng

    one, blocks = make(), make()
    whole = one.process(x, 777, valid)
    cuts = sorted(rng.choice(np.arange(1, n), size=25, replace=False).tolist())
    parts = run_blocks(blocks, x, 777, sorted(set(cuts) | {1, 2, 3}), valid)
    assert len(whole) > 40
    same_heaps(whole, parts)
    assert one.counters.heaps_skipped > 0
    for name in ("spectra", "flagged_spectra", "heaps_made", "heaps_skipped"):
        assert getattr(one.counters, name) == getattr(blocks.counters, name)
    np.testing.assert_array_equal(one.counters.saturated, blocks.counters.saturated)
    # History is bounded: the block engine keeps no more than the PFB and delay need.
    assert blocks.retained_samples < 2 * 256 + 4 * 32 + 32 + max(np.diff([0, *sorted(cuts), n]))


def test_flagged_heaps_are_not_sent():
    taps, nspec = 4, 8
    step, length, heap_len = 32, 128, 256
    rng = np.random.default_rng(12)
    n = 4096
    x = noise(rng, n)
    bad = 1500
    valid = np.ones(n, dtype=bool)
    valid[bad] = False
    clean = engine().process(x, 0)
    eng = engine()
    heaps = eng.process(x, 0, valid)
    # Spectra at T = m * 32 read [T, T + 128): those with T <= 1500 < T + 128.
    hit = [m for m in range(n // step) if m * step <= bad < m * step + length]
    assert len(hit) == taps
    lost_slots = {m // nspec for m in hit}
    assert lost_slots == {5}
    sent = [h.timestamp // heap_len for h in heaps]
    assert sent == [h.timestamp // heap_len for h in clean if h.timestamp // heap_len != 5]
    same_heaps(heaps, [h for h in clean if h.timestamp // heap_len != 5])
    assert eng.counters.flagged_spectra == len(hit)
    assert eng.counters.heaps_skipped == 1
    assert eng.counters.heaps_made == len(clean) - 1


def test_gap_between_blocks_counts_as_missing():
    rng = np.random.default_rng(13)
    x = noise(rng, 3000)
    eng = engine()
    heaps = eng.process(x[:, :1000], 0) + eng.process(x[:, 1100:], 1100)
    clean = engine().process(x, 0)
    lost = {h.timestamp for h in clean} - {h.timestamp for h in heaps}
    # Samples 1000..1099 feed spectra 28..34, in slots 3 and 4.
    assert lost == {768, 1024}
    assert eng.counters.heaps_skipped == 2
    with pytest.raises(ConfigError, match="overlaps"):
        eng.process(x[:, :10], 2000)


def test_delay_shows_as_phase_slope_in_cross_product():
    nchan, tau_samples = 64, 3.4
    rng = np.random.default_rng(14)
    n = 20000
    common = rng.standard_normal(n) * 20.0
    x = np.stack([common, common])
    eng = engine(nchan=nchan, spectra_per_heap=16, max_delay_samples=8)
    eng.set_delay_model(0, DelayModel(delay_s=tau_samples / FS))
    heaps = eng.process(x, 0)
    assert len(heaps) >= 8
    z = np.concatenate([h.payload for h in heaps], axis=1).astype(float)  # (chan, spec, pol, 2)
    v = z[..., 0] + 1j * z[..., 1]
    cross = np.sum(v[:, :, 0] * np.conj(v[:, :, 1]), axis=1)
    f = np.arange(nchan) * FS / (2 * nchan)
    expected = -2 * np.pi * f * tau_samples / FS
    residual = np.angle(cross * np.exp(-1j * expected))
    np.testing.assert_array_less(np.abs(residual[1:]), 0.05)
    slope = np.polyfit(f[1:], np.unwrap(np.angle(cross[1:])), 1)[0]
    assert slope == pytest.approx(-2 * np.pi * tau_samples / FS, rel=0.01)


def test_four_bit_output_is_clipped_eight_bit_output():
    rng = np.random.default_rng(15)
    x = noise(rng, 3000, scale=4.0)
    kw = dict(n_substreams=2, dither_seed=1)
    eight = engine(**kw)
    four = engine(bits=4, **kw)
    for eng in (eight, four):
        eng.set_delay_model(1, DelayModel(delay_s=-1.3 / FS))
    h8, h4 = eight.process(x, 0), four.process(x, 0)
    assert len(h8) == len(h4) > 0
    for a, b in zip(h8, h4, strict=True):
        assert b.payload.dtype == np.uint8 and b.payload.shape == a.payload.shape[:-1]
        np.testing.assert_array_equal(unpack4(b.payload), np.clip(a.payload, -7, 7))
    p8 = np.concatenate([h.payload for h in h8])
    assert np.all(eight.counters.saturated == 0)
    clipped = np.any(np.abs(p8) > 7, axis=-1)  # (chan, spec, pol)
    np.testing.assert_array_equal(four.counters.saturated, clipped.sum(axis=(0, 1)))
    assert four.counters.saturated.sum() > 0


def test_configuration_errors():
    with pytest.raises(ConfigError, match="power of two"):
        engine(nchan=24)
    with pytest.raises(ConfigError, match="divisor"):
        engine(n_substreams=3)
    with pytest.raises(ConfigError, match="8 or 4"):
        engine(bits=16)
    with pytest.raises(ConfigError, match="max_delay_samples"):
        engine(max_delay_samples=-1)
    eng = engine()
    with pytest.raises(ConfigError, match="0 or 1"):
        eng.set_delay_model(2, DelayModel())
    with pytest.raises(ConfigError, match="channels"):
        eng.set_gains(np.ones(15))
    with pytest.raises(ConfigError, match="2 polarisations"):
        eng.process(np.zeros((3, 100)), 0)
    with pytest.raises(ConfigError, match="valid mask"):
        eng.process(np.zeros((2, 100)), 0, np.ones(99, dtype=bool))


def test_delay_beyond_maximum_flags_spectra():
    rng = np.random.default_rng(16)
    x = noise(rng, 3000)
    eng = engine(max_delay_samples=4)
    eng.set_delay_model(0, DelayModel(delay_s=6.0 / FS))
    assert eng.process(x, 0) == []
    assert eng.counters.heaps_made == 0
    assert eng.counters.flagged_spectra == eng.counters.spectra > 0


# Heaps and SPEAD packets


def random_heap(rng, layout, sub=1):
    payload = rng.integers(-127, 128, layout.payload_shape).astype(layout.payload_dtype)
    return OutputHeap(
        timestamp=int(rng.integers(0, 2**48 // layout.samples_per_heap)) * layout.samples_per_heap,
        frequency=layout.channel_offset(sub),
        feng_id=3,
        payload=payload,
        substream=sub,
    )


def test_layout_shapes():
    layout = HeapLayout(nchan=4096, spectra_per_heap=256, n_substreams=16)
    assert layout.channels_per_heap == 256
    assert layout.payload_shape == (256, 256, 2, 2)
    assert layout.payload_bytes == 256 * 256 * 4
    assert layout.samples_per_heap == 256 * 8192
    four = HeapLayout(nchan=4096, spectra_per_heap=256, n_substreams=16, bits=4)
    assert four.payload_shape == (256, 256, 2) and four.payload_dtype == np.uint8


def test_encode_packets_by_hand():
    rng = np.random.default_rng(20)
    layout = HeapLayout(nchan=64, spectra_per_heap=16, n_substreams=2)
    heap = random_heap(rng, layout)
    cnt = heap_counter(heap.timestamp, layout.samples_per_heap, feng_id=3, n_fengs=4)
    assert cnt == ((heap.timestamp // 2048) * 4 + 3) % 2**48
    packets = encode_heap(heap, cnt, packet_payload=512)
    assert packets.shape == (4, 8 + 64 + 512)
    first = packets[2].tobytes()
    assert first[:8] == bytes([0x53, 0x04, 0x02, 0x06, 0, 0, 0, 8])

    def item(i):
        return int.from_bytes(first[8 + 8 * i : 16 + 8 * i], "big")

    assert item(0) == (1 << 63) | (0x1 << 48) | cnt
    assert item(1) == (1 << 63) | (0x2 << 48) | 2048
    assert item(2) == (1 << 63) | (0x3 << 48) | 1024
    assert item(3) == (1 << 63) | (0x4 << 48) | 512
    assert item(4) == (1 << 63) | (0x1600 << 48) | heap.timestamp
    assert item(5) == (1 << 63) | (0x4101 << 48) | 3
    assert item(6) == (1 << 63) | (0x4103 << 48) | 32
    assert item(7) == 0x4300 << 48
    assert first[72:] == heap.payload.tobytes()[1024:1536]


@pytest.mark.parametrize("bits", [8, 4])
def test_encode_decode_round_trip(bits):
    rng = np.random.default_rng(21 + bits)
    layout = HeapLayout(nchan=128, spectra_per_heap=8, n_substreams=4, bits=bits)
    heaps = [random_heap(rng, layout, sub) for sub in range(4)]
    packets = [
        p
        for i, h in enumerate(heaps)
        for p in encode_heap(h, heap_counter(h.timestamp, layout.samples_per_heap) + i, 256)
    ]
    order = rng.permutation(len(packets))
    decoded = decode_packets([packets[i].tobytes() for i in order])
    assert len(decoded) == 4 and all(d.complete for d in decoded)
    by_freq = {d.immediates[0x4103]: decode_output_heap(d, layout) for d in decoded}
    for h in heaps:
        got = by_freq[h.frequency]
        assert (got.timestamp, got.feng_id, got.substream) == (h.timestamp, 3, h.substream)
        np.testing.assert_array_equal(got.payload, h.payload)


def test_engine_heaps_survive_spead():
    rng = np.random.default_rng(22)
    eng = engine(n_substreams=2, feng_id=1)
    heaps = eng.process(noise(rng, 2000), 0)
    assert len(heaps) == 14  # slots 0..6: the last window ends at 6 * 256 + 224 + 128
    # Each substream goes to its own destination; heap cnts are unique within one.
    for sub in range(2):
        mine = [h for h in heaps if h.substream == sub]
        packets = [
            p for h in mine for p in encode_heap(h, heap_counter(h.timestamp, 256, 1, 2), 64)
        ]
        decoded = [decode_output_heap(d, eng.layout) for d in decode_packets(packets)]
        same_heaps(mine, decoded)


def test_decoder_rejects_and_reports():
    rng = np.random.default_rng(23)
    layout = HeapLayout(nchan=32, spectra_per_heap=4)
    packets = encode_heap(random_heap(rng, layout, 0), 7, packet_payload=128)
    partial = decode_packets(packets[1:])
    assert len(partial) == 1 and not partial[0].complete
    with pytest.raises(FormatError, match="incomplete"):
        decode_output_heap(partial[0], layout)
    bad = packets[0].copy()
    bad[0] = 0x54
    with pytest.raises(FormatError, match="SPEAD-64-48"):
        decode_packets([bad])
    with pytest.raises(FormatError, match="payload"):
        decode_packets([packets[0][:-1]])
    wrong = HeapLayout(nchan=64, spectra_per_heap=4)
    with pytest.raises(FormatError, match="layout"):
        decode_output_heap(decode_packets(packets)[0], wrong)
    with pytest.raises(ConfigError, match="divisor"):
        encode_heap(random_heap(rng, layout, 0), 7, packet_payload=100)


def test_the_gpu_engine_shares_state_not_the_reference_engine():
    """The GPU engine and the reference share by class only their run-time state (FEngineState:
    gains, delays, counters); each runs its own heaps from the plan it is given
    (tests/test_fengine_plan.py), so the GPU tests that compare the two catch a bug in
    either instead of inheriting it."""
    from voltstream.fengine.gpu import GpuFEngine  # imports without a GPU
    from voltstream.fengine.reference import FEngineReference, FEngineState

    assert issubclass(GpuFEngine, FEngineState) and issubclass(FEngineReference, FEngineState)
    assert not issubclass(GpuFEngine, FEngineReference)
    running = {"process", "_heap", "_channelize", "retained_samples"}
    assert running <= set(vars(FEngineReference)) and not running & set(vars(FEngineState))
