"""The command line's vocabulary: one place for every option that several verbs share.

One name per concept across verbs (``--engine``, ``--rate``, ``--duration``,
``--idle-timeout``, ``--report``, ``--threads``/``--cpus``, ``--ring-mb``,
``--no-status``) and the argparse types behind them. Old spellings stay as hidden
aliases for one release (``fengine --capture-engine``, ``--rate-gbps``).
``format_from(args)`` builds the stream format the format options describe; the
verbs (``voltstream.cli.commands``) import it from here, not from ``cli``.
"""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from voltstream.digitiser import DIG_IDS, SAMPLE_RATE_HZ, SAMPLE_WIDTH, SAMPLES_PER_HEAP
from voltstream.errors import ConfigError
from voltstream.fold.limits import MAX_NBIN  # noqa: F401 - the options' bound, here too

if TYPE_CHECKING:  # formats imports numpy; the parser is built without it
    from voltstream.formats import StreamFormat


def int_list(what: str) -> Callable[[str], list[int]]:
    """An argparse type: comma-separated whole numbers >= 0 (``what`` names them)."""

    def parse(text: str) -> list[int]:
        try:
            values = [int(c) for c in text.split(",")]
        except ValueError:
            values = []
        if not values or min(values) < 0:
            raise argparse.ArgumentTypeError(f"expected {what} like 2,3; got {text!r}")
        return values

    return parse


cpu_list = int_list("CPU numbers")


def seconds_list(text: str) -> list[float]:
    """An argparse type: comma-separated finite times in seconds, >= 0 (simulate
    --burst-times)."""
    try:
        values = [float(c) for c in text.split(",")]
    except ValueError:
        values = []
    if not values or not all(math.isfinite(v) and v >= 0 for v in values):
        raise argparse.ArgumentTypeError(f"expected times in seconds like 0.1,0.35; got {text!r}")
    return values


def dir_list(text: str) -> list[str]:
    """DIR[,DIR...]: the disks of a recording (record --dirs, replay --dirs)."""
    return [d for d in text.split(",") if d]


def threads_arg(text: str) -> str | list[int]:
    return "auto" if text == "auto" else int_list("VDIF thread ids")(text)


def host_port(text: str, free_port: bool = False) -> str:
    """HOST:PORT; with ``free_port``, port 0 too (the kernel picks one)."""
    host, sep, port = text.rpartition(":")
    lowest = 0 if free_port else 1
    if not sep or not host or not port.isdigit() or not lowest <= int(port) < 65536:
        raise argparse.ArgumentTypeError(f"expected HOST:PORT (e.g. 127.0.0.1:7000), got {text!r}")
    return text


def listen_addresses(text: str) -> list[str]:
    """``--listen``: HOST:PORT, several comma-separated, or HOST:PORT+N (N + 1
    consecutive ports): the addresses of one band's streams, in stream order."""
    out = []
    for item in text.split(","):
        item = item.strip()
        base, plus, more = item.partition("+")
        if plus and not more.isdigit():
            raise argparse.ArgumentTypeError(f"expected HOST:PORT+N (N a count), got {item!r}")
        host_port(base)
        host, _, port = base.rpartition(":")
        for k in range(int(more) + 1 if plus else 1):
            out.append(host_port(f"{host}:{int(port) + k}"))
    if len(set(out)) != len(out):
        raise argparse.ArgumentTypeError(f"{text!r} lists an address twice")
    return out


def listen_option(text: str) -> str:
    """``--listen`` as argparse checks it: the text, kept as given (see
    ``listen_addresses``)."""
    listen_addresses(text)
    return text


def host_ports(text: str) -> str:
    """HOST:PORT[,HOST:PORT...]: each checked as ``host_port``; the text is kept as
    given (a verb splits it: `simulate --subbands` sends one subband to each)."""
    for item in text.split(","):
        host_port(item.strip())
    return text


def loss_fraction(text: str) -> float:
    """``--max-loss``: a fraction from 0 to 1 (0: any loss fails the run)."""
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not 0.0 <= value <= 1.0:
        raise argparse.ArgumentTypeError(
            f"{text!r}: give a fraction from 0 to 1 (0.001 = 0.1 %; 0 = any loss fails)"
        )
    return value


