"""The command line's parser: every verb and its options (``build_parser``).

The options several verbs share, and their one name each, are in ``options``
(docs/cli.md, generated from this parser). Over 500 lines: it is the one table of
the command line, verb by verb, and reads top to bottom; a verb's option group stays
beside its verb.
"""

from __future__ import annotations

import argparse
import logging
from typing import Any

from voltstream.capture.defaults import PACKETS_PER_CHUNK, WINDOW
from voltstream.cli.dump import add_dump_options
from voltstream.cli.filterbank import add_filterbank_parser
from voltstream.cli.latency_options import add_latency_parser
from voltstream.cli.ops import (
    add_katcp_options,
    add_metrics_options,
    add_status_parser,
)
from voltstream.cli.options import (
    MAX_NBIN,
    Parser,
    add_alias,
    add_capture_threads,
    add_chunk_pool,
    add_device,
    add_digitiser,
    add_engine,
    add_format_options,
    add_no_status,
    add_options,
    add_rate,
    add_ring_mb,
    add_run,
    add_sample_rate,
    add_verb,
    cpu_list,
    dir_list,
    finite,
    groups,
    host_port,
    host_ports,
    listen_option,
    loss_fraction,
    positive,
    seconds_list,
)
from voltstream.cli.search import add_search_parser
from voltstream.cli.simulate_options import add_simulate_stream_options
from voltstream.fengine.settings import FEngineSettings
from voltstream.record import LAYOUTS, RecordSettings
from voltstream.service import logs

log = logging.getLogger("voltstream.cli")

DESCRIPTION = """\
voltstream: a real-time backend for radio telescopes.

Typical chain (each step is also a library call):
  voltstream simulate --format ynao --signal pulsar --dm 26.833 --dest 127.0.0.1:7000
  voltstream capture  --format ynao --listen 127.0.0.1:7000 --duration 10 --output obs.dada
  voltstream fold obs.dada --dm 26.833 --period 0.0333 --nbin 256 -o obs.fits --plot obs.png
Or run everything on a built-in pulsar with `voltstream demo`, or a whole pipeline
from one file (capture, record and fold in one process):
  voltstream run docs/examples/pipeline.toml     (docs/pipeline.md)

F-engine (digitiser heaps in, channelised SPEAD heaps out):
  voltstream simulate --format spead-dig --heaps 4096 --dest 127.0.0.1:7148
  voltstream fengine --listen 127.0.0.1:7148 --dest 127.0.0.1:7150 --duration 10
"""


