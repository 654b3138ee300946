"""``voltstream replay``: its options, and building the Source that the inputs name."""

from __future__ import annotations

import argparse
import json
import logging
from collections import defaultdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

from voltstream.cli.options import (
    add_alias,
    add_format_options,
    add_options,
    dir_list,
    finite,
    host_port,
    positive,
)
from voltstream.errors import ConfigError, FormatError
from voltstream.replay import layouts
from voltstream.replay.pcap import is_pcap

if TYPE_CHECKING:
    from voltstream.replay.dada_file import DadaFile
from voltstream.replay.sources import (
    Mark6Files,
    PacketFiles,
    PcapFiles,
    Source,
    VdifStreams,
    vdif_frame_len,
)

DESCRIPTION = """\
Send a recording back over UDP, packet for packet, paced: a scan that `voltstream
record` wrote (any layout: vbs, mark6, vdif, dada; striped over many disks), raw
packet files, pcap files, or any DADA file (PSRDADA's, DSPSR's, EDD's: sent as VDIF
frames, one thread per polarisation, its samples as they are; replay prints the
stream description and the fold --listen, record and capture commands that take
them, --write-stream writes the description). Packets go out as they were recorded
(a DADA scan of ours: rebuilt into --format packets from the samples), batched with
sendmmsg and UDP GSO, at
--rate (payload Gb/s, held over the whole replay) or at the recording's own pace
(--realtime). The report counts every packet sent and every one not sent (chunks
not recorded, VDIF fill frames, a truncated last record...).

examples:
  # a scan recorded on three disks, at 2 Gb/s
  voltstream replay scan01 --dirs /mnt/d0,/mnt/d1,/mnt/d2 --dest 127.0.0.1:7000 --rate 2
  # at the pace it was recorded (VDIF: from the frame numbers), three times over
  voltstream replay scan01 --dirs /mnt/d0,/mnt/d1 --dest 10.0.0.2:7000 --realtime \\
      --frames-per-second 8000 --loop 3 --report replay.json
  # a DADA scan rebuilt into VDIF frames
  voltstream replay scan02 --dirs /mnt/d0 --dest 127.0.0.1:7000 --format vdif --rate 1
  # a PSRDADA file as VDIF frames: first the description and the receivers' commands,
  # then the frames, at 0.5 Gb/s
  voltstream replay obs.dada --dest 127.0.0.1:7000 --write-stream obs.toml --dry-run
  voltstream replay obs.dada --dest 127.0.0.1:7000 --rate 0.5
  # a tcpdump capture, only the datagrams to port 7148, at its own time stamps
  voltstream replay capture.pcap --pcap-port 7148 --dest 127.0.0.1:7148 --realtime
  # raw packets back to back (what `voltstream simulate --output x.bin` writes)
  voltstream replay x.bin --packet-len 8216 --dest 127.0.0.1:7000 --rate 0
"""


