"""`voltstream run PIPELINE.toml`, and `voltstream run --print-config VERB ARGS...`.

Every verb that captures (capture, record, fold --listen, fengine) is a special case
of a pipeline file, and a pipeline file is a command line of one of them: running a
file builds the namespace argparse would have built for that verb (its defaults,
then the file's values) and calls the verb's own function in ``commands.py``. The
file and the command line share one code path; only the translation is here, both
ways (``verb_args``: file to command line; ``config_of``: command line to file).
Record and fold together is fold's path with the recording's options (``args.record``).
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from pydantic import BaseModel

from voltstream.errors import ConfigError
from voltstream.pipeline_file import (
    DadaSection,
    DescribedStream,
    FEngineSection,
    FoldSection,
    PipelineFile,
    RecordSection,
    SampleStream,
    load_pipeline,
    parse_pipeline,
)

__all__ = [
    "config_of",
    "finish_recording",
    "print_config",
    "start_recording",
    "verb_args",
    "verb_of",
]

#: The verbs a pipeline file can be, and the section holding each one's own options.
VERB_SECTIONS: dict[str, type[BaseModel]] = {
    "capture": DadaSection,
    "record": RecordSection,
    "fold": FoldSection,
    "fengine": FEngineSection,
}


#: Options of the command line before its verb, which a pipeline run keeps.
GLOBAL_OPTIONS = ("log_format", "log_level", "max_loss", "no_progress")


def _verb_defaults(verb: str) -> argparse.Namespace:
    """The namespace argparse gives `voltstream VERB` before any option: every
    option's default (a required one: None)."""
    from voltstream.cli.parser import build_parser

    parser = build_parser()
    # argparse keeps its subcommands' parsers in the subparsers action's choices.
    (verbs,) = (a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    sub = verbs.choices[verb]
    # The global options (given before the verb: logs, --max-loss) and the verb's own.
    defaults = {
        a.dest: a.default
        for a in [*parser._actions, *sub._actions]
        if a.dest not in ("help", "verb") and a.default is not argparse.SUPPRESS
    }
    defaults.pop("version", None)
    return argparse.Namespace(verb=verb, version=False, **defaults)


def _section_to_args(args: argparse.Namespace, section: Any) -> None:
    for name in type(section).model_fields:
        value = getattr(section, name)
        if name == "status":
            args.no_status = not value
        else:
            setattr(args, name, value)


def verb_args(pf: PipelineFile) -> argparse.Namespace:
    """The command line `pf` means: its verb's namespace, as argparse would give it,
    with the file's values, and ``capture_settings`` (the file's capture sections
    whole: every key, even those no flag has)."""
    verb = pf.verb()
    args = _verb_defaults(verb)
    args.listen = ",".join([pf.network.bind, *pf.network.more_binds])
    args.capture_settings = pf.capture_settings()
    _capture_options(args, pf)
    args.duration = pf.run.duration if pf.run.duration is not None else args.duration
    args.idle_timeout, args.report = pf.run.idle_timeout, pf.run.report
    if verb != "fengine":
        if isinstance(pf.stream, SampleStream):
            for name in SampleStream.model_fields:
                setattr(args, name, getattr(pf.stream, name))
        elif isinstance(pf.stream, DescribedStream):
            args.stream = pf.stream.description
        else:
            args.stream = pf.stream  # a description held in the file
    section = getattr(pf, {"capture": "dada"}.get(verb, verb))
    if section is not None:
        _section_to_args(args, section)
    if verb == "fold" and pf.record is not None:
        args.record = pf.record.model_dump()
    if verb == "fengine" and pf.katcp is not None:
        args.katcp_host, args.katcp_port = pf.katcp.host, pf.katcp.port
    # For the metrics server (another part of issue 13): validated, passed on.
    args.metrics_listen = pf.metrics.listen if pf.metrics is not None else None
    return args


def _capture_options(args: argparse.Namespace, pf: PipelineFile) -> None:
    """The capture flags the verb has, from the file's sections (the verbs read the
    sections whole, ``capture_settings``; these keep the namespace argparse's)."""
    values = {
        "engine": pf.engine.kind, "window": pf.chunks.window, "threads": pf.threads.count,
        "cpus": pf.threads.cpus, "multicast": pf.network.multicast or None,
        "interface": pf.network.interface, "dpdk_port": pf.engine.dpdk_port,
        "dpdk_eal_args": pf.engine.dpdk_eal_args, "flush_age": pf.chunks.flush_age_s,
        "ring_mb": int(pf.network.queue_mb) if pf.network.queue_mb.is_integer() else None,
    }  # fmt: skip
    # fold sizes a GPU capture's chunks itself unless the file says.
    if args.verb != "fold" or "packets_per_chunk" in pf.chunks.model_fields_set:
        values["packets_per_chunk"] = pf.chunks.packets_per_chunk
    for name, value in values.items():
        if hasattr(args, name):
            setattr(args, name, value)


def config_of(argv: list[str]) -> dict[str, Any]:
    """The pipeline file a command line (`VERB ARGS...`) means, as a dict of tables."""
    from voltstream.cli.common import _capture_settings
    from voltstream.cli.parser import build_parser

    if not argv or argv[0] not in VERB_SECTIONS:
        raise ConfigError(
            f"--print-config takes a command line of {', '.join(VERB_SECTIONS)}, "
            f"got {' '.join(argv) or 'nothing'}"
        )
    args = build_parser().parse_args(argv)
    verb = args.verb
    if verb == "record" and args.repair:
        raise ConfigError("record --repair mends a scan; it is not a pipeline")
    if verb == "fold" and not args.listen:
        raise ConfigError("fold of a file is not a pipeline: give fold --listen HOST:PORT")
    if verb == "fold":
        from voltstream.cli.stream_options import fold_stream_options

        fold_stream_options(args)  # the fold's [stream] is the format options
    config: dict[str, Any] = _capture_settings(args, args.listen).model_dump()
    if verb == "fold" and args.packets_per_chunk is None:
        del config["chunks"]["packets_per_chunk"]  # unset: fold sizes a GPU's chunks
    if verb != "fengine":
        config["stream"] = _stream_of(args)
    config["run"] = {k: getattr(args, n) for k, n in
                     (("duration", "duration"), ("idle_timeout", "idle_timeout"),
                      ("report", "report"))}  # fmt: skip
    section_type = VERB_SECTIONS[verb]
    if verb != "capture" or args.output:
        config[{"capture": "dada"}.get(verb, verb)] = {
            name: (not args.no_status) if name == "status" else getattr(args, name)
            for name in section_type.model_fields
            if name != "forward_chunks"
        }
    if verb == "fengine" and args.katcp_port is not None:
        config["katcp"] = {"host": args.katcp_host, "port": args.katcp_port}
    return config


def _stream_of(args: argparse.Namespace) -> dict[str, Any]:
    if getattr(args, "stream", None):  # fold's is its format options by now
        return {"description": args.stream}
    if args.format not in ("ynao", "vdif"):  # spead-dig: its defaults
        return {"format": args.format}
    return {name: getattr(args, name) for name in SampleStream.model_fields}


def print_config(argv: list[str]) -> int:
    """Prints the pipeline file of a command line, validated as `run` would."""
    from voltstream.config_files import to_toml

    text = to_toml(config_of(argv))
    parse_pipeline(text, "the printed configuration")  # what run would accept
    print(f"# voltstream run: the pipeline of `voltstream {' '.join(argv)}`\n" + text, end="")
    return 0


def verb_of(args: argparse.Namespace) -> argparse.Namespace | int:
    """`voltstream run`: the file validated whole and turned into its verb's command
    line (a namespace, which ``commands.run`` hands to the verb), or the exit status
    of what needs no verb (``--check``, ``--print-config``)."""
    if args.print_config is not None:
        return print_config(args.print_config)
    if not args.pipeline:
        raise ConfigError("give a PIPELINE.toml (or --print-config VERB ARGS...)")
    pf = load_pipeline(args.pipeline)
    # What this machine would refuse once the run started (disks, files, folders,
    # addresses): found now, by --check as by the run itself.
    from voltstream.cli.pipeline_check import check_machine

    check_machine(pf, args.pipeline)
    if args.check:
        print(f"{args.pipeline}: a valid {pf.verb()} pipeline"
              + (" with a recording" if pf.verb() == "fold" and pf.record else ""))  # fmt: skip
        return 0
    verb_ns = verb_args(pf)
    # As given to `run`: logs, --max-loss, progress, and the run's signal handling.
    for name in (*GLOBAL_OPTIONS, "shutdown"):
        if hasattr(args, name):
            setattr(verb_ns, name, getattr(args, name))
    return verb_ns


def start_recording(args: argparse.Namespace, fmt: Any, settings: Any) -> Any:
    """The recording a fold takes its chunks from: ``args.record`` holds record's
    options. The pool gets room for everything that may hold a chunk (the reorder
    window, the writers' queues, the forward stage, the fold's timeline), so that
    neither consumer takes the capture's free chunks."""
    from voltstream.cli.common import record_settings
    from voltstream.record import Recording

    rs = record_settings(args.record)
    window = settings.chunks.window_for(None, getattr(fmt, "packets_per_second", None))
    # The end of a stream flushes the whole window at once: the forward stage holds it.
    forward = max(args.record["forward_chunks"], window + 4)
    held = window + len(rs.dirs) * rs.queue_chunks + 2 * forward
    settings = settings.replace(nchunks=max(settings.chunks.nchunks, held + 8))
    recording = Recording(fmt, settings, rs, forward_chunks=forward)
    print(f"fold: recording scan {rs.scan} ({recording.layout}) -> {', '.join(rs.dirs)}, "
          "folding each chunk once written", file=sys.stderr, flush=True)  # fmt: skip
    return recording


def finish_recording(
    recording: Any, report: Any, archive: Any, snr: float, path: str | None
) -> None:
    """The end of a fold after a recording: both summaries, one report with every
    counter (the capture's, the recorder's, what the fold received)."""
    from voltstream import record as rec

    recorded = recording.finish()
    for line in rec.summary_lines(recorded):
        print(line)
    r = recorded["record"]
    print(
        f"  fold: took {report.chunks} blocks ({report.samples_written} samples) of the "
        f"chunks written; {r['chunks_forwarded']} passed on to it, "
        f"{r['chunks_not_forwarded']} not (it was behind)"
    )
    if path:
        rec.write_report(
            {
                "record": recorded,
                "fold": {
                    "chunks": report.as_dict(),
                    "nsub": archive.nsub,
                    "snr": snr,
                    "excluded_samples": archive.excluded_samples,
                },
            },
            path,
        )
