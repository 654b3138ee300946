"""SPEAD digitiser heaps: NumPy packetizer, bit packing and decoder."""

import numpy as np
import pytest

from voltstream.digitiser import SAMPLE_BITS
from voltstream.errors import ConfigError, FormatError
from voltstream.sim.spead import (
    DIG_ID,
    DIG_RAW_DATA,
    DIG_STATUS,
    DIG_TIMESTAMP,
    depacketize_spead_dig,
    pack_samples,
    packetize_spead_dig,
    spead_dig_packet_len,
    unpack_samples,
)
from voltstream.spead_items import parse_packet


def _reference_pack(samples, bits):
    """Bit-string packing, independent of the NumPy implementation."""
    text = "".join(format(int(s) & ((1 << bits) - 1), f"0{bits}b") for s in samples)
    return bytes(int(text[i : i + 8], 2) for i in range(0, len(text), 8))


def _random_samples(rng, bits, n):
    return rng.integers(-(1 << (bits - 1)), 1 << (bits - 1), n)


@pytest.mark.parametrize("bits", SAMPLE_BITS)
def test_pack_matches_reference_and_round_trips(bits):
    rng = np.random.default_rng(bits)
    s = _random_samples(rng, bits, 64 * 8)
    s[:2] = [-(1 << (bits - 1)), (1 << (bits - 1)) - 1]  # both extremes
    packed = pack_samples(s, bits)
    assert packed.tobytes() == _reference_pack(s, bits)
    assert packed.size == s.size * bits // 8
    back = unpack_samples(packed, bits)
    assert back.dtype == np.int16
    np.testing.assert_array_equal(back, s)
    np.testing.assert_array_equal(unpack_samples(packed, bits, 5), s[:5])


def test_ten_bit_known_bytes():
    # -1, 0, 511, -512 -> 1111111111 0000000000 0111111111 1000000000
    assert pack_samples([-1, 0, 511, -512], 10).tobytes() == bytes([0xFF, 0xC0, 0x07, 0xFE, 0x00])
    np.testing.assert_array_equal(
        unpack_samples(np.array([0xFF, 0xC0, 0x07, 0xFE, 0x00], np.uint8), 10), [-1, 0, 511, -512]
    )


def test_packetize_layout_and_round_trip():
    rng = np.random.default_rng(3)
    spp, bits, nheap = 256, 10, 5
    s = _random_samples(rng, bits, spp * nheap)
    t0 = spp * 1_000_003
    status = rng.integers(0, 1 << 16, nheap)
    pk = packetize_spead_dig(
        s, bits=bits, samples_per_heap=spp, timestamp=t0, digitiser_id=0x42, status=status
    )
    assert pk.shape == (nheap, spead_dig_packet_len(spp, bits)) and pk.flags.c_contiguous
    assert pk.shape[1] == 72 + spp * bits // 8
    # Independent expectation: the header and pointers spelled out.
    assert bytes(pk[0, :8]) == bytes([0x53, 4, 2, 6, 0, 0, 0, 8])
    for k in range(nheap):
        words = [int.from_bytes(bytes(pk[k, 8 + 8 * i : 16 + 8 * i]), "big") for i in range(8)]
        imm = 1 << 63
        ts = t0 + k * spp
        assert words == [
            imm | (0x1 << 48) | ts // spp,
            imm | (0x2 << 48) | spp * bits // 8,
            imm | (0x3 << 48),
            imm | (0x4 << 48) | spp * bits // 8,
            imm | (DIG_TIMESTAMP << 48) | ts,
            imm | (DIG_ID << 48) | 0x42,
            imm | (DIG_STATUS << 48) | int(status[k]),
            DIG_RAW_DATA << 48,
        ]
        assert bytes(pk[k, 72:]) == _reference_pack(s[k * spp : (k + 1) * spp], bits)
    d = depacketize_spead_dig(pk, bits=bits)
    np.testing.assert_array_equal(d["samples"], s)
    np.testing.assert_array_equal(d["timestamp"], t0 + spp * np.arange(nheap))
    np.testing.assert_array_equal(d["digitiser_id"], [0x42] * nheap)
    np.testing.assert_array_equal(d["status"], status)


