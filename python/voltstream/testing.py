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
- ``Truncate(keep)``: the packet cut short instead; ``malformed``, and ``missing``.
- ``Garbage(make)``: other bytes instead of the packet (random bytes one longer by
  default: malformed for fixed-length formats); ``malformed`` (or what ``make`` makes),
  and ``missing``.
- ``Foreign(make)``: the packet, then ``make(packet)`` (another station, stream or
  port: the plan cannot know what is foreign to the capture); ``foreign``.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

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
    "Injected",
    "Truncate",
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
    ``None``: the plan's ``cut_to``, else half the packet."""

    keep: int | None = None


@dataclass(frozen=True)
class Garbage:
    """Replaced by ``make(packet)``; ``None``: the plan's ``make_garbage``, else random
    bytes one longer than the packet."""

    make: Maker | None = None


@dataclass(frozen=True)
class Foreign:
    """Delivered, then ``make(packet)``; ``None``: the plan's ``make_foreign``."""

    make: Maker | None = None


Fault = Drop | Duplicate | Delay | Truncate | Garbage | Foreign


@dataclass
class Injected:
    """What a plan did, counted once per fault."""

    packets: int = 0  # input packets seen
    delivered: int = 0  # packets passed on (with copies and foreign ones)
    dropped: int = 0
    duplicated: int = 0
    delayed: int = 0
    truncated: int = 0
    garbage: int = 0
    foreign: int = 0

    @property
    def intact(self) -> int:
        """Input packets that arrive as themselves: what a capture counts ``received``
        when nothing is late."""
        return self.packets - self.dropped - self.truncated - self.garbage


@dataclass
class Faulted:
    """The packets to send, what was injected, and where (input position, fault)."""

    packets: list[bytes]
    injected: Injected
    log: list[tuple[int, Fault]] = field(default_factory=list)

    def positions(self, *kinds: type) -> list[int]:
        """Input positions of the faults of these kinds, ascending."""
        return [at for at, f in self.log if isinstance(f, kinds)]

    @property
    def lost(self) -> list[int]:
        """Input positions of packets that never arrive as themselves (dropped,
        truncated, replaced by garbage): a capture counts them missing."""
        return self.positions(Drop, Truncate, Garbage)


class FaultPlan:
    """Which faults, how often, where: per-packet rates plus faults placed at input
    positions (``at``, which win over the rates), all drawn from ``seed``."""

    def __init__(
        self,
        seed: int = 0,
        *,
        drop: float = 0.0,
        duplicate: float = 0.0,
        reorder: float = 0.0,
        window: int = 0,
        truncate: float = 0.0,
        garbage: float = 0.0,
        foreign: float = 0.0,
        make_foreign: Maker | None = None,
        make_garbage: Maker | None = None,
        cut_to: int | None = None,
        between: range | None = None,
        at: dict[int, Fault] | None = None,
    ):
        self.seed = seed
        # Order fixes how one uniform draw picks a fault: keep it the Rust plan's.
        self.rates = (drop, duplicate, reorder, truncate, garbage, foreign)
        self.window = window
        self.make_foreign = make_foreign
        self.make_garbage = make_garbage
        self.cut_to = cut_to
        self.between = between
        self.at = dict(at or {})
        self._validate()

    def _validate(self) -> None:
        def bad(why: str) -> ConfigError:
            return ConfigError(f"fault plan: {why}")

        for p in self.rates:
            if not 0.0 <= p <= 1.0:
                raise bad(f"a rate of {p} is not a probability (0 to 1)")
        if sum(self.rates) > 1.0 + 1e-9:
            raise bad(
                f"the rates add up to {sum(self.rates)}: each packet gets at most one "
                "fault, lower them"
            )
        if self.rates[2] > 0 and self.window < 1:
            raise bad("reordering needs a window of at least 1 packet")
        foreign_unmade = [f for f in self.at.values() if isinstance(f, Foreign) and not f.make]
        if (self.rates[5] > 0 or foreign_unmade) and self.make_foreign is None:
            raise bad("foreign packets need a maker: pass make_foreign")

    def _draw(self, rng: random.Random) -> Fault | None:
        r, edge, kind = rng.random(), 0.0, None
        for k, p in enumerate(self.rates):
            edge += p
            if r < edge:
                kind = k
                break
        if kind is None:
            return None
        if kind == 0:
            return Drop()
        if kind == 1:
            return Duplicate(rng.randrange(self.window + 1))
        if kind == 2:
            return Delay(1 + rng.randrange(self.window))
        if kind == 3:
            return Truncate()
        if kind == 4:
            return Garbage()
        return Foreign()

    def apply(self, packets: Iterable[bytes | bytearray | memoryview]) -> Faulted:
        """The plan applied to ``packets`` (in sending order); packets still delayed at
        the end come last."""
        rng = random.Random(self.seed)
        n = Injected()
        out: list[bytes] = []
        log: list[tuple[int, Fault]] = []
        held: list[tuple[int, int, bytes]] = []  # (due, order delayed, packet)

        def emit(p: bytes) -> None:
            out.append(p)
            n.delivered += 1

        seen = 0  # input packets so far: the clock delays count on

        def later(delay: int, p: bytes) -> None:
            if delay == 0:
                emit(p)
            else:
                held.append((seen + delay, len(log), p))
                held.sort(key=lambda h: (h[0], h[1]))

        for position, packet in enumerate(packets):
            p = bytes(packet)
            seen = position + 1
            n.packets += 1
            fault = self.at.get(position)
            if fault is None and (self.between is None or position in self.between):
                fault = self._draw(rng)
            if fault is None:
                emit(p)
            else:
                log.append((position, fault))
                self._inject(fault, p, rng, n, emit, later)
            # Delays count input packets, so a delayed packet's displacement is bounded
            # whatever else the plan delays or drops.
            while held and held[0][0] <= seen:
                emit(held.pop(0)[2])
        for _, _, p in held:
            emit(p)
        return Faulted(out, n, log)

    def _inject(
        self,
        fault: Fault,
        p: bytes,
        rng: random.Random,
        n: Injected,
        emit: Callable[[bytes], None],
        later: Callable[[int, bytes], None],
    ) -> None:
        match fault:
            case Drop():
                n.dropped += 1
            case Duplicate(delay):
                n.duplicated += 1
                emit(p)
                later(delay, p)
            case Delay(d):
                n.delayed += 1
                later(d, p)
            case Truncate(keep):
                n.truncated += 1
                keep = self.cut_to if keep is None else keep
                keep = len(p) // 2 if keep is None else keep
                cut = p[:keep]
                # A truncation that keeps the whole packet would be no fault at all.
                emit(cut if len(cut) < len(p) else p[:-1])
            case Garbage(make):
                n.garbage += 1
                make = make or self.make_garbage
                emit(make(p) if make else rng.randbytes(len(p) + 1))
            case Foreign(make):
                n.foreign += 1
                emit(p)
                make = make or self.make_foreign
                assert make is not None  # _validate checked it
                emit(make(p))