def finite(
    kind: Any,
    lo: float | None = None,
    hi: float | None = None,
    *,
    above: bool = False,
    nonzero: bool = False,
) -> Callable[[str], Any]:
    """An argparse type: a finite number of ``kind`` (int or float) from ``lo`` to ``hi``
    (either open-ended when None; ``above``: strictly greater than ``lo``; ``nonzero``:
    not 0). NaN, inf and values out of range are refused before any work starts, with
    one line naming the bound (argparse adds the option's name)."""
    if lo is None:
        limit = "" if hi is None else f"at most {hi:g}"
    else:
        limit = f"{'above' if above else 'at least'} {lo:g}"
        if hi is not None:
            limit = f"from {lo:g} to {hi:g}" if not above else f"{limit} and at most {hi:g}"
    what = "a whole number" if kind is int else "a finite number"
    wanted = " ".join(w for w in (what, limit, "other than 0" if nonzero else "") if w)
    if lo == 0 and above and hi is None and not nonzero:
        wanted = f"positive ({wanted})"

    def parse(text: str) -> Any:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {wanted}, got {text!r}") from None
        ok = math.isfinite(value) and (not nonzero or value != 0)
        if lo is not None:
            ok = ok and (value > lo if above else value >= lo)
        if hi is not None:
            ok = ok and value <= hi
        if not ok:
            raise argparse.ArgumentTypeError(f"must be {wanted}, got {text}")
        return value

    parse.__name__ = kind.__name__  # argparse names the type in its messages
    return parse


def positive(kind: Any) -> Callable[[str], Any]:
    """An argparse type: a finite number above 0 (NaN and inf refused)."""
    return finite(kind, 0, above=True)


#: One option as a table row: (flag, type, default, help), or with its choices last.
Option = tuple[Any, ...]


def add_verb(verbs: Any, name: str, help: str, description: str, epilog: str | None = None) -> Any:
    """The parser of a verb whose description (and epilog) are laid out by hand:
    examples and tables keep their line breaks and indents in ``--help``."""
    return verbs.add_parser(
        name,
        help=help,
        description=description,
        epilog=epilog,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )


def add_options(g: Any, options: Sequence[Option]) -> None:
    """Options of the common kind (a flag that takes a value, its type, default and help,
    maybe its choices) declared as a table, so a verb's options read as a list of what
    differs between them; anything else (required, actions, aliases) is declared alone."""
    for flag, kind, default, text, *choices in options:
        extra = {"choices": choices[0]} if choices else {}
        g.add_argument(flag, type=kind, default=default, help=text, **extra)


def add_format_options(p: argparse.ArgumentParser, extra_formats: Sequence[str] = ()) -> None:
    g = p.add_argument_group("stream format")
    more = (
        "; spead-dig: MeerKAT digitiser heaps of real samples for `voltstream fengine` "
        "(options below)"
        if "spead-dig" in extra_formats
        else ""
    )
    if "codif" in extra_formats:
        more = (
            "; spead-dig: MeerKAT digitiser heaps (its defaults, or --stream FILE); codif, "
            "spead, counter, layout: described by --stream FILE.toml (docs/formats.md)"
        )
    add_options(g, (
        ("--format", None, "ynao",
         "packet format: the YNAO/ROACH2 frame (32 channels x 2 pols x 64 "
         f"spectra) or VDIF (8-bit complex, one thread per pol){more}. Default: ynao",
         ("ynao", "vdif", *extra_formats)),
        ("--nchan", positive(int), None,
         "channels (VDIF only; the YNAO frame always has 32). Default: 32"),
        ("--chan-bw", finite(float, nonzero=True), None,
         "channel width in MHz, negative for a lower sideband. Default: 4.0 "
         "(for a VDIF file: from its .json sidecar)"),
        ("--freq", positive(float), None,
         "centre frequency of the band in MHz. Default: 1420.0 "
         "(for a VDIF file: from its .json sidecar)"),
        ("--vdif-payload", positive(int), 8000,
         "VDIF data bytes per frame (multiple of 8, whole samples). Default: 8000"),
        ("--station", station, None,
         "VDIF station id to accept (a number, or two ASCII characters such as Ef); "
         "frames of any other station are counted foreign and never placed. Default: any"),
        ("--npol", int, None,
         "VDIF polarisations: --vdif-threads lists NPOL threads (one per polarisation) for "
         "each block of channels, the blocks side by side in the band (4 threads with "
         "--npol 1: 4 subbands of one pol; with --npol 2: 2 subbands, threads A,B of the "
         "first). Default: 2 without --vdif-threads; else 1 or 2 threads are the "
         "polarisations, more are subbands of one", (1, 2)),
        ("--vdif-threads", threads_arg, None,
         "VDIF thread ids, in pol order (e.g. 3 with --npol 1, or 4,5), then block by "
         "block of channels (--npol); frames of other threads are counted foreign. "
         "'auto' (live only): learnt from the first 512 frames (waiting up to "
         "--idle-timeout, at most 30 s) before the capture opens (those are not captured), "
         "ascending. For a VDIF file (fold): the threads to fold, the others "
         "left out. Default: 0 (and 1); a file's threads"),
        ("--bits", int, 8,
         "VDIF bits per real/imaginary part: 8 (offset binary), 4, 2 (the VDIF 2-bit "
         "levels), 1 (the sign) or 16. 2 and 4 bits fold on the GPU straight from the "
         "packets; 1 and 16 fold live on the CPU only. Default: 8",
         (1, 2, 4, 8, 16)),
    ))  # fmt: skip