def add_replay_parser(verbs: Any) -> None:
    p = verbs.add_parser(
        "replay",
        help="send a recording (scan, raw packets, pcap) back over UDP, paced",
        description=DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("inputs", nargs="+", metavar="SCAN|FILE",
                   help="a scan name (with --dirs), or raw packet / pcap files")  # fmt: skip
    p.add_argument("--dirs", type=dir_list,
                   metavar="DIR[,DIR]", help="the disks the scan was recorded to")  # fmt: skip
    p.add_argument("--dest", type=host_port, required=True, help="send UDP to HOST:PORT")
    pace = p.add_mutually_exclusive_group()
    pace.add_argument("--rate", type=finite(float, 0), default=None,
                      help="payload rate in Gb/s, held over the whole replay (0 = as fast "
                      "as possible). Default: 1.0")  # fmt: skip
    pace.add_argument("--realtime", action="store_true",
                      help="at the recording's own pace: VDIF frame numbers (with "
                      "--frames-per-second or the manifest's), pcap time stamps, "
                      "DADA TSAMP")  # fmt: skip
    add_options(p, (
        ("--loop", positive(int), 1, "send the recording this many times. Default: 1"),
        ("--report", None, None, "write the report (every counter) as JSON here"),
        ("--packet-len", positive(int), None,
         "bytes per packet of raw files and vbs scans without a manifest. Default: the "
         "manifest's, else --format's, else the first VDIF header's frame length"),
        ("--frames-per-second", positive(int), None,
         "VDIF frames per second of one thread, for --realtime. Default: the manifest's"),
    ))  # fmt: skip
    send_from = p.add_argument("--send-from", default=None,
                               help="local HOST:PORT to send from. Default: any")  # fmt: skip
    add_alias(p, "--bind", send_from)
    port = p.add_argument("--pcap-port", type=int, default=None,
                          help="pcap: replay only UDP datagrams to this port")  # fmt: skip
    add_alias(p, "--port", port)
    source_port = p.add_argument("--pcap-source-port", type=int, default=None,
                                 help="pcap: replay only UDP datagrams from this port")  # fmt: skip
    add_alias(p, "--source-port", source_port)
    p.add_argument("--write-stream", metavar="FILE.toml", default=None,
                   help="a DADA file: write the stream description of the VDIF frames it "
                   "is sent as (fold --listen, record and capture take it with --stream), "
                   "named in the commands printed")  # fmt: skip
    p.add_argument("--dry-run", action="store_true",
                   help="a DADA file: print the frames' description and the commands that "
                   "take them (and --write-stream), send nothing")  # fmt: skip
    p.add_argument("--send-fill", action="store_true",
                   help="vdif layout: also send the fill frames of packets never received "
                   "(skipped and counted by default)")  # fmt: skip
    add_format_options(p)
    # No --format means: send packets as recorded (DADA needs one to rebuild them).
    p.set_defaults(format=None)


def run(args: argparse.Namespace, stop: Any = None, bar: Any = None) -> int:
    """The verb: ``stop`` (an Event) ends it early; ``bar(total bytes or None)`` is a
    context manager yielding ``update(bytes sent)`` (the progress bar)."""
    from contextlib import nullcontext

    from voltstream.replay.run import replay

    source = open_source(args)
    from voltstream.replay.dada_file import DadaFile

    if isinstance(source, DadaFile):  # a DADA file sent as VDIF frames
        _describe_dada(source, args)
        if args.dry_run:
            source.close()
            return 0
    elif args.write_stream or args.dry_run:
        raise ConfigError("--write-stream and --dry-run are for a DADA file sent as VDIF "
                          "frames; a recording's packets are sent as recorded")  # fmt: skip
    rate = 1.0 if args.rate is None and not args.realtime else (args.rate or 0.0)
    total = _input_bytes(source)
    logging.getLogger("voltstream.replay").info("replay: %s -> %s", source.kind, args.dest)
    try:
        board = getattr(args, "run_status", None)  # --metrics (voltstream.ops)
        with bar(total and total * args.loop) if bar else nullcontext(None) as update:
            report = replay(source, args.dest, rate_gbps=rate, realtime=args.realtime,
                            loops=args.loop, bind=args.send_from, stop=stop, progress=update,
                            live_report=board.watch if board else None)  # fmt: skip
    finally:
        close = getattr(source, "close", None)
        if close is not None:
            close()
    if args.report:
        Path(args.report).write_text(json.dumps(report, indent=2) + "\n")
    err = report["pacing_error"]
    print(
        f"replay: {report['packets']} packets, {report['bytes'] / 1e6:.1f} MB to {args.dest} "
        f"in {report['seconds']:.3f} s = {report['rate_gbps']:.3f} Gb/s"
        + (
            f" (asked {report['asked_gbps']:.3f}, pacing error {err:.2%})"
            if err is not None
            else ""
        )
        + "; "
        + ", ".join(f"{k} {report[k]}" for k in _NOT_SENT if report.get(k))
        + (" (stopped by a signal)" if report["interrupted"] else "")
    )
    return 0


def _describe_dada(source: DadaFile, args: argparse.Namespace) -> None:
    """Prints (and with --write-stream writes) the stream description of the frames a
    DADA file is sent as, and the commands that take them."""
    from voltstream.replay.dada_file import describe

    if args.write_stream:
        from voltstream.service.outputs import check_outputs

        check_outputs([("--write-stream", args.write_stream)])
    toml, commands = describe(source, args.dest, args.write_stream)
    if args.write_stream:
        Path(args.write_stream).write_text(toml)
    f = source.fmt
    kind = "real" if f.real else "complex"
    lines = [f"replay: {source.path} as VDIF frames: {f.npol} thread(s) (one per "
             f"polarisation) of {f.nchan} channel(s), {f.bits}-bit {kind}, "
             f"{f.packet_len}-byte frames, {source.frames_per_second} a second each",
             "  take them with:", *(f"    {c}" for c in commands.values())]  # fmt: skip
    if not args.write_stream:
        lines += ["  FILE.toml (replay --write-stream FILE.toml writes it):",
                  *(f"    {t}" for t in toml.splitlines())]  # fmt: skip
    else:
        lines.append(f"  {args.write_stream}: the stream description, written")
    print("\n".join(lines), flush=True)


def _input_bytes(source: Source) -> int | None:
    """The bytes of the files a source reads, for the progress bar's total (about the
    bytes it sends: pcap and DADA sources differ by their headers); None if unknown."""
    files = getattr(source, "files", None)
    if files is None and (groups := getattr(source, "groups", None)) is not None:
        files = [p for group in groups for p in group]
    if not files:
        return None
    try:
        return sum(Path(p).stat().st_size for p in files)
    except (OSError, TypeError):
        return None


#: Counters worth a word on the summary line when non-zero.
_NOT_SENT = ("gaps", "fill_frames", "truncated_blocks", "truncated_bytes", "truncated",
             "not_udp", "other_port", "fragments", "snapped", "gap_samples",
             "tail_samples")  # fmt: skip


def open_source(args: argparse.Namespace) -> Source:
    """The Source the command line names: a scan on --dirs, or files."""
    if args.dirs:
        if len(args.inputs) != 1:
            raise ConfigError(
                f"with --dirs give one scan name, not {len(args.inputs)} inputs "
                f"({' '.join(args.inputs)})"
            )
        return scan_source(layouts.find_recording(args.dirs, args.inputs[0]), args)
    return file_source([Path(p) for p in args.inputs], args)


def _packet_len(args: argparse.Namespace, first: Path, manifest_len: int | None) -> int:
    if args.packet_len:
        return int(args.packet_len)
    if manifest_len:
        return manifest_len
    if args.format:
        return _format(args).packet_len
    n = vdif_frame_len(first)
    if n is None:
        raise ConfigError(
            f"cannot tell the packet length of {first}: give --packet-len (or --format); "
            "only VDIF frames state their own length"
        )
    return n


def file_source(paths: list[Path], args: argparse.Namespace) -> Source:
    for p in paths:
        if not p.is_file():
            hint = " (a scan name needs --dirs)" if not p.exists() else ""
            raise ConfigError(f"{p} is not a file{hint}")
    pcap = [is_pcap(p) for p in paths]
    if any(pcap):
        if not all(pcap):
            raise ConfigError("give pcap files or raw packet files, not both at once")
        return PcapFiles(paths, port=args.pcap_port, source_port=args.pcap_source_port)
    if any(_is_dada(p) for p in paths):
        if len(paths) != 1:
            raise ConfigError("give one DADA file (the first of an observation's files: "
                              "the ones that follow it are sent after it)")  # fmt: skip
        if args.format not in (None, "vdif"):
            raise ConfigError(f"--format {args.format}: a DADA file is sent as VDIF frames "
                              "(fold --listen, record and capture take them)")  # fmt: skip
        from voltstream.replay.dada_file import DadaFile

        return DadaFile(paths[0])
    return PacketFiles(paths, _packet_len(args, paths[0], None),
                       frames_per_second=args.frames_per_second)  # fmt: skip


def _is_dada(path: Path) -> bool:
    """A DADA file, by its header (PSRDADA's may start with comment lines)."""
    from voltstream.io.dada import is_dada_header

    if path.suffix == ".dada":
        return True
    try:
        with open(path, "rb") as f:
            return is_dada_header(f.read(4096))
    except OSError:
        return False


def scan_source(rec: layouts.Recording, args: argparse.Namespace) -> Source:
    fps = args.frames_per_second or layouts.manifest_frames_per_second(rec)
    files = rec.files
    if rec.layout == "mark6":
        return Mark6Files([f.path for f in files], frames_per_second=fps)
    if rec.layout == "vbs":
        files = sorted(files, key=lambda f: f.number)
        gaps = files[-1].number + 1 - len(files)
        plen = _packet_len(args, files[0].path, layouts.manifest_int(rec, "packet_len"))
        return PacketFiles([f.path for f in files], plen, kind="vbs", gaps=gaps,
                           frames_per_second=fps)  # fmt: skip
    by_number: dict[int, list[Path]] = defaultdict(list)
    by_stream: dict[int, list[Path]] = defaultdict(list)
    for f in sorted(files, key=lambda f: (f.number, f.stream)):
        by_number[f.number].append(f.path)
        by_stream[f.stream].append(f.path)
    if rec.layout == "vdif":
        frame_len = vdif_frame_len(files[0].path)
        if frame_len is None:
            raise FormatError(f"{files[0].path} does not start with a VDIF frame header")
        numbers = sorted(by_number)
        gaps = numbers[-1] + 1 - len(numbers)
        return VdifStreams([by_number[n] for n in numbers], frame_len, gaps=gaps,
                           send_fill=args.send_fill, frames_per_second=fps)  # fmt: skip
    from voltstream.replay.dada_source import DadaStreams

    if not args.format:
        raise ConfigError(
            "a DADA scan holds samples, not packets: name the packets to rebuild with "
            "--format vdif|ynao (and its options: --vdif-payload, --bits...)"
        )
    return DadaStreams(dict(by_stream), lambda *geometry: _format(args, *geometry))


def _format(
    args: argparse.Namespace,
    nchan: int | None = None,
    npol: int | None = None,
    chan_bw: float | None = None,
    freq: float | None = None,
) -> Any:
    """The --format packet format; the DADA headers fill what the options leave out."""
    from voltstream.formats import make_format

    if args.vdif_threads == "auto":
        raise ConfigError("--vdif-threads auto learns a live stream; give the thread ids")
    return make_format(
        args.format,
        nchan=args.nchan or (nchan if args.format == "vdif" else None),
        chan_bw_mhz=args.chan_bw if args.chan_bw is not None else (chan_bw or 4.0),
        freq_mhz=args.freq if args.freq is not None else (freq or 1420.0),
        vdif_payload=args.vdif_payload,
        npol=npol or args.npol,
        bits=args.bits,
        station=args.station,
        vdif_threads=args.vdif_threads,
    )