def _add_spead_dig_options(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group(
        "digitiser heaps (--format spead-dig)",
        "Two polarisations of real samples, a tone (the same in both) plus independent "
        "Gaussian noise, rounded and clipped like a digitiser, sent as SPEAD heaps of one "
        "packet each (pol 0 and pol 1 interleaved, time stamps from 0). --signal does not "
        "apply; --tone, --seed, --duration, --dest/--output and --rate do.",
    )
    add_digitiser(g, dig_ids="", sample_rate="the tone frequency and --duration")
    add_options(g, (
        ("--tone-amplitude", float, 100.0,
         "tone amplitude in digitiser units (0: noise only). Default: 100"),
        ("--noise", float, 20.0, "noise standard deviation in digitiser units. Default: 20"),
        ("--heaps", positive(int), None,
         "heaps per polarisation to make, instead of --duration x sample rate"),
        ("--drop", None, "",
         "packets not to send, for loss tests: POL:HEAP[,POL:HEAP...] (heap counted "
         "from 0), e.g. 0:10,1:40"),
    ))  # fmt: skip


FENGINE_DESCRIPTION = """\
Run the F-engine: capture the two polarisations of one antenna as MeerKAT digitiser
SPEAD heaps, channelise them (coarse delay, PFB FIR + FFT, fine delay and phase, gains,
quantisation to 8 or 4 bits), and send the channelised voltages as SPEAD heaps, one
destination per substream (range of channels). docs/fengine.md has the contract.

Input: both pols on one UDP port (--listen); the digitiser id item (0x3101) of each
heap says which pol it is (--dig-ids). Several --listen addresses run one antenna
each in this process (the report: a section per antenna, then the totals). Heaps are
paired by time stamp; a heap missing in either pol makes that time range invalid in
both, and every output heap slot whose spectra touch invalid samples is not sent
(counted as skipped).

Output: heaps of (channels/substreams, spectra-per-heap, 2 pols, re/im) int8, items
timestamp (0x1600), feng_id (0x4101), frequency (0x4103, first channel), feng_raw
(0x4300), with item descriptors at the start and every --descriptor-interval heaps,
so spead2's ItemGroup decodes them; a stop heap ends each stream.

Throughput: the CPU engine (NumPy float64, the reference) handles about 10 M samples
per second per pol; real digitiser rates (1712 MS/s) need --device gpu. The default of
1024 channels keeps CPU runs practical; MeerKAT also uses 4096 and 32768.
"""

FENGINE_EPILOG = """\
examples:
  voltstream simulate --format spead-dig --heaps 4096 --dest 127.0.0.1:7148 --rate 0.5
  voltstream fengine --listen 127.0.0.1:7148 --dest 127.0.0.1:7150,127.0.0.1:7151 \\
      --channels 1024 --duration 10 --device cpu
  voltstream fengine --listen 0.0.0.0:7148 --channels 4096 --substreams 4 \\
      --dest 239.10.0.1+3:7148 --device gpu --katcp-port 7147 --settings feng.json
  voltstream fengine --listen 0.0.0.0:7148+3 --cpus 2,3,4,5 --channels 4096 \\
      --dest 239.10.0.1+3:7148 --device gpu      (4 antennas, one GPU, one process)

The end-of-run report lists every counter: per pol received/missing/late/duplicate/
dropped heaps, malformed/foreign packets, pairing, spectra flagged, heaps made/
skipped/sent, saturation per pol, send errors.
"""


def _add_fengine_parser(verbs: Any) -> None:
    F = FEngineSettings  # every default is the settings' (its fields have the options' names)
    p = add_verb(
        verbs,
        "fengine",
        "run the F-engine: digitiser SPEAD heaps in, channelised SPEAD heaps out",
        FENGINE_DESCRIPTION,
        FENGINE_EPILOG,
    )
    g = p.add_argument_group("input (digitiser heaps)")
    g.add_argument(
        "--listen",
        type=listen_option,
        required=True,
        help="HOST:PORT to capture both polarisations on. Several antennas in this "
        "process: one address each, comma-separated or HOST:PORT+N (N+1 consecutive "
        "ports); each antenna has its own capture thread, engine and output",
    )
    add_digitiser(g, dig_ids="; others count as foreign. Several antennas: the same two "
                  "for each, or two per antenna (0,1,2,3: antenna 0's, then 1's)",
                  sample_rate=None)  # fmt: skip
    g.add_argument(
        "--chunk-heaps",
        type=positive(int),
        default=F.chunk_heaps,
        help="digitiser heaps per pol handed to the engine at once (one capture chunk). "
        "Default: the power of two nearest 16 MiB per pol (4096 heaps of 10-bit x 4096 "
        "samples): about 10 ms at 34 Gb/s, so per-chunk Python costs little",
    )
    add_no_status(g)
    add_options(g, (
        ("--threads", positive(int), 1,
         "capture threads in all, shared evenly by the antennas: an antenna's threads take "
         "turns by chunk, its heaps steered in the kernel by time stamp (one antenna above "
         "one core; packet_ring engine, the time stamp at item pointer 4). Default: one "
         "per antenna"),
        ("--cpus", cpu_list, None,
         "CPU of each capture thread, comma-separated, antenna by antenna (--threads 8 "
         "over 4 antennas: 2,3 for antenna 0, 4,5 for antenna 1 ...); pins them, and the "
         "engine's Python stays off them. Default: unpinned"),
    ))  # fmt: skip
    add_engine(g, alias="--capture-engine")
    g = p.add_argument_group("channeliser")
    add_options(g, (
        ("--channels", int, F.channels,
         "output channels: a power of two (2 .. 65536); 2 x channels samples per "
         f"spectrum. Default: {F.channels}"),
        ("--taps", int, F.taps, f"PFB taps per channel (1 .. 16). Default: {F.taps}"),
        ("--spectra-per-heap", int, F.spectra_per_heap,
         f"spectra per output heap. Default: {F.spectra_per_heap} (MeerKAT)"),
    ))  # fmt: skip
    add_sample_rate(g, "delays, channel frequencies and the default send rate")
    add_options(g, (
        ("--max-delay-samples", int, F.max_delay_samples,
         "largest coarse delay the delay models may ask for; spectra needing more "
         f"are flagged. Raise it when you load delays. Default: {F.max_delay_samples}"),
        ("--dither-seed", int, F.dither_seed,
         "add uniform dither before quantisation, seeded (reproducible). Default: none"),
    ))  # fmt: skip
    g = p.add_argument_group("output (channelised heaps)")
    g.add_argument(
        "--dest",
        action="append",
        default=[],
        help="HOST:PORT per substream, comma-separated or repeated, in channel order; "
        "A.B.C.D+N:PORT means N+1 consecutive (multicast) addresses, HOST:PORT+N N+1 "
        "consecutive ports. Several antennas: one per substream per antenna, antenna 0's "
        "first",
    )
    add_options(g, (
        ("--substreams", int, F.substreams,
         "channel ranges (heaps per time slot), each to its own destination. "
         "Default: the number of destinations"),
    ))  # fmt: skip
    bits = g.add_argument("--output-bits", type=int, default=F.output_bits,
                          help=f"output bits per real/imag part: 8 or 4. Default: {F.output_bits}"
                          )  # fmt: skip
    add_alias(g, "--bits", bits)
    add_rate(
        g,
        F.rate,
        "total send rate over all destinations, Gb/s (0 = unpaced), per antenna. Default: "
        "1.1 x the output data rate implied by --sample-rate-hz",
        alias="--rate-gbps",
    )
    add_options(g, (
        ("--packet-payload", int, F.packet_payload,
         "heap payload bytes per packet (divides the heap; 8192 needs jumbo frames "
         f"off loopback). Default: {F.packet_payload}"),
        ("--feng-id", int, F.feng_id, "this F-engine's index (several antennas: antenna "
         f"k is F-engine --feng-id + k). Default: {F.feng_id}"),
        ("--n-fengs", int, F.n_fengs,
         "F-engines in the array (heap cnt = slot x n-fengs + feng-id). Default: "
         f"{F.n_fengs}; with several antennas, at least as many as they need"),
        ("--descriptor-interval", int, F.descriptor_interval,
         "resend the item descriptors every this many heaps per destination. "
         f"Default: {F.descriptor_interval}"),
    ))  # fmt: skip
    out = g.add_argument("-o", "--output", default=F.output,
                         help="also write the packets as sent, back to back, to this file "
                         "(docs/fengine.md; spead2 reads it with add_buffer_reader). "
                         "Several antennas: one file each, comma-separated")  # fmt: skip
    add_alias(g, "--output-file", out)
    g = p.add_argument_group("run and control")
    add_device(g, "where the engine runs")
    add_run(g, what="run", report="also write the end-of-run report (JSON) here")
    add_options(g, (
        ("--katcp-port", int, None,
         "serve katcp control on this port (?gain, ?delays, ?capture-start/stop, "
         "sensors); output then follows ?capture-start/?capture-stop. Several antennas: "
         "antenna k on this port + k (0: a free port each, printed)"),
        ("--katcp-host", None, "127.0.0.1", "address for katcp. Default: 127.0.0.1"),
        ("--settings", None, None,
         "gains and delay models to apply at start (the katcp control's file format). "
         "Several antennas: one file for every antenna, or one each, comma-separated"),
    ))  # fmt: skip


RECORD_DESCRIPTION = """\
Capture a stream (every option of `capture`) and write every chunk, straight from
the capture's memory, to files on several directories at once: one writer thread
per directory (a disk or a RAID set), each chunk to the least-loaded one. The
capture is never held back: a chunk no disk has room for waits while the pool
(--ring-mb) has spare chunks, then is dropped whole and counted; a disk that fails
or fills is taken out and counted while recording goes on on the others. Every
file is written in whole chunks and synced, so after a crash each one is readable
to its last whole chunk; `--repair SCAN` then makes headers and the manifest agree
with the disks. A chunk waits at most --flush-age (0.5 s) before it is written,
full or not, so a crash loses at most about that much of the stream, at any rate.

Layouts (--layout; docs/formats.md, "Recordings"):
  vbs    jive5ab FlexBuff: each chunk a file <dir>/<scan>/<scan>.<8-digit number>,
         packets as received (headers included); numbers count across all disks
  mark6  Mark6 scatter-gather (d-plane v2): one file <dir>/<scan> per disk, a
         20-byte file header, then a block per chunk (8-byte header: number, size)
  vdif   per VDIF thread, files <scan>_s<stream>_<number>.vdif of consecutive
         frames (--file-size); a missing frame is a fill frame (invalid bit set)
  dada   per stream, PSRDADA files <scan>_s<stream>_<OBS_OFFSET>.dada of the
         samples, missing packets zeroed (YNAO, counter and layout streams)
Every disk gets <dir>/<scan>.manifest.json: files, order, time ranges, counters.

Examples:
  voltstream record --format vdif --listen 0.0.0.0:50000 --dirs /mnt/disk0,/mnt/disk1 \\
      --scan r4100_ef_no0001 --layout vdif --packets-per-chunk 4096 --duration 600
  voltstream record --repair r4100_ef_no0001 --dirs /mnt/disk0,/mnt/disk1
"""


def _add_capture_options(p: argparse.ArgumentParser, *, listen_required: bool = True) -> None:
    """What a stream is and how it is captured: shared by capture and record."""
    add_format_options(p, extra_formats=("spead-dig", "codif", "spead", "counter", "layout"))
    p.add_argument(
        "--stream",
        help='a stream description (TOML: format = "vdif" | "codif" | "spead-dig" | '
        '"spead" | "counter" | "layout" | "ynao", and its geometry; docs/formats.md '
        "has one per format). Replaces --format and its options",
    )
    add_engine(p)
    listen = p.add_argument(
        "--listen",
        type=listen_option,
        required=listen_required,
        help="HOST:PORT to listen on; a band that arrives as several streams (YNAO "
        "subbands on several ports): HOST:PORT,HOST:PORT2,... or HOST:PORT+N (N + 1 "
        "consecutive ports), one capture thread each, one timeline",
    )
    add_alias(p, "--bind", listen)
    p.add_argument(
        "--multicast",
        type=groups,
        default=None,
        metavar="GROUP[,GROUP]",
        help="IPv4 multicast groups to join (IGMP) and receive on the --listen port; "
        "--listen then is 0.0.0.0:PORT (or GROUP:PORT). Several groups on one port (e.g. one "
        "per polarisation) assemble onto one timeline",
    )
    add_options(p, (
        ("--interface", None, None,
         "interface to capture on and join the groups on (needed by packet_ring and xdp "
         "with --multicast). Default: the one that owns the --listen address"),
        ("--packets-per-chunk", positive(int), PACKETS_PER_CHUNK,
         f"packets per stream per chunk. Default: {PACKETS_PER_CHUNK}"),
        ("--window", positive(int), None,
         "reorder window in chunks: how late a packet may come and still be placed. "
         "Default: as many chunks as hold 10 ms of the stream at its nominal rate and at "
         f"least 4096 packets or 100 ms (never fewer than {WINDOW})"),
    ))  # fmt: skip
    add_capture_threads(
        p,
        "capture threads (packet_ring engine), steered in the kernel by stream id or by "
        "chunk (--spread); the report shows each thread's counters. Default: 1",
    )
    add_ring_mb(p)
    add_options(p, (
        ("--dpdk-port", None, None,
         "with --engine dpdk: a PCI address (0000:3b:00.0, bound to vfio-pci), EAL "
         "device arguments (net_af_packet0,iface=eth1,framesz=16384,blocksz=65536), or an "
         "interface name (net_af_packet, ring sized by voltstream). Default: net_af_packet on "
         "the interface that owns the --listen address"),
        ("--dpdk-eal-args", None, None,
         "with --engine dpdk: more EAL arguments, e.g. '--log-level=pmd.net.*:debug'"),
    ))  # fmt: skip


def _add_service_options(parser: argparse.ArgumentParser, after_verb: bool = False) -> None:
    """The run's options as a service. They belong to the whole command, so they may
    stand before the verb or after it (``after_verb``: the verb's copy, whose defaults
    are left out so it never overrides one given before the verb)."""
    g = parser.add_argument_group(
        "running as a service (before or after the verb)",
        "docs/operations.md, 'Running as a service': signals, exit codes, logs",
    )
    first = len(parser._actions)
    add_options(g, (
        ("--log-format", None, "text",
         "log lines on stderr as plain text or one JSON object per line. Default: text",
         logs.FORMATS),
        ("--log-level", None, "info", "the least severe log lines shown. Default: info",
         logs.LEVELS),
        ("--max-loss", loss_fraction, None,
         "exit with status 1 when the run lost more than this fraction of its packets "
         "(missing + late + dropped + kernel drops over received + missing; capture, "
         "record, fold --listen, fengine). Default: a lossy run exits 0, its losses in "
         "the report"),
    ))  # fmt: skip
    g.add_argument(
        "--no-progress",
        action="store_true",
        help="no progress bar for fold of a file, replay and simulate --output (shown "
        "only when stderr is a terminal anyway)",
    )
    if after_verb:
        for action in parser._actions[first:]:
            action.default = argparse.SUPPRESS


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(
        prog="voltstream",
        description=DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="store_true", help="print the version and exit")
    _add_service_options(parser)
    verbs = parser.add_subparsers(dest="verb", metavar="VERB")

    p = verbs.add_parser(
        "simulate",
        help="synthesise a digitizer stream (pulsar, noise, tone, frb) to UDP or a file",
        description="Synthesise complex baseband (Gaussian noise, a tone, a dispersed "
        "periodic pulsar, or dispersed bursts), quantise it to 8 bits, packetise it, and "
        "send it over UDP at a paced rate or write it to a file (.dada: a DADA file; "
        "anything else: the raw packets back to back). The sender batches with sendmmsg "
        "and uses UDP GSO (UDP_SEGMENT) where the kernel has it; without both, one core "
        "cannot generate line-rate load. With --subbands N, one band of N times the "
        "format's channels is synthesised and split, as a digitiser feeding N nodes does: "
        "subband i to the i-th --dest, or to FILE.sb{i}.SUFFIX with --output.",
    )
    add_format_options(p, extra_formats=("spead-dig", "codif", "counter", "layout"))
    add_simulate_stream_options(p)
    _add_spead_dig_options(p)
    add_options(p, (
        ("--signal", None, "pulsar",
         "what to synthesise: a periodic pulsar, noise, a tone, or dispersed bursts (frb: "
         "--width, --fluence, --burst-times, docs/search.md). Default: pulsar",
         ("pulsar", "noise", "tone", "frb")),
        ("--dm", finite(float, 0), 26.833,
         "dispersion measure in pc cm^-3 (pulsar, frb), >= 0. Default: 26.833"),
        ("--period", positive(float), 0.0333, "pulse period in seconds (pulsar). Default: 0.0333"),
        ("--duty", positive(float), 0.03, "pulse width as a fraction of the period. Default: 0.03"),
        ("--pulse-phase", finite(float), 0.25,
         "phase of the pulse peak at the band centre, phase zero at the "
         "first sample. Default: 0.25"),
        ("--tone", finite(float), None,
         "tone frequency in MHz (tone; for spead-dig: baseband, 0 .. sample rate / 2). "
         "Default: a quarter into the band"),
        ("--width", positive(float), 1e-3,
         "burst width in seconds (frb): the full width at half maximum of a Gaussian, or "
         "the length of a boxcar (--burst-shape). Default: 0.001"),
        ("--burst-shape", None, "gaussian", "intrinsic burst profile (frb). Default: gaussian",
         ("gaussian", "boxcar")),
        ("--fluence", finite(float, 0), 1.0,
         "burst fluence in Jy ms (frb); with --sefd it sets the burst's energy over the "
         "noise's, F/SEFD. Default: 1.0"),
        ("--sefd", positive(float), 10.0,
         "system equivalent flux density of the simulated noise in Jy (frb). Default: 10"),
        ("--burst-times", seconds_list, None,
         "burst arrival times at the band centre, seconds from the start, comma-separated "
         "(frb). Default: one burst in the middle of --duration"),
        ("--scattering", finite(float, 0), 0.0,
         "scattering time in seconds at the band centre, scaling as f^-4 (frb). Default: 0"),
        ("--duration", positive(float), 1.0, "seconds of data to synthesise. Default: 1.0"),
        ("--seed", int, 1, "random seed. Default: 1"),
    ))  # fmt: skip
    p.add_argument(
        "--subbands",
        type=positive(int),
        default=1,
        metavar="N",
        help="synthesise one band of N x nchan channels (centred on --freq, the whole "
        "band's centre) and split it into N subbands of nchan channels in channel order, "
        "each centred on its own channels, all with the same packet indices and time "
        "stamps (ynao, vdif). Default: 1",
    )
    out = p.add_mutually_exclusive_group(required=True)
    out.add_argument(
        "--dest",
        type=host_ports,
        metavar="HOST:PORT[,HOST:PORT...]",
        help="send UDP to HOST:PORT; with --subbands N, N of them, comma-separated, one "
        "per subband in subband order",
    )
    out.add_argument(
        "-o",
        "--output",
        help="write a file instead of sending; with --subbands N, N files: scan.dada "
        "becomes scan.sb0.dada .. scan.sb{N-1}.dada, each a file of its own subband",
    )
    add_rate(p, 1.0, "send rate in Gb/s with --dest, the total over all destinations "
             "(0 = as fast as possible). Default: 1.0")  # fmt: skip

    p = verbs.add_parser(
        "capture",
        help="capture a UDP stream into time-ordered chunks (and a DADA file)",
        description="Capture packets (packet_ring engine by default, see --engine), place "
        "each by its time stamp into chunks (reordering within a window), count every packet "
        "(received, missing, late, duplicate, invalid, malformed, foreign, dropped, and the "
        "kernel's drops), and write the samples to a DADA file. Missing packets are "
        "zero-filled in the file and counted in the report. Every format the capture "
        "parses can be counted (--stream FILE.toml describes it); --output writes the "
        "samples of YNAO and VDIF streams.",
    )
    _add_capture_options(p)
    add_run(p, what="capture", required=True)
    p.add_argument("-o", "--output", help="write the samples to this DADA file")
    p.add_argument("--source", default="J0000+0000", help="source name for the DADA header")
    add_dump_options(p)

    p = add_verb(
        verbs,
        "record",
        "record a UDP stream to files on many disks at once (VLBI, baseband)",
        RECORD_DESCRIPTION,
    )
    _add_capture_options(p, listen_required=False)
    add_run(p, what="record", required=False)
    p.add_argument(
        "--dirs",
        type=dir_list,
        required=True,
        metavar="DIR[,DIR]",
        help="directories to record into, one per disk (each gets a writer thread)",
    )
    p.add_argument("--scan", help="scan name: a folder (Mark6: a file) on every disk")
    R = RecordSettings  # every default is the settings' (its fields have the options' names)
    add_options(p, (
        ("--layout", None, R.layout, f"how the files are laid out (above). Default: {R.layout}",
         tuple(LAYOUTS)),
        ("--file-size", positive(int), R.file_size,
         f"bytes per vdif or dada file, cut at whole chunks. Default: {R.file_size} "
         f"({R.file_size / 2**30:g} GiB)"),
        ("--source", None, R.source, "source name for DADA headers"),
        ("--queue-chunks", positive(int), R.queue_chunks,
         "chunks each disk's writer may hold queued before the next chunk goes to another "
         f"disk (or, with every queue full, is dropped and counted). Default: {R.queue_chunks}"),
        ("--flush-age", positive(float), None,
         "seconds a chunk may wait in memory before it is written, full or not (its "
         "packets that come later count late; where the stream's rate is known, chunks are "
         "made to fill within half of it): a crash (kill -9, power cut) loses at most "
         "about this much of the stream, at any rate. Default: 0.5"),
        ("--repair", None, None,
         "instead of recording: repair scan REPAIR on --dirs after a crash (cut files to "
         "their last whole packet or block, fix DADA headers, rewrite the manifest)"),
    ))  # fmt: skip

    from voltstream.cli.replay import add_replay_parser

    add_replay_parser(verbs)

    p = verbs.add_parser(
        "fold",
        help="coherently dedisperse, detect and fold a baseband file into PSRFITS",
        description="Coherent dedispersion (overlap-save, FFT length chosen as DSPSR does), "
        "detection and folding into sub-integrations. Inter-channel delays are removed "
        "relative to the band centre. With --period, phase zero is the first sample.",
    )
    p.add_argument(
        "input", nargs="?", help="baseband file: .dada (8-bit TFP) or .vdif (omit with --listen)"
    )
    p.add_argument("--dm", type=finite(float, 0), required=True,
                   help="dispersion measure, pc cm^-3 (finite, >= 0)")  # fmt: skip
    pred = p.add_mutually_exclusive_group(required=True)
    add_options(pred, (
        ("--period", positive(float), None, "constant folding period, s"),
        ("--polyco", None, None, "TEMPO polyco file to fold with"),
        ("--par", None, None,
         "pulsar ephemeris (.par): polycos are made with PINT (pip install pint-pulsar; "
         "runs offline, see voltstream/io/par.py for local clock files)"),
    ))  # fmt: skip
    add_options(p, (
        ("--nbin", finite(int, 2, MAX_NBIN), 256,
         f"phase bins, 2 .. {MAX_NBIN} (2**16). Default: 256"),
        ("--tsub", positive(float), None,
         "sub-integration length in seconds. Default: 10 sub-integrations"),
        ("--pol", None, "AA+BB",
         "detection: total intensity or coherence products. Default: AA+BB",
         ("AA+BB", "AABBCRCI", "IQUV")),
    ))  # fmt: skip
    p.add_argument("-o", "--output", required=True, help="PSRFITS archive to write")
    p.add_argument("--plot", help="also write a PNG of profile, phase-frequency, phase-time")
    add_device(p, "where to dedisperse and fold")
    add_options(p, (
        ("--gpus", positive(int), 1,
         "GPUs to use: time segments go to one worker per GPU and are merged into one "
         "archive. Default: 1"),
        ("--workers-per-gpu", positive(int), 1,
         "fold workers on each GPU (2 exercises the multi-worker path on one GPU). Default: 1"),
    ))  # fmt: skip
    live = p.add_argument_group(
        "live folding from the network (instead of INPUT)",
        "capture and fold in one process; the stream format options below apply",
    )
    live.add_argument(
        "--listen", type=listen_option, default=None,
        help="capture UDP on HOST:PORT; a band in several streams (YNAO subbands): "
        "HOST:PORT,HOST:PORT2,... or HOST:PORT+N, one capture thread each, folded as one "
        "band of 32 channels per stream",
    )  # fmt: skip
    live.add_argument(
        "--stream",
        metavar="FILE.toml",
        help="a VDIF stream description (`voltstream inspect --write-stream` writes one) "
        "instead of the format options: folded where its samples fold live (complex or "
        "real, 1, 2, 4, 8 or 16 bits (1 and 16 on the CPU), standard or legacy headers, "
        "one or two threads; --vdif-threads picks two of more), "
        "else refused with the record command that takes it",
    )
    live.add_argument(
        "--real",
        action="store_true",
        help="VDIF of real-sampled channels (a DBBC3's, R2DBE's, RDBE's): each channel "
        "real at twice --chan-bw, converted to complex channels of --chan-bw before the "
        "fold (on the GPU with --device gpu; docs/formats.md, VDIF)",
    )
    add_run(live, what="capture", duration=10.0, report="write the capture report (JSON) here")
    add_capture_threads(
        live,
        "capture threads (packet_ring engine), steered in the kernel by stream id or by "
        "chunk (--spread): one YNAO stream spreads over several cores. "
        "Default: 1",
    )
    add_chunk_pool(live)
    add_ring_mb(live)
    add_no_status(live)
    add_engine(live)
    many = p.add_argument_group(
        "many nodes, one observation (instead of INPUT or --listen; docs/scale-out.md)",
        "each subband is captured (or read) and folded on its own node of a Dask cluster, "
        "and one merger writes the archive: every channel in frequency order, a node "
        "that is lost weighted zero from then on. Start the cluster first: `dask "
        "scheduler`, `dask worker SCHEDULER --name NODE --resources NODE=1` per node and "
        "one with --resources merger=1. The stream format options give ONE subband's "
        "geometry, with --freq the centre of the WHOLE band",
    )
    add_options(many, (
        ("--scheduler", None, None, "the Dask scheduler, e.g. tcp://head:8786"),
        ("--start-packet", finite(int, 0), 0,
         "live subbands: the packet index (the format's own) where the observation and "
         "its first sub-integration start, the same on every node. Default: 0"),
    ))  # fmt: skip
    many.add_argument(
        "--subband",
        action="append",
        default=[],
        metavar="NODE=SOURCE",
        help="a node and what it folds: HOST:PORT to capture, or a file on that node "
        "(one per subband, e.g. scan.sb0.dada as `simulate --subbands` and the recorder "
        "write them); repeat in the whole band's channel order",
    )
    add_format_options(p)

    add_filterbank_parser(verbs)
    add_search_parser(verbs)
    _add_fengine_parser(verbs)
    add_latency_parser(verbs)

    p = verbs.add_parser(
        "run",
        help="run a whole pipeline described in one TOML file (docs/pipeline.md)",
        description="Run a pipeline file: the capture (stream, network, engine, chunks, "
        "threads), what uses its chunks (a DADA file, a recording, a fold, a recording "
        "and a fold, or the F-engine), the run's duration, katcp and metrics. The file is "
        "validated whole before anything starts; every error names its key and line. "
        "Every capturing verb is a case of it: --print-config shows a command line's file.",
    )
    p.add_argument("pipeline", nargs="?", help="the pipeline file (TOML)")
    p.add_argument("--check", action="store_true", help="validate the file, run nothing")
    p.add_argument(
        "--print-config",
        nargs=argparse.REMAINDER,
        metavar="VERB ARGS",
        help="print the pipeline file that `voltstream VERB ARGS...` means (capture, "
        "record, fold --listen, fengine); the rest of the line is that command",
    )

    p = verbs.add_parser(
        "inspect",
        help="say what a baseband file or a live stream is, and the options that take it",
        description="Reads a DADA or VDIF file's headers (VDIF: stations, threads, channels, "
        "bits, real or complex, frame length, time span, gaps), or listens for packets on "
        "HOST:PORT (VDIF or YNAO frames), and prints what it found and a command line for "
        "each verb that takes it (fold, fold --listen, capture, record), or why a verb "
        "does not and which does. Shapes the format options do not describe (real "
        "samples, 1- and 16-bit, more than two threads, legacy headers) are captured and "
        "recorded with --stream FILE.toml, which --write-stream writes.",
    )
    p.add_argument("input", nargs="?", help="a .dada or .vdif file (omit with --listen)")
    add_options(p, (
        ("--listen", host_port, None, "listen on HOST:PORT"),
        ("--packets", positive(int), 2000, "packets to look at. Default: 2000"),
    ))  # fmt: skip
    wait = p.add_argument("--duration", type=positive(float), default=5.0,
                          help="seconds to listen at most. Default: 5")  # fmt: skip
    add_alias(p, "--timeout", wait)
    p.add_argument("--json", action="store_true", help="print the findings as JSON")
    p.add_argument(
        "--write-stream",
        metavar="FILE.toml",
        help="write the VDIF stream's description (threads, frame length, frames per "
        "second, station, legacy headers, channels, bits, real or complex) to this file, "
        "for the --stream FILE.toml of the printed capture, record and fold --listen "
        "commands",
    )

    p = verbs.add_parser(
        "demo",
        help="simulate a pulsar, send it over loopback, capture, fold, report",
        description="End to end on one machine: simulates a known dispersed pulsar, sends "
        "it over loopback, captures it, folds it and writes the archive, the plots and a "
        "run report to ./demo-output/. Exits non-zero if any packet was lost or the pulsar "
        "is not detected at the right phase.",
    )
    outdir = p.add_argument("-o", "--output", default="demo-output",
                            help="folder to write into. Default: demo-output")  # fmt: skip
    add_alias(p, "--outdir", outdir)
    add_options(p, (
        ("--duration", positive(float), None,
         "seconds of data. Default: 0.5 (one node), 4 (--nodes)"),
    ))  # fmt: skip
    add_rate(p, None, "send rate, Gb/s. Default: 2.0 (one node), 0.1 in all (--nodes)")
    p.add_argument("--port", type=finite(int, 0, 65535), default=0,
                   help="UDP port (0: pick a free one)")  # fmt: skip
    g = p.add_argument_group(
        "many nodes, one observation (docs/scale-out.md)",
        "--nodes N runs the cluster demo: one band of N x 32 channels split into N "
        "subbands (voltstream simulate --subbands), a Dask scheduler, N node workers "
        "(each in its own network namespace with a veth when run as root, else on "
        "loopback ports) folding one subband each, and a merger writing one archive "
        "(demo-nodes.fits), its plot and a report (demo-nodes-report.json) to --outdir. "
        "Exits non-zero on loss or a missed pulsar.",
    )
    add_options(g, (
        ("--nodes", positive(int), None, "node workers, one subband each (e.g. 4)"),
        ("--kill-node", finite(int, 0), None,
         "kill this node's worker (SIGKILL) mid-run: its nanny restarts it, it rejoins at "
         "the next sub-integration, its channels are weighted zero in between"),
        ("--at", positive(float), 1.5,
         "seconds after the simulator starts sending to kill --kill-node. Default: 1.5"),
        ("--tsub", positive(float), 0.25, "sub-integration length, s. Default: 0.25"),
        ("--netns", None, "auto",
         "nodes in network namespaces: auto (when root), yes, no. Default: auto",
         ("auto", "yes", "no")),
    ))  # fmt: skip
    add_device(g, "where each node folds its subband (--nodes; on one GPU the nodes share it)")
    add_status_parser(verbs)
    add_metrics_options(verbs)
    add_katcp_options(verbs)
    for sub in verbs.choices.values():
        _add_service_options(sub, after_verb=True)
    return parser