def add_no_status(group: Any) -> None:
    group.add_argument(
        "--no-status",
        action="store_true",
        help="do not print the one-line status (Gb/s in and processed, pool fill, losses, "
        "GPU busy) every second on stderr",
    )


def add_engine(g: Any, alias: str | None = None) -> None:
    """``--engine``: the capture engine (``alias``: an old spelling, hidden)."""
    g.add_argument(
        "--engine",
        choices=ENGINES,
        default="auto",
        help="capture engine: packet_ring (AF_PACKET TPACKET_V3 ring, needs CAP_NET_RAW), "
        "socket (recvmmsg batches), xdp (AF_XDP with our XDP program, needs root; not "
        "tried by auto, see docs/architecture.md), dpdk (rte_eth_rx_burst; only in a build "
        "with the dpdk feature, see `capture --dpdk-port`; not tried by auto), or auto = "
        "packet_ring then socket. Default: auto",
    )
    if alias:
        _hidden_alias(g, alias, "engine", choices=ENGINES)


ENGINES = ("auto", "packet_ring", "socket", "xdp", "dpdk")


class _Deprecated(argparse.Action):
    """An old spelling of an option: stores to the new one's destination and says, once
    per run, which name to use instead (printed at parse time: logging is not set up yet)."""

    def __init__(self, *args: Any, new: str, **kw: Any) -> None:
        self.new = new
        super().__init__(*args, **kw)

    def __call__(self, parser: Any, ns: Any, values: Any, option: str | None = None) -> None:
        setattr(ns, self.dest, True if self.nargs == 0 else values)
        print(f"voltstream: {option} is an old name: use {self.new} (the old one goes "
              "in a later release)", file=sys.stderr)  # fmt: skip


def _hidden_alias(g: Any, flag: str, dest: str, **kw: Any) -> None:
    """An old spelling of an option: same destination, not in --help, a deprecation line
    when used (docs/cli.md lists the old names)."""
    new = "--" + dest.replace("_", "-")
    g.add_argument(flag, dest=dest, default=argparse.SUPPRESS, help=argparse.SUPPRESS,
                   action=_Deprecated, new=kw.pop("new", new), **kw)  # fmt: skip


def add_alias(g: Any, flag: str, of: argparse.Action, **kw: Any) -> None:
    """``flag``, an old name of the option ``of`` (hidden, with a deprecation line)."""
    new = max(of.option_strings, key=len)
    if of.required:  # either name satisfies it: Parser checks after parsing
        of.required = False
        of.required_by_name = True  # type: ignore[attr-defined]
    if of.nargs == 0:
        kw["nargs"] = 0
    else:
        kw.setdefault("type", of.type)
        if of.choices is not None:
            kw.setdefault("choices", of.choices)
    _hidden_alias(g, flag, of.dest, new=new, **kw)


