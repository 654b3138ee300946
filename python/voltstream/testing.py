"""Fault injection for tests: one seeded plan that drops, duplicates, reorders,
truncates, garbles or adds foreign packets to a list of packets before a test sends
them (over loopback UDP, a veth pair, a packet ring), and says exactly what it did,
so the test asserts the capture's counters against it instead of writing its own
faults.

The vocabulary is the Rust core's (``voltstream_core::capture::FaultPlan``): each
input packet gets at most one fault; delays count input packets. What each fault does
to a capture's counters, when the first and last packets are spared (``between``) and
delays stay inside the reorder window:

- ``Drop()``: nothing arrives; ``missing``.
- ``Duplicate(delay)``: the packet, and a copy after the next ``delay`` packets;
  ``duplicate`` (``late`` if the copy comes after its chunk left the window).
- ``Delay(n)``: the packet after the next ``n`` packets; nothing (``late`` beyond the
  window).
- ``Truncate(keep)``: the packet cut to ``keep`` bytes instead; ``malformed``, and
  ``missing``.
- ``Garbage(make)``: other bytes instead of the packet (random bytes one longer by
  default: malformed for fixed-length formats); ``malformed`` (or what ``make`` makes),
  and ``missing``.
- ``Foreign(make)``: the packet, then ``make(packet)`` (another station, stream or
  port: the plan cannot know what is foreign to the capture); ``foreign``.

A plan: ``FaultPlan(seed, rates={Drop(): 0.02, Delay(8): 0.05}, at={0: Duplicate()})``.
Random faults are drawn per packet from ``rates``, each fault standing for its kind
(``Delay(8)``: delays of 1 to 8 packets; ``Duplicate(8)``: copies 0 to 8 packets on);
``at`` places faults at input positions.

``free_ports(n)``: n consecutive free UDP ports on loopback, for the tests and the
benches alike.
"""

from __future__ import annotations

import random
import socket
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

import numpy as np

from voltstream.errors import ConfigError

__all__ = [
    "Delay",
    "Drop",
    "Duplicate",
    "Fault",
    "FaultPlan",
    "Faulted",
    "Foreign",
    "Garbage",
    "Truncate",
    "free_ports",
]

Maker = Callable[[bytes], bytes]


@dataclass(frozen=True)
class Drop:
    """Never delivered."""


@dataclass(frozen=True)
class Duplicate:
    """Delivered, and a copy after the next ``delay`` input packets (0: right after)."""

    delay: int = 0


@dataclass(frozen=True)
class Delay:
    """Delivered after the next ``n`` input packets: at most ``n`` packets sent after
    it arrive before it."""

    n: int


@dataclass(frozen=True)
class Truncate:
    """Replaced by its first ``keep`` bytes (negative: all but the last ``-keep``);
    ``None``: half the packet."""

    keep: int | None = None


@dataclass(frozen=True)
class Garbage:
    """Replaced by ``make(packet)``; ``None``: random bytes one longer than the packet
    (malformed for formats with a fixed packet length; formats that check a magic number
    may count random bytes foreign instead)."""

    make: Maker | None = None


@dataclass(frozen=True)
class Foreign:
    """Delivered, then ``make(packet)``: a packet of another station, stream or port
    (the plan cannot know what is foreign to the capture under test)."""

    make: Maker | None = None


Fault = Drop | Duplicate | Delay | Truncate | Garbage | Foreign


@dataclass
class Faulted:
    """What a plan made of a list of packets: the packets to send, in order, and every
    fault applied, as (input position, fault), ascending."""

    packets: list[bytes]
    log: list[tuple[int, Fault]]
    seen: int  # input packets

    def positions(self, *kinds: type) -> list[int]:
        """Input positions of the faults of these kinds."""
        return [at for at, f in self.log if isinstance(f, kinds)]

    def count(self, *kinds: type) -> int:
        """How many faults of these kinds were applied."""
        return len(self.positions(*kinds))

    def rows(self) -> np.ndarray:
        """The packets as the rows of one uint8 array, for the paced sender
        (``_core.Sender``: sendmmsg with GSO), which sends packets of one length."""
        lengths = sorted({len(p) for p in self.packets})
        if len(lengths) > 1:
            raise ConfigError(
                f"packets of {lengths} bytes cannot be rows of one array: send them one by one"
            )
        return np.frombuffer(b"".join(self.packets), np.uint8).reshape(len(self.packets), -1)

    @property
    def lost(self) -> list[int]:
        """Input positions of packets that never arrive as themselves (dropped,
        truncated, replaced by garbage): a capture counts them missing."""
        return self.positions(Drop, Truncate, Garbage)

    @property
    def intact(self) -> int:
        """Input packets that arrive as themselves: what a capture counts ``received``
        when nothing is late."""
        return self.seen - len(self.lost)


