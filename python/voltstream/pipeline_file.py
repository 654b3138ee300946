"""A whole pipeline in one file (`voltstream run PIPELINE.toml`), validated before
anything starts; docs/pipeline.md describes every key.

The capture is a capture file's (``capture.config.CaptureFile``): the sections
[network] [engine] [chunks] [threads], and [stream]: either the CLI's format options
(``format = "ynao"`` or ``"vdif"`` and ``nchan``, ``vdif_threads``, ...: a stream
whose samples can be folded) or a stream description (``streams.py``, as in a
capture file, any format; ``description = "FILE.toml"`` names one in a file). Then
the run ([run]: duration, idle timeout, report), at most one way to use the chunks
([dada], [record], [fold], [record] + [fold], or [fengine]), [katcp] and [metrics].

Every error names its key and its line: pydantic's errors carry the key path, and
``config_files.key_lines`` finds it in the text; the checks across sections (which
consumers go together) report the same way, all at once.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    AliasChoices,
    BaseModel,
    ConfigDict,
    Discriminator,
    Field,
    Tag,
    ValidationError,
    field_validator,
    model_validator,
)

from voltstream.capture.config import CaptureSettings
from voltstream.config_files import key_lines, line_of, problems_text, read_toml
from voltstream.errors import ConfigError
from voltstream.fengine.settings import FEngineSettings, OutputBits, SampleBits
from voltstream.fold.limits import MAX_NBIN
from voltstream.record.layouts import LayoutName
from voltstream.record.run import RecordSettings
from voltstream.streams import STREAM_FORMATS, StreamDescription

__all__ = [
    "PipelineFile",
    "SampleStream",
    "load_pipeline",
    "parse_pipeline",
]


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


def _host_port(text: str) -> str:
    host, sep, port = text.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"expected HOST:PORT (e.g. 127.0.0.1:9100), got {text!r}")
    return text


class SampleStream(_Section):
    """A YNAO or VDIF stream described by the CLI's format options (the same names,
    ``--vdif-threads`` as ``vdif_threads``): its samples can be folded and written."""

    format: Literal["ynao", "vdif"] = "ynao"
    nchan: int | None = Field(default=None, gt=0)
    chan_bw: float | None = None
    freq: float | None = Field(default=None, gt=0)
    vdif_payload: int = Field(default=8000, gt=0)
    station: int | None = Field(default=None, ge=0, lt=1 << 16)
    # None as on the command line (--npol): VDIF's 1-2 threads are polarisations, more
    # are subbands of one (io/vdif_threads.py); YNAO carries two.
    npol: Literal[1, 2] | None = None
    vdif_threads: list[Annotated[int, Field(ge=0, le=1023)]] | Literal["auto"] | None = None
    bits: Literal[2, 4, 8] = 8

    @field_validator("station", mode="before")
    @classmethod
    def station_from_text(cls, value: Any) -> Any:
        from voltstream.formats import station_code

        if isinstance(value, str):
            code = station_code(value)
            return value if code is None else code
        return value


class DescribedStream(_Section):
    """A stream description in its own file (``--stream FILE.toml``)."""

    description: str


#: Keys only a stream description has (a VDIF or YNAO one), not the format options.
_DESCRIPTION_KEYS = {"threads", "frame_len", "frames_per_second", "legacy", "subband"}


def _stream_kind(value: Any) -> str:
    if isinstance(value, BaseModel):
        return {"SampleStream": "options", "DescribedStream": "file"}.get(
            type(value).__name__, "description"
        )
    if not isinstance(value, dict):
        return "options"  # pydantic then says what a table needs
    if "description" in value:
        return "file"
    if value.get("format", "ynao") in ("ynao", "vdif") and not set(value) & _DESCRIPTION_KEYS:
        return "options"
    return "description"


StreamSection = Annotated[
    Annotated[SampleStream, Tag("options")]
    | Annotated[DescribedStream, Tag("file")]
    | Annotated[StreamDescription, Tag("description")],
    Discriminator(_stream_kind),
]


class RunSection(_Section):
    """How long the pipeline runs, and where its report goes."""

    duration: float | None = Field(default=None, gt=0, description="seconds; none: Ctrl-C")
    idle_timeout: float | None = Field(default=None, gt=0)
    report: str | None = Field(default=None, description="every counter, as JSON")


class DadaSection(_Section):
    """The samples to one DADA file (`capture --output`)."""

    output: str
    source: str = "J0000+0000"


class RecordSection(_Section):
    """`voltstream record`'s options: the scan on several disks; each default is
    ``RecordSettings``' (record/run.py), as the command line's."""

    dirs: list[str] = Field(min_length=1)
    scan: str
    layout: LayoutName = RecordSettings.layout
    file_size: int = Field(default=RecordSettings.file_size, gt=0)
    source: str = RecordSettings.source
    queue_chunks: int = Field(default=RecordSettings.queue_chunks, ge=1)
    forward_chunks: int = Field(
        default=8, ge=1, description="with [fold]: written chunks queued for the fold"
    )


class FoldSection(_Section):
    """`voltstream fold --listen`'s options."""

    output: str
    # As the command line's: finite, and nbin within MAX_NBIN (fold/limits.py).
    dm: float = Field(ge=0, allow_inf_nan=False)
    period: float | None = Field(default=None, gt=0, allow_inf_nan=False)
    polyco: str | None = None
    par: str | None = None
    nbin: int = Field(default=256, ge=2, le=MAX_NBIN)
    tsub: float | None = Field(default=None, gt=0, allow_inf_nan=False)
    pol: Literal["AA+BB", "AABBCRCI", "IQUV"] = "AA+BB"
    plot: str | None = None
    device: Literal["auto", "gpu", "cpu"] = "auto"
    buffer_mb: float = Field(default=1024, gt=0)
    status: bool = True

    @model_validator(mode="after")
    def one_predictor(self) -> FoldSection:
        given = [k for k in ("period", "polyco", "par") if getattr(self, k) is not None]
        if len(given) != 1:
            raise ValueError(f"give exactly one of period, polyco, par (given: {given or 'none'})")
        return self


