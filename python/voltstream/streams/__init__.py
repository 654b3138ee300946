"""Stream descriptions: every capture format the Rust core parses, described in a file.

A new FPGA design, a CODIF or SPEAD stream, or a test counter stream needs a TOML
file, not code: ``voltstream capture --stream FILE.toml`` (docs/formats.md has one
worked example per format). Each description is a pydantic model, validated before
anything is opened; an error names its key (``threads.2``, ``layout.index.bytes``)
and TOML syntax errors their line. ``capture_kwargs()`` gives the keyword arguments of
``voltstream._core.Capture``, which validates the geometry once more in Rust.

The descriptions stand in for ``formats.StreamFormat`` where only packets are
counted (capture alone): they have ``name``, ``streams``, ``capture_kwargs()`` and,
where the format knows them, ``samples_per_packet``. Writing samples (``--output``)
needs the sample geometry of the YNAO and VDIF formats (``--format ynao|vdif``).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, field_validator, model_validator

from voltstream.config_files import read_toml, validated
from voltstream.errors import ConfigError
from voltstream.formats import station_code

__all__ = ["STREAM_FORMATS", "StreamDescription", "load_stream", "parse_stream", "spead_dig"]

#: Formats a description may name (``format = "..."``).
STREAM_FORMATS = ("vdif", "codif", "spead-dig", "spead", "counter", "layout", "ynao")


def _station(value: Any) -> Any:
    """A station id: a number, or two ASCII characters (``"Ef"``)."""
    if isinstance(value, str):
        code = station_code(value)
        return value if code is None else code  # pydantic then names a bad value
    return value


class _Stream(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    # What a capture-alone run needs of a format (StreamFormat has the same).
    nchan: int = 1
    npol: int = 1

    format: str  # each description narrows it to its own name(s)

    @property
    def name(self) -> str:
        """The format's name, as the capture and its report call it."""
        return self.format

    @property
    def streams(self) -> int:
        raise NotImplementedError

    @property
    def samples_per_packet(self) -> int:
        return 0  # unknown: the report counts packets and bytes only

    def labels(self) -> list[str]:
        return [f"stream {i}" for i in range(self.streams)]


class _FrameStream(_Stream):
    """Frames of numbered threads from one station: one stream per thread, in the
    order given; ``station`` a number or two ASCII characters."""

    threads: list[Annotated[int, Field(ge=0, lt=1 << 16)]] = Field(min_length=1)
    station: Annotated[int | None, Field(ge=0, lt=1 << 16)] = None

    @field_validator("station", mode="before")
    @classmethod
    def station_from_text(cls, value: Any) -> Any:
        return _station(value)

    @property
    def streams(self) -> int:
        return len(self.threads)

    def labels(self) -> list[str]:
        return [f"{self.format.upper()} thread {t}" for t in self.threads]


class VdifStream(_FrameStream):
    """VDIF frames as received."""

    format: Literal["vdif"]
    threads: list[Annotated[int, Field(ge=0, le=1023)]] = Field(min_length=1)
    frame_len: int = Field(gt=32, description="whole frame, header included (bytes)")
    frames_per_second: int = Field(gt=0, lt=1 << 24)
    legacy: bool = False  # 16-byte legacy headers (the frame_len includes them)
    # The samples (`voltstream inspect --write-stream` writes them): capture and record
    # take the frames whatever they hold; fold --listen needs them.
    bits_per_sample: Literal[1, 2, 4, 8, 16] | None = None
    complex: bool | None = None
    # The polarisations the threads carry, the rest blocks of channels side by side
    # (io/vdif_threads.py: thread k is pol k % npol of block k // npol); ``nchan`` is
    # one thread's. Left out: 1 or 2 threads are the pols, more are subbands of one.
    npol: Literal[1, 2] = 1

    @model_validator(mode="before")
    @classmethod
    def default_npol(cls, data: Any) -> Any:
        threads = data.get("threads") if isinstance(data, dict) else None
        if isinstance(data, dict) and "npol" not in data and isinstance(threads, list):
            from voltstream.io.vdif_threads import default_npol

            return {**data, "npol": default_npol(len(threads))}
        return data

    @model_validator(mode="after")
    def threads_in_pols(self) -> VdifStream:
        if len(self.threads) % self.npol:
            raise ValueError(f"npol = {self.npol}: {len(self.threads)} threads are not whole "
                             "(channel block, polarisation) pairs")  # fmt: skip
        return self

    def capture_kwargs(self) -> dict:
        return dict(format="vdif", vdif_threads=self.threads, vdif_frame_len=self.frame_len,
                    frames_per_second=self.frames_per_second, station=self.station,
                    vdif_legacy=self.legacy)  # fmt: skip


class CodifStream(_FrameStream):
    """CODIF frames; station and group checked when given."""

    format: Literal["codif"]
    frame_len: int = Field(gt=64)
    frames_per_period: int = Field(gt=0)
    group: Annotated[int | None, Field(ge=0, lt=1 << 16)] = None

    def capture_kwargs(self) -> dict:
        return dict(format="codif", codif_threads=self.threads, codif_frame_len=self.frame_len,
                    frames_per_period=self.frames_per_period, station=self.station,
                    group=self.group)  # fmt: skip