@pytest.mark.parametrize("bits", SAMPLE_BITS)
def test_default_heaps_every_width(bits):
    rng = np.random.default_rng(100 + bits)
    s = _random_samples(rng, bits, 4096 * 2)
    pk = packetize_spead_dig(s, bits=bits, timestamp=4096 * 7, digitiser_id=1)
    assert pk.shape == (2, 72 + 4096 * bits // 8)
    h = parse_packet(pk[1])
    assert h.addr_bits == 48 and len(h.payload) == 4096 * bits // 8
    np.testing.assert_array_equal(depacketize_spead_dig(pk, bits=bits)["samples"], s)


def test_other_flavour():
    s = np.arange(-32, 32)
    pk = packetize_spead_dig(s, bits=8, samples_per_heap=64, heap_address_bits=40)
    assert list(pk[0, :4]) == [0x53, 4, 3, 5]
    h = parse_packet(pk[0])
    assert h.addr_bits == 40
    assert (True, DIG_TIMESTAMP, 0) in h.items
    np.testing.assert_array_equal(depacketize_spead_dig(pk, bits=8)["samples"], s)


def test_config_errors():
    ok = np.zeros(4096, np.int64)
    with pytest.raises(ConfigError):
        packetize_spead_dig(ok, bits=11)
    with pytest.raises(ConfigError):
        packetize_spead_dig(ok + 512, bits=10)  # beyond 10-bit range
    with pytest.raises(ConfigError):
        packetize_spead_dig(ok - 513, bits=10)
    with pytest.raises(ConfigError):
        packetize_spead_dig(ok[:-1], bits=10)  # not whole heaps
    with pytest.raises(ConfigError):
        packetize_spead_dig(ok, timestamp=100)
    with pytest.raises(ConfigError):
        packetize_spead_dig(ok, heap_address_bits=56)
    with pytest.raises(ConfigError):
        packetize_spead_dig(ok, samples_per_heap=3)
    with pytest.raises(ConfigError):
        pack_samples(np.zeros(4) + 0.5, 10)
    with pytest.raises(FormatError):
        unpack_samples(np.zeros(5, np.uint8), 10, 5)


def test_decoder_refuses_bad_packets():
    pk = packetize_spead_dig(np.arange(64) - 32, bits=8, samples_per_heap=64)[0]

    def bad(mutate):
        b = pk.copy()
        mutate(b)
        with pytest.raises(FormatError):
            depacketize_spead_dig(b, bits=8)

    bad(lambda b: b.__setitem__(0, 0x54))  # magic
    bad(lambda b: b.__setitem__(1, 3))  # version
    bad(lambda b: b.__setitem__(2, 3))  # 72-bit pointers
    bad(lambda b: b.__setitem__(7, 200))  # more pointers than bytes
    bad(lambda b: b.__setitem__(8, 0x00))  # heap counter not immediate
    bad(lambda b: b.__setitem__(23, 1))  # heap size 1, not the payload length
    bad(lambda b: b.__setitem__(31, 1))  # heap offset 1
    bad(lambda b: b.__setitem__(40, 0x00))  # time stamp not immediate
    with pytest.raises(FormatError):
        depacketize_spead_dig(pk[:-1], bits=8)  # payload cut short
    with pytest.raises(FormatError):
        parse_packet(pk[:7])


def test_decoder_random_bytes_raise_only_format_errors():
    rng = np.random.default_rng(11)
    valid = packetize_spead_dig(np.arange(64) - 32, bits=8, samples_per_heap=64)[0]
    ok = 0
    for i in range(3000):
        if i % 3 == 0:
            b = rng.integers(0, 256, rng.integers(0, 150), dtype=np.uint8)
        else:
            b = valid.copy()
            for _ in range(rng.integers(1, 4)):
                b[rng.integers(0, 72 if i % 2 else b.size)] ^= np.uint8(1 << rng.integers(0, 8))
            b = b[: rng.integers(0, b.size + 1)] if i % 7 == 0 else b
        try:
            d = depacketize_spead_dig(b, bits=8)
        except FormatError:
            continue
        ok += 1
        assert d["samples"].size == len(parse_packet(b.tobytes()).payload)
    assert ok > 100
