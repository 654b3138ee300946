"""SPEAD-64-XX item pointers and packet headers: the encoder and the one Python parser."""

import numpy as np
import pytest

import voltstream.spead_items as spead
from voltstream.errors import FormatError


def packet(payload: bytes, addr_bits: int = 48, extra: int = 0x1600) -> bytes:
    columns = [
        spead.pointers(spead.HEAP_CNT, 7, addr_bits=addr_bits),
        spead.pointers(spead.HEAP_SIZE, len(payload), addr_bits=addr_bits),
        spead.pointers(spead.HEAP_OFFSET, 0, addr_bits=addr_bits),
        spead.pointers(spead.PAYLOAD_LENGTH, len(payload), addr_bits=addr_bits),
        spead.pointers(extra, 12345, addr_bits=addr_bits),
        spead.pointers(0x4300, 0, immediate=False, addr_bits=addr_bits),
    ]
    return spead.headers(columns, addr_bits).tobytes() + payload


@pytest.mark.parametrize("addr_bits", [40, 48])
def test_parse_reads_what_the_encoder_wrote(addr_bits):
    p = spead.parse_packet(packet(b"abcdef", addr_bits))
    assert p.addr_bits == addr_bits and p.payload == b"abcdef" and p.size == 8 + 6 * 8 + 6
    assert p.items[4] == (True, 0x1600, 12345) and p.items[5] == (False, 0x4300, 0)
    assert p.require(spead.HEAP_CNT, spead.HEAP_SIZE)[spead.HEAP_CNT] == 7
    assert p.addresses() == {0x4300: 0}


def test_packets_back_to_back_are_read_one_at_a_time():
    blob = packet(b"xy") + packet(b"") + packet(b"1234", 40)
    sizes, pos = [], 0
    while pos < len(blob):
        sizes.append(spead.parse_packet(blob[pos:]).size)
        pos += sizes[-1]
    assert sizes == [58, 56, 60]


def test_parse_refuses_bad_packets():
    good = packet(b"abcd")
    with pytest.raises(FormatError, match="8-byte header"):
        spead.parse_packet(good[:5])
    with pytest.raises(FormatError, match="SPEAD-64-48 packet"):
        spead.parse_packet(packet(b"abcd", 40), 48)  # the flavour pinned
    with pytest.raises(FormatError, match="no SPEAD packet header"):
        spead.parse_packet(b"\0" * 16)
    with pytest.raises(FormatError, match="too short for its 6 items"):
        spead.parse_packet(good[:40])
    with pytest.raises(FormatError, match="payload bytes"):
        spead.parse_packet(good[:-1])
    with pytest.raises(FormatError, match="0x1601"):
        spead.parse_packet(good).require(0x1601)
    no_length = bytearray(good)
    no_length[32] = 0  # the payload length pointer becomes addressed
    with pytest.raises(FormatError, match="0x4"):
        spead.parse_packet(np.frombuffer(bytes(no_length), np.uint8))