class FaultPlan:
    """Which faults, how often, where: per-packet ``rates`` of faults (each standing for
    its kind) and faults placed at input positions (``at``, which win over the rates),
    random ones only ``between`` those positions, all drawn from ``seed``."""

    def __init__(self, seed: int = 0, *, rates: Mapping[Fault, float] | None = None,
                 at: Mapping[int, Fault] | None = None, between: range | None = None):  # fmt: skip
        self.seed = seed
        self.rates = dict(rates or {})
        self.at = dict(at or {})
        self.between = between
        self._validate()

    def _validate(self) -> None:
        def bad(why: str) -> ConfigError:
            return ConfigError(f"fault plan: {why}")

        for p in self.rates.values():
            if not 0.0 <= p <= 1.0:
                raise bad(f"a rate of {p} is not a probability (0 to 1)")
        if sum(self.rates.values()) > 1.0 + 1e-9:
            raise bad(
                f"the rates add up to {sum(self.rates.values())}: each packet gets at most "
                "one fault, lower them"
            )
        if Delay(0) in self.rates:
            raise bad("reordering needs a delay of at least 1 packet: Delay(n), n >= 1")
        faults = [*self.rates, *self.at.values()]
        if any(isinstance(f, Foreign) and f.make is None for f in faults):
            raise bad("foreign packets need a maker: Foreign.make, e.g. Foreign(lambda p: ...)")

    def _draw(self, rng: random.Random) -> Fault | None:
        r, edge = rng.random(), 0.0
        for fault, p in self.rates.items():
            edge += p
            if r < edge:
                match fault:
                    case Duplicate(delay):
                        return Duplicate(rng.randrange(delay + 1))
                    case Delay(n):
                        return Delay(1 + rng.randrange(n))
                return fault
        return None

    def apply(self, packets: Iterable[bytes | bytearray | memoryview]) -> Faulted:
        """The plan applied to ``packets`` (in sending order); packets still delayed at
        the end come last."""
        rng = random.Random(self.seed)
        out: list[bytes] = []
        log: list[tuple[int, Fault]] = []
        held: list[tuple[int, int, bytes]] = []  # (due, order delayed, packet)
        seen = 0  # input packets so far: the clock delays count on

        def later(delay: int, p: bytes) -> None:
            if delay == 0:
                out.append(p)
            else:
                held.append((seen + delay, len(log), p))
                held.sort(key=lambda h: (h[0], h[1]))

        for position, packet in enumerate(packets):
            p = bytes(packet)
            seen = position + 1
            fault = self.at.get(position)
            if fault is None and (self.between is None or position in self.between):
                fault = self._draw(rng)
            if fault is None:
                out.append(p)
            else:
                log.append((position, fault))
                self._inject(fault, p, rng, out, later)
            # Delays count input packets, so a delayed packet's displacement is bounded
            # whatever else the plan delays or drops.
            while held and held[0][0] <= seen:
                out.append(held.pop(0)[2])
        out += [p for _, _, p in held]
        return Faulted(out, log, seen)

    @staticmethod
    def _inject(fault: Fault, p: bytes, rng: random.Random, out: list[bytes],
                later: Callable[[int, bytes], None]) -> None:  # fmt: skip
        match fault:
            case Drop():
                pass
            case Duplicate(delay):
                out.append(p)
                later(delay, p)
            case Delay(n):
                later(n, p)
            case Truncate(keep):
                cut = p[: len(p) // 2 if keep is None else keep]
                # A truncation that keeps the whole packet would be no fault at all.
                out.append(cut if len(cut) < len(p) else p[:-1])
            case Garbage(make):
                out.append(make(p) if make else rng.randbytes(len(p) + 1))
            case Foreign(make):
                assert make is not None  # _validate checked it
                out += [p, make(p)]


def free_ports(n: int) -> list[int]:
    """n consecutive UDP ports on 127.0.0.1 no socket holds now (for --listen
    HOST:PORT+N): the tests' and the benches'."""
    for _ in range(50):
        held: list[socket.socket] = []
        try:
            first = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            held.append(first)
            first.bind(("127.0.0.1", 0))
            base = first.getsockname()[1]
            for k in range(1, n):
                s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
                held.append(s)
                s.bind(("127.0.0.1", base + k))
            return [base + k for k in range(n)]
        except OSError:
            continue
        finally:
            for s in held:
                s.close()
    raise RuntimeError(f"no {n} consecutive free UDP ports")
