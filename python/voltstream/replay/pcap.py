"""Classic pcap files: the UDP payloads a capture (tcpdump, Wireshark) holds, with
their time stamps, for ``voltstream replay``.

The file format is the libpcap savefile (draft-ietf-opsawg-pcap): a 24-byte file
header whose magic number gives the byte order and the time-stamp unit
(0xa1b2c3d4: microseconds, 0xa1b23c4d: nanoseconds; read byte-swapped when the
writer's byte order was the other one), then records of a 16-byte header (seconds,
fraction, captured length, original length) and the captured bytes. The link type
is the low 16 bits of the header's last field (the upper bits carry FCS
information, ignored here). Link types read (tcpdump.org/linktypes.html): Ethernet
(1, with 802.1Q/802.1ad VLAN tags), raw IP (101; 228 IPv4; 229 IPv6), Linux
cooked capture v1 (113) and v2 (276). pcapng files are refused with a sentence
saying so.

Every record is accounted for in :attr:`PcapReader.counts`: ``udp`` (payload
taken), ``not_udp`` (not IP, or IP but not UDP), ``other_port`` (UDP, but not the
``port``/``source_port`` asked for), ``fragments`` (IPv4 or IPv6 fragments: the
datagram is not whole in one record), ``snapped`` (the capture kept fewer bytes
than the datagram had), ``truncated`` (the file ends inside a record: a capture
killed mid-write). Nothing here raises on a bad record; only an unreadable file
header is a :class:`~voltstream.errors.FormatError`.
"""

from __future__ import annotations

import mmap
import os
import struct
from collections.abc import Iterator
from pathlib import Path

from voltstream.errors import FormatError

#: Magic numbers as read little-endian: (byte order, seconds per fraction unit).
_MAGICS = {
    0xA1B2C3D4: ("<", 1e-6),
    0xA1B23C4D: ("<", 1e-9),
    0xD4C3B2A1: (">", 1e-6),
    0x4D3CB2A1: (">", 1e-9),
}
#: A pcapng file starts with a Section Header Block, block type 0x0A0D0D0A.
_PCAPNG = 0x0A0D0D0A
FILE_HEADER_LEN = 24
RECORD_HEADER_LEN = 16

ETHERNET, RAW, LINUX_SLL, IPV4, IPV6, LINUX_SLL2 = 1, 101, 113, 228, 229, 276
LINK_TYPES = {
    ETHERNET: "Ethernet",
    RAW: "raw IP",
    LINUX_SLL: "Linux cooked v1",
    IPV4: "raw IPv4",
    IPV6: "raw IPv6",
    LINUX_SLL2: "Linux cooked v2",
}
_ETH_IPV4, _ETH_IPV6 = 0x0800, 0x86DD
_VLAN_TAGS = (0x8100, 0x88A8, 0x9100)  # 802.1Q, 802.1ad, the older QinQ tag
_UDP = 17
# IPv6 extension headers walked to reach UDP: hop-by-hop, routing, destination options.
_IPV6_EXTENSIONS = (0, 43, 60)
_IPV6_FRAGMENT = 44
_MAX_EXTENSIONS = 8

COUNTERS = ("records", "udp", "not_udp", "other_port", "fragments", "snapped", "truncated")


def is_pcap(path: Path) -> bool:
    """Whether ``path`` starts with a classic pcap (or pcapng) magic number."""
    try:
        with open(path, "rb") as f:
            head = f.read(4)
    except OSError:
        return False
    if len(head) < 4:
        return False
    magic = struct.unpack("<I", head)[0]
    return magic in _MAGICS or magic == _PCAPNG