#: The F-engine's defaults: the settings' own, as the command line's (one default each).
_F = FEngineSettings


class FEngineSection(_Section):
    """`voltstream fengine`'s options (the stream: MeerKAT digitiser heaps); each default
    is ``FEngineSettings``' (fengine/settings.py), as the command line's."""

    dig_ids: str = ",".join(str(i) for i in _F.dig_ids)
    sample_bits: SampleBits = _F.sample_bits
    samples_per_heap: int = Field(default=_F.samples_per_heap, gt=0)
    chunk_heaps: int | None = Field(default=_F.chunk_heaps, gt=0)
    channels: int = _F.channels
    taps: int = _F.taps
    spectra_per_heap: int = Field(default=_F.spectra_per_heap, gt=0)
    sample_rate_hz: float = Field(default=_F.sample_rate_hz, gt=0)
    max_delay_samples: int = Field(default=_F.max_delay_samples, ge=0)
    dither_seed: int | None = _F.dither_seed
    dest: list[str] = list(_F.dest)
    substreams: int | None = Field(default=_F.substreams, ge=1)
    output_bits: OutputBits = Field(
        default=_F.output_bits, validation_alias=AliasChoices("output_bits", "bits")
    )
    rate: float | None = Field(default=_F.rate, ge=0)
    packet_payload: int = Field(default=_F.packet_payload, gt=0)
    feng_id: int = Field(default=_F.feng_id, ge=0)
    n_fengs: int = Field(default=_F.n_fengs, ge=1)
    descriptor_interval: int = Field(default=_F.descriptor_interval, gt=0)
    output: str | None = Field(
        default=_F.output, validation_alias=AliasChoices("output", "output_file")
    )
    device: Literal["auto", "gpu", "cpu"] = "auto"
    settings: str | None = None
    status: bool = True


class KatcpSection(_Section):
    """katcp control (the F-engine's, `--katcp-port`); validated for other pipelines."""

    host: str = "127.0.0.1"
    port: int = Field(ge=0, lt=65536)


class MetricsSection(_Section):
    """Where the metrics server listens (passed on as ``metrics_listen``)."""

    listen: str

    @field_validator("listen")
    @classmethod
    def host_and_port(cls, value: str) -> str:
        return _host_port(value)