class Parser(argparse.ArgumentParser):
    """argparse with the house's errors: one line naming the problem and where the help
    is, not a wall of usage (``voltstream VERB --help`` has that)."""

    def parse_known_args(self, args: Any = None, namespace: Any = None) -> Any:
        ns, rest = super().parse_known_args(args, namespace)
        for action in self._actions:
            if getattr(action, "required_by_name", False) and getattr(ns, action.dest) is None:
                self.error(f"the following arguments are required: {action.option_strings[0]}")
        return ns, rest

    def error(self, message: str) -> Any:  # argparse's signature: NoReturn
        self.exit(2, f"{self.prog}: error: {message} (`{self.prog} --help` lists every option)\n")


def add_run(g: Any, *, what: str, duration: float | None = None, required: bool = False,
            report: str = "write the run report (every counter) as JSON here") -> None:  # fmt: skip
    """``--duration``, ``--idle-timeout`` and ``--report`` of a long-running verb."""
    if required:
        g.add_argument("--duration", type=positive(float), required=True,
                       help=f"seconds to {what}")  # fmt: skip
    else:
        until = "until Ctrl-C" if duration is None else f"{duration:g}"
        g.add_argument("--duration", type=positive(float), default=duration,
                       help=f"seconds to {what}. Default: {until}")  # fmt: skip
    add_options(g, (
        ("--idle-timeout", positive(float), None,
         "stop early after this many seconds without packets (counted from the start "
         "until the first packet: a run that receives nothing ends then too, status 3)"),
        ("--report", None, None, report),
    ))  # fmt: skip


def add_capture_threads(g: Any, threads_help: str) -> None:
    """``--threads`` and ``--cpus`` of a capture."""
    add_options(g, (
        ("--threads", positive(int), 1, threads_help),
        ("--cpus", cpu_list, None,
         "CPU of each capture thread, comma-separated (e.g. 2,3); pins the threads "
         "(the verb's Python keeps off them)"),
    ))  # fmt: skip
    g.add_argument(
        "--spread", choices=("auto", "streams", "chunks"), default=None,
        help="how several capture threads share the packets: each owns whole streams, or "
        "they take turns by chunk (chunk c to thread c mod N, steered in the kernel by "
        "packet index: one stream on several cores). Default: auto = streams when the "
        "format has at least as many streams as threads and says where their ids are "
        "(VDIF threads, CODIF), else chunks (YNAO, one flow)",
    )  # fmt: skip


def add_device(g: Any, what: str) -> None:
    """``--device``: where a product runs (``voltstream.device``), the same for all."""
    help = (f"{what}: the GPU (CUDA + CuPy), the CPU (NumPy float64 reference), or auto = "
            "the GPU when one is usable. Default: auto")  # fmt: skip
    g.add_argument("--device", choices=("auto", "gpu", "cpu"), default="auto", help=help)


def add_digitiser(g: Any, *, dig_ids: str, sample_rate: str | None) -> None:
    """The digitiser stream (MeerKAT SPEAD heaps): ``--sample-bits``,
    ``--samples-per-heap``, ``--dig-ids`` (``dig_ids``: what the ids do for this verb),
    and ``--sample-rate-hz`` unless ``sample_rate`` is None (its use here)."""
    ids = ",".join(str(i) for i in DIG_IDS)
    options = (
        ("--sample-bits", int, SAMPLE_WIDTH, "digitiser bits per sample: 8, 10, 12 or 16, "
         f"packed big-endian. Default: {SAMPLE_WIDTH} (MeerKAT)"),
        ("--samples-per-heap", positive(int), SAMPLES_PER_HEAP, "samples per digitiser heap "
         f"(one packet each; a multiple of 4). Default: {SAMPLES_PER_HEAP}"),
        ("--dig-ids", str, ids, f"digitiser ids (item 0x3101) of pol 0 and pol 1{dig_ids}. "
         f"Default: {ids}"),
    )  # fmt: skip
    add_options(g, options)
    if sample_rate is not None:
        add_sample_rate(g, sample_rate)


def add_sample_rate(g: Any, use: str) -> None:
    help = f"digitiser sample rate, for {use}. Default: {SAMPLE_RATE_HZ / 1e6:g}e6 (MeerKAT L-band)"
    g.add_argument("--sample-rate-hz", type=positive(float), default=SAMPLE_RATE_HZ, help=help)


