"""What an F-engine is asked for, as one typed object (``FEngineSettings``).

Made once, by ``voltstream fengine`` (cli/fengine.py; a pipeline file's [fengine] is
that verb's command line, cli/run_file.py), and given to ``run_fengine``
(fengine/pipeline.py), which reads the digitiser input from it; the engine
(``engine_kwargs``, for ``make_engine``) and the output (``heap_output``) are made
from it too. Each default is written here once: the command line's options
(cli/parser.py) and the pipeline file's [fengine] keys (pipeline_file.py) read theirs
from this class, the digitiser's from ``voltstream.digitiser``. The field names are
the command line's (``--output-bits`` is ``output_bits``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from voltstream.digitiser import (
    DIG_IDS,
    SAMPLE_RATE_HZ,
    SAMPLE_WIDTH,
    SAMPLES_PER_HEAP,
    check_bits,
    heap_bytes,
)
from voltstream.dsp.pfb import check_pfb_shape
from voltstream.errors import ConfigError
from voltstream.fengine.heaps import HeapLayout

if TYPE_CHECKING:
    from voltstream.fengine.output import HeapOutput

__all__ = ["FEngineSettings", "OutputBits", "SampleBits"]

#: Digitiser sample widths (``voltstream.digitiser.SAMPLE_BITS``).
SampleBits = Literal[8, 10, 12, 16]
#: Output sample widths (bits per real or imaginary part).
OutputBits = Literal[4, 8]
OUTPUT_BITS = (4, 8)


@dataclass(frozen=True)
class FEngineSettings:
    """One F-engine's settings: its digitiser input, its channeliser, its output.
    Validated when made (a ConfigError naming the option); ``dest`` may be given as
    the command line's text (``A.B.C.D+N:PORT`` ranges, commas) and is kept expanded."""

    # The digitiser input (MeerKAT SPEAD heaps, both polarisations on one port).
    dig_ids: tuple[int, int] = DIG_IDS
    sample_bits: SampleBits = SAMPLE_WIDTH
    samples_per_heap: int = SAMPLES_PER_HEAP
    #: Digitiser heaps per polarisation per chunk; None: ``default_chunk_heaps``
    #: (fengine/pipeline.py: about 16 MiB per polarisation).
    chunk_heaps: int | None = None
    # The channeliser.
    channels: int = 1024
    taps: int = 16
    spectra_per_heap: int = 256
    sample_rate_hz: float = SAMPLE_RATE_HZ
    max_delay_samples: int = 0
    dither_seed: int | None = None
    feng_id: int = 0
    # The output.
    dest: tuple[str, ...] = ()
    #: Channel ranges, each to its own destination; None: one per destination.
    substreams: int | None = None
    output_bits: OutputBits = 8
    #: Gb/s over all destinations (0: unpaced); None: ``send_rate_gbps``'s default.
    rate: float | None = None
    packet_payload: int = 8192
    n_fengs: int = 1
    descriptor_interval: int = 1024
    #: A file the packets are also written to, as sent.
    output: str | None = None

    def __post_init__(self) -> None:
        from voltstream.fengine.output import parse_destinations

        check_bits(self.sample_bits, "--sample-bits")
        heap_bytes(self.samples_per_heap, self.sample_bits, "--samples-per-heap")
        if self.output_bits not in OUTPUT_BITS:
            raise ConfigError(
                f"--output-bits {self.output_bits}: the output is 8-bit or 4-bit, use 8 or 4"
            )
        check_pfb_shape(self.channels, self.taps)
        ids = tuple(int(i) for i in self.dig_ids)
        if len(ids) != 2 or ids[0] == ids[1]:
            raise ConfigError(
                f"digitiser ids {self.dig_ids}: give two different ids, pol 0 then pol 1"
            )
        if self.chunk_heaps is not None and int(self.chunk_heaps) < 1:
            raise ConfigError(f"chunk_heaps={self.chunk_heaps} must be at least 1")
        if self.substreams is not None and self.substreams < 1:
            raise ConfigError(f"--substreams {self.substreams}: give at least 1")
        if not 0 <= self.feng_id < self.n_fengs:
            raise ConfigError(f"--feng-id {self.feng_id} must be in 0 .. --n-fengs - 1")
        # Frozen: the normalised forms are set once, here.
        object.__setattr__(self, "dig_ids", ids)
        object.__setattr__(self, "dest", tuple(parse_destinations(self.dest)))
        self.layout  # noqa: B018 - the heap shape's own checks (substreams divide channels)

    @property
    def n_substreams(self) -> int:
        return self.substreams if self.substreams is not None else max(1, len(self.dest))

    @property
    def heap_bytes(self) -> int:
        """Bytes of one digitiser heap (one polarisation)."""
        return heap_bytes(self.samples_per_heap, self.sample_bits)

    @property
    def layout(self) -> HeapLayout:
        """The output heaps' shape."""
        return HeapLayout(self.channels, self.spectra_per_heap, self.n_substreams,
                          self.output_bits)  # fmt: skip

    @property
    def send_rate_gbps(self) -> float:
        """``rate``, or 1.1 x the output data rate a digitiser of ``sample_rate_hz``
        implies, packet headers included."""
        if self.rate is not None:
            return self.rate
        # Output bytes per digitiser sample time: 2 pols x (2 or 1) bytes per complex
        # value x nchan values per 2*nchan samples; plus packet headers; 10% margin.
        per_sample = 2 * (2 if self.output_bits == 8 else 1) / 2
        per_packet = max(1, min(self.packet_payload, self.layout.payload_bytes))
        overhead = (per_packet + 72) / per_packet
        return 1.1 * self.sample_rate_hz * per_sample * 8 * overhead / 1e9

    def engine_kwargs(self) -> dict[str, Any]:
        """The engine's keywords (``FEngineReference``'s, ``make_engine``'s settings)."""
        return {
            "nchan": self.channels,
            "taps": self.taps,
            "spectra_per_heap": self.spectra_per_heap,
            "n_substreams": self.n_substreams,
            "bits": self.output_bits,
            "sample_rate_hz": self.sample_rate_hz,
            "max_delay_samples": self.max_delay_samples,
            "feng_id": self.feng_id,
            "dither_seed": self.dither_seed,
        }

    def heap_output(self) -> HeapOutput:
        """The output these settings describe: heaps to ``dest``, paced at
        ``send_rate_gbps``, and to ``output`` when given."""
        from voltstream.fengine.output import HeapOutput

        return HeapOutput(
            self.layout, self.dest, rate_gbps=self.send_rate_gbps, output_file=self.output,
            packet_payload=self.packet_payload, n_fengs=self.n_fengs,
            descriptor_interval=self.descriptor_interval,
        )  # fmt: skip