class SpeadStream(_Stream):
    """SPEAD heaps; ``spead-dig`` is the MeerKAT digitiser stream (one packet per heap,
    one stream per digitiser id, index = time stamp / samples per heap)."""

    format: Literal["spead-dig", "spead"]
    digitiser_ids: list[Annotated[int, Field(ge=0)]] = Field(default=[0, 1], min_length=1)
    samples_per_heap: int = Field(default=4096, gt=0)
    sample_bits: Literal[8, 10, 12, 16] = 10
    heap_bytes: int | None = Field(default=None, gt=0)
    packets_per_heap: int = Field(default=1, gt=0)
    heap_address_bits: Literal[40, 48] = 48
    timestamp_id: int = Field(default=0x1600, ge=0)
    digitiser_id_item: int = Field(default=0x3101, ge=0)
    heap_cnt_step: int | None = Field(default=None, gt=0)

    @property
    def streams(self) -> int:
        return len(self.digitiser_ids)

    @property
    def samples_per_packet(self) -> int:
        return self.samples_per_heap // self.packets_per_heap

    def labels(self) -> list[str]:
        return [f"digitiser {d}" for d in self.digitiser_ids]

    def capture_kwargs(self) -> dict:
        kw = dict(format="spead", digitiser_ids=self.digitiser_ids,
                  samples_per_heap=self.samples_per_heap, sample_bits=self.sample_bits,
                  packets_per_heap=self.packets_per_heap,
                  heap_address_bits=self.heap_address_bits, timestamp_id=self.timestamp_id,
                  digitiser_id_item=self.digitiser_id_item)  # fmt: skip
        if self.heap_bytes is not None:
            kw["heap_bytes"] = self.heap_bytes
        if self.heap_cnt_step is not None:
            kw["heap_cnt_step"] = self.heap_cnt_step
        return kw


class CounterStream(_Stream):
    """The sequence-counter packet (u64 index, u16 stream id, payload; big-endian)."""

    format: Literal["counter"]
    streams_: int = Field(default=1, gt=0, alias="streams")
    payload_len: int = Field(gt=0)

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    @property
    def streams(self) -> int:
        return self.streams_

    def capture_kwargs(self) -> dict:
        return dict(format="counter", streams=self.streams_, payload_len=self.payload_len)


class LayoutField(BaseModel):
    """An unsigned integer field of a packet: ``bytes`` at ``offset``, then ``shift``
    right and cut to ``bits`` (0 = all)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    offset: int = Field(ge=0)
    bytes: int = Field(ge=1, le=8)
    endian: Literal["big", "little"] = "big"
    shift: int = Field(default=0, ge=0, lt=64)
    bits: int = Field(default=0, ge=0, le=64)


class LayoutCheck(LayoutField):
    """A constant field (magic, version): a mismatch is foreign if ``foreign``, else
    malformed."""

    value: int = Field(ge=0)
    foreign: bool = False


class LayoutSpec(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    packet_len: int = Field(gt=0)
    index: LayoutField
    index_step: int = Field(default=1, gt=0)
    stream: LayoutField | None = None
    stream_ids: list[Annotated[int, Field(ge=0)]] = []
    checks: list[LayoutCheck] = []
    payload_offset: int = Field(ge=0)
    payload_len: int = Field(gt=0)


class LayoutStream(_Stream):
    """A declarative user format (docs/formats.md, "Declarative layouts")."""

    format: Literal["layout"]
    layout: LayoutSpec

    @property
    def streams(self) -> int:
        return max(1, len(self.layout.stream_ids))

    def capture_kwargs(self) -> dict:
        return dict(format="layout", layout=self.layout.model_dump(exclude_none=True))


class YnaoStream(_Stream):
    """YNAO/ROACH2 frames; ``subband`` checked when given."""

    format: Literal["ynao"]
    subband: int | None = Field(default=None, ge=0, lt=256)

    @property
    def streams(self) -> int:
        return 1

    def capture_kwargs(self) -> dict:
        return dict(format="ynao", subband=self.subband)


StreamDescription = Annotated[
    VdifStream | CodifStream | SpeadStream | CounterStream | LayoutStream | YnaoStream,
    Field(discriminator="format"),
]
_ADAPTER = TypeAdapter(StreamDescription)


def parse_stream(data: dict, source: str = "stream description") -> StreamDescription:
    """A validated description from a dict (a parsed TOML file); ConfigError naming
    every wrong key."""
    fmt = data.get("format") if isinstance(data, dict) else None
    if fmt not in STREAM_FORMATS:
        raise ConfigError(f"{source}: format = {fmt!r}: give one of {', '.join(STREAM_FORMATS)}")
    return validated(source, _ADAPTER.validate_python, data, skip=1)


def load_stream(path: str | os.PathLike[str]) -> StreamDescription:
    """A validated description from a TOML file."""
    p = Path(path)
    return parse_stream(read_toml(p, "the stream description"), str(p))


def spead_dig(**overrides: Any) -> SpeadStream:
    """The MeerKAT digitiser stream with its defaults (``--format spead-dig``)."""
    return SpeadStream(format="spead-dig", **overrides)