def add_chunk_pool(g: Any) -> None:
    """A live GPU stage's chunks and their pool (fold, filterbank; docs/cli.md)."""
    add_options(g, (
        ("--packets-per-chunk", positive(int), None,
         "packets per stream per chunk. Default: about 32 MiB chunks on the GPU, 256 on "
         "the CPU"),
        ("--buffer-mb", positive(float), 1024,
         "size of the capture's chunk pool in MiB (GPU): how long a stall of the GPU "
         "stage the capture rides out before it drops chunks (1024 MiB = 0.2 s at 40 Gb/s). "
         "Default: 1024"),
        ("--window", positive(int), None, "reorder window in chunks: how late a packet may "
         "come and still be placed. Default: 10 ms of the stream, at least 4096 packets or 100 ms"),
    ))  # fmt: skip


def add_ring_mb(g: Any) -> None:
    g.add_argument(
        "--ring-mb",
        type=positive(int),
        default=256,
        help="kernel-side buffer of the capture in MiB: the packet ring (or socket buffer, "
        "AF_XDP UMEM) that rides out a stalled capture thread. Default: 256",
    )


def add_rate(g: Any, default: float | None, help: str, alias: str | None = None) -> None:
    """``--rate``: a send rate in Gb/s (``alias``: an old spelling, hidden)."""
    g.add_argument("--rate", type=finite(float, 0), default=default, help=help)
    if alias:
        _hidden_alias(g, alias, "rate", type=finite(float, 0))


def station(text: str) -> int:
    """--station: a VDIF station id, as a number or as its two-character ASCII code."""
    from voltstream.formats import station_code

    code = station_code(text)
    if code is None:
        raise argparse.ArgumentTypeError(f"{text!r}: give a number or two ASCII characters (Ef)")
    return code


def groups(text: str) -> list[str]:
    """--multicast GROUP[,GROUP]: IPv4 multicast addresses."""
    import ipaddress

    groups = [g.strip() for g in text.split(",") if g.strip()]
    for g in groups:
        try:
            ok = ipaddress.IPv4Address(g).is_multicast
        except ValueError:
            ok = False
        if not ok:
            raise argparse.ArgumentTypeError(f"{g!r} is not an IPv4 multicast group")
    if not groups:
        raise argparse.ArgumentTypeError("no multicast group given")
    return groups


def format_from(args: argparse.Namespace, real: bool | None = None) -> StreamFormat:
    from voltstream.formats import make_format

    threads, npol = getattr(args, "vdif_threads", None), getattr(args, "npol", None)
    if threads == "auto":
        threads = learn_threads(args)
    return make_format(
        args.format,
        nchan=args.nchan,
        chan_bw_mhz=4.0 if args.chan_bw is None else args.chan_bw,
        freq_mhz=1420.0 if args.freq is None else args.freq,
        vdif_payload=args.vdif_payload,
        bits=getattr(args, "bits", 8),
        station=getattr(args, "station", None),
        npol=npol,
        vdif_threads=threads,
        real=getattr(args, "real", False) if real is None else real,
        legacy=getattr(args, "legacy", False),  # a stream description's (stream_options)
    )


#: The longest ``--vdif-threads auto`` waits for a first frame.
LEARN_WAIT_S = 30.0


def learn_threads(args: argparse.Namespace) -> list[int]:
    """``--vdif-threads auto``: the live stream's threads, ascending (polarisations and
    subbands by --npol, io/vdif_threads.py)."""
    from voltstream.capture.config import hold_port
    from voltstream.io.inspect import learn_vdif_threads

    bind = getattr(args, "bind", None) or getattr(args, "listen", None)
    if args.format != "vdif" or not bind:
        raise ConfigError(
            "--vdif-threads auto learns the threads of a live VDIF stream (capture --listen, "
            "fold --listen); give the thread ids otherwise"
        )
    # Wait for the stream as long as the run would: a sender started by hand (or on a
    # busy machine) may take seconds to begin; --idle-timeout bounds it, as a run's.
    wait = [t for t in (getattr(args, "idle_timeout", None), getattr(args, "duration", None)) if t]
    learnt = learn_vdif_threads(bind, getattr(args, "station", None),
                                timeout_s=min([*wait, LEARN_WAIT_S]))  # fmt: skip
    hold_port(learnt["socket"])  # bound until the capture takes the port
    threads = learnt["threads"]  # more than two: subbands unless --npol says
    print(
        f"VDIF threads {threads} of station {learnt['station']}, learnt from "
        f"{learnt['packets']} packets before the capture opened (not captured)",
        file=sys.stderr,
        flush=True,
    )
    return threads