class PipelineFile(CaptureSettings):
    """A whole pipeline: a capture file's sections, the run, the consumers."""

    stream: StreamSection = SampleStream()
    run: RunSection = RunSection()
    dada: DadaSection | None = None
    record: RecordSection | None = None
    fold: FoldSection | None = None
    fengine: FEngineSection | None = None
    katcp: KatcpSection | None = None
    metrics: MetricsSection | None = None

    def capture_settings(self) -> CaptureSettings:
        """The capture's own sections, as the verbs take them."""
        return CaptureSettings.model_validate(
            {k: getattr(self, k) for k in CaptureSettings.model_fields}
        )

    def verb(self) -> str:
        """The verb this pipeline is a case of (record + fold: fold, recording)."""
        if self.fengine is not None:
            return "fengine"
        if self.fold is not None:
            return "fold"
        return "record" if self.record is not None else "capture"


def _combination_problems(pf: PipelineFile) -> list[tuple[tuple[str, ...], str]]:
    """What the sections cannot do together, each at the key that says so."""
    problems: list[tuple[tuple[str, ...], str]] = []
    host, sep, port = pf.network.bind.rpartition(":")
    if not (sep and host and port.isdigit() and int(port) < 65536):
        problems.append(
            (("network", "bind"), f"expected HOST:PORT (port 0: any), got {pf.network.bind!r}")
        )
    others = [k for k in ("dada", "record", "fold") if getattr(pf, k) is not None]
    if pf.fengine is not None and others:
        problems.append(
            (
                ("fengine",),
                f"the F-engine takes the capture's chunks itself; it runs alone, "
                f"not with [{'], ['.join(others)}]",
            )
        )
    if pf.dada is not None and (pf.record is not None or pf.fold is not None):
        problems.append(
            (("dada",), '[dada] writes a capture alone; with [record] use layout = "dada"')
        )
    if pf.fold is not None and not isinstance(pf.stream, SampleStream):
        problems.append(
            (
                ("stream",),
                '[fold] needs the samples\' geometry: format = "ynao" or "vdif" '
                "with the format options (nchan, vdif_threads, ...)",
            )
        )
    if pf.fengine is not None and "stream" in pf.model_fields_set:
        problems.append(
            (
                ("stream",),
                "the F-engine's stream is its digitiser heaps "
                "([fengine] dig_ids, sample_bits, ...): leave "
                "[stream] out",
            )
        )
    if pf.verb() == "capture" and pf.run.duration is None:
        problems.append((("run", "duration"), "a capture alone needs a duration (seconds)"))
    if pf.dada is not None and not isinstance(pf.stream, SampleStream):
        problems.append(
            (
                ("dada",),
                "[dada] writes the samples of YNAO and VDIF streams "
                "given by the format options only",
            )
        )
    return problems


def _clean_loc(loc: tuple[Any, ...]) -> tuple[Any, ...]:
    """A key path without the union tags pydantic puts in (the user never wrote them)."""
    if len(loc) > 1 and loc[0] == "stream" and loc[1] in ("options", "file", "description"):
        loc = (loc[0], *loc[2:])
        if len(loc) > 1 and loc[1] in STREAM_FORMATS:
            loc = (loc[0], *loc[2:])
    return loc


def parse_pipeline(text: str, source: str = "pipeline") -> PipelineFile:
    """A validated pipeline from TOML text; one ConfigError naming every wrong key
    and its line."""
    import tomllib

    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(f"{source}: not valid TOML: {e}") from None
    lines = key_lines(text)

    def where(loc: tuple[Any, ...]) -> str:
        return line_of(lines, loc)

    try:
        pf = PipelineFile.model_validate(data)
    except ValidationError as e:
        errors = [(_clean_loc(err["loc"]), err["msg"]) for err in e.errors()]
        raise ConfigError(problems_text(source, errors, where)) from None
    if problems := _combination_problems(pf):
        raise ConfigError(problems_text(source, list(problems), where))
    return pf


def load_pipeline(path: str | Path) -> PipelineFile:
    """A validated pipeline from a TOML file."""
    p = Path(path)
    read_toml(p, "the pipeline file")  # a clear error when it cannot be read
    return parse_pipeline(p.read_text(), str(p))