class PcapReader:
    """The UDP payloads of one pcap file, in file order; see the module doc.

    ``port``: keep only datagrams to this destination port; ``source_port``: only
    those from this source port (both optional).
    """

    def __init__(
        self, path: str | os.PathLike, port: int | None = None, source_port: int | None = None
    ) -> None:
        self.path = Path(path)
        self.port, self.source_port = port, source_port
        self.counts = dict.fromkeys(COUNTERS, 0)
        try:
            with open(self.path, "rb") as f:
                head = f.read(FILE_HEADER_LEN)
        except OSError as exc:
            raise FormatError(f"cannot read {self.path}: {exc.strerror}") from exc
        if len(head) < FILE_HEADER_LEN:
            raise FormatError(
                f"{self.path} is {len(head)} bytes, shorter than a pcap file header (24)"
            )
        magic = struct.unpack("<I", head[:4])[0]
        if magic == _PCAPNG:
            raise FormatError(
                f"{self.path} is a pcapng file; replay reads classic pcap only: convert it "
                "with `editcap -F pcap IN.pcapng OUT.pcap` (Wireshark) first"
            )
        if magic not in _MAGICS:
            raise FormatError(
                f"{self.path} is not a pcap file (magic number 0x{magic:08x}; expected "
                "0xa1b2c3d4 or 0xa1b23c4d in either byte order)"
            )
        self._order, self._unit = _MAGICS[magic]
        major, _minor, _zone, _sigfigs, self.snaplen, link = struct.unpack(
            self._order + "HHiIII", head[4:]
        )
        self.link_type = link & 0xFFFF
        if major != 2:
            raise FormatError(f"{self.path}: pcap version {major} is not 2; cannot read it")
        if self.link_type not in LINK_TYPES:
            raise FormatError(
                f"{self.path}: link type {self.link_type} is not one replay reads ("
                + ", ".join(f"{k} {v}" for k, v in LINK_TYPES.items())
                + ")"
            )

    def packets(self) -> Iterator[tuple[float, bytes]]:
        """(time stamp in seconds, UDP payload) of each datagram kept, in file order."""
        with open(self.path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            if size <= FILE_HEADER_LEN:
                return
            # Mapped, not read: a capture of any size costs only the pages in use. The
            # mapping closes when the last view of it goes (views cannot outlive it).
            mapped = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        yield from self._walk(memoryview(mapped), size)

    def _walk(self, data: memoryview, size: int) -> Iterator[tuple[float, bytes]]:
        record = struct.Struct(self._order + "IIII")
        pos = FILE_HEADER_LEN
        while pos < size:
            if pos + RECORD_HEADER_LEN > size:
                self.counts["truncated"] += 1
                return
            sec, frac, caplen, origlen = record.unpack_from(data, pos)
            pos += RECORD_HEADER_LEN
            if pos + caplen > size:
                self.counts["truncated"] += 1
                return
            self.counts["records"] += 1
            payload = self._udp_payload(data[pos : pos + caplen], snapped=caplen < origlen)
            pos += caplen
            if payload is not None:
                self.counts["udp"] += 1
                yield sec + frac * self._unit, bytes(payload)

    def _udp_payload(self, frame: memoryview, snapped: bool) -> memoryview | None:
        """The UDP payload of one record, or None (counted) when there is none to send."""
        ip = _ip_packet(frame, self.link_type)
        if ip is None:
            self.counts["not_udp"] += 1
            return None
        udp = _udp_datagram(ip)
        if isinstance(udp, str):
            self.counts[udp] += 1
            return None
        if len(udp) < 8:
            self.counts["snapped" if snapped else "not_udp"] += 1
            return None
        sport, dport, length = struct.unpack_from(">HHH", udp)
        if length < 8:
            self.counts["not_udp"] += 1
            return None
        if length > len(udp):  # the capture kept less than the datagram
            self.counts["snapped"] += 1
            return None
        if (self.port is not None and dport != self.port) or (
            self.source_port is not None and sport != self.source_port
        ):
            self.counts["other_port"] += 1
            return None
        return udp[8:length]


def _ip_packet(frame: memoryview, link_type: int) -> memoryview | None:
    """The IPv4/IPv6 packet a link-layer frame carries, or None."""
    if link_type in (RAW, IPV4, IPV6):
        return frame
    if link_type == LINUX_SLL:
        proto_at, start = 14, 16
    elif link_type == LINUX_SLL2:
        proto_at, start = 0, 20
    else:  # Ethernet: destination, source, then the EtherType after any VLAN tags
        proto_at, start = 12, 14
        while len(frame) >= start and _be16(frame, proto_at) in _VLAN_TAGS:
            proto_at, start = proto_at + 4, start + 4
    if len(frame) < start or _be16(frame, proto_at) not in (_ETH_IPV4, _ETH_IPV6):
        return None
    return frame[start:]


def _udp_datagram(ip: memoryview) -> memoryview | str:
    """The UDP header and payload inside an IP packet, or the counter that says why not."""
    if len(ip) < 1:
        return "not_udp"
    version = ip[0] >> 4
    if version == 4:
        ihl = (ip[0] & 0x0F) * 4
        if len(ip) < 20 or ihl < 20 or len(ip) < ihl:
            return "not_udp"
        if ip[9] != _UDP:
            return "not_udp"
        if _be16(ip, 6) & 0x3FFF:  # more-fragments flag or a fragment offset
            return "fragments"
        total = _be16(ip, 2)
        return ip[ihl : max(ihl, min(total, len(ip)))]
    if version == 6:
        if len(ip) < 40:
            return "not_udp"
        nxt, pos = ip[6], 40
        end = min(len(ip), 40 + _be16(ip, 4))
        for _ in range(_MAX_EXTENSIONS):
            if nxt not in _IPV6_EXTENSIONS or pos + 2 > end:
                break
            nxt, pos = ip[pos], pos + (ip[pos + 1] + 1) * 8
        if nxt == _IPV6_FRAGMENT:
            return "fragments"
        if nxt != _UDP or pos > end:
            return "not_udp"
        return ip[pos:end]
    return "not_udp"


def _be16(buf: memoryview, at: int) -> int:
    return (buf[at] << 8) | buf[at + 1]
