"""What `voltstream run PIPELINE.toml` would refuse once started, found before it
starts: the disks of [record], the files the file names (a polyco, a par file, a
stream description), the folders its outputs go to, and the addresses it listens on.

``pipeline_file.py`` checks the file itself (every key, which sections go
together); this module checks the file against the machine, so that ``run --check``
calling a file valid means ``run`` starts. ``run`` asks the same before it starts,
so a problem is reported the same way, by key and line, in either.
"""

from __future__ import annotations

import socket
from pathlib import Path

from voltstream.config_files import key_lines, line_of, problems_text
from voltstream.errors import ConfigError, FormatError
from voltstream.pipeline_file import DescribedStream, PipelineFile

Problem = tuple[tuple[str, ...], str]


def check_machine(pf: PipelineFile, path: str | Path) -> None:
    """Raises one ConfigError naming every problem by key and line (none: returns)."""
    if problems := machine_problems(pf):
        lines = key_lines(Path(path).read_text())
        raise ConfigError(problems_text(str(path), problems, lambda loc: line_of(lines, loc)))


def machine_problems(pf: PipelineFile) -> list[Problem]:
    """Everything of ``pf`` this machine would refuse, each at its key."""
    from voltstream.record.layouts import disk_problems

    problems: list[Problem] = []
    if pf.record is not None:
        for text in disk_problems(pf.record.dirs, pf.record.scan, pf.record.layout):
            problems.append((("record", "dirs"), text))
    readable = []
    if pf.fold is not None:
        readable += [(("fold", k), getattr(pf.fold, k)) for k in ("polyco", "par")]
    for loc, name in readable:
        if name is not None and not Path(name).is_file():
            problems.append((loc, f"{name} is not a file"))
    if isinstance(pf.stream, DescribedStream):
        from voltstream.streams import load_stream

        try:
            load_stream(pf.stream.description)
        except (ConfigError, FormatError) as e:
            problems.append((("stream", "description"), str(e)))
    outputs = [(("run", "report"), pf.run.report)]
    if pf.fold is not None:
        outputs += [(("fold", "output"), pf.fold.output), (("fold", "plot"), pf.fold.plot)]
    if pf.dada is not None:
        outputs.append((("dada", "output"), pf.dada.output))
    for loc, name in outputs:
        if name is not None and not Path(name).absolute().parent.is_dir():
            folder = Path(name).absolute().parent
            problems.append((loc, f"{name}: its folder {folder} does not exist"))
    if pf.engine.kind != "dpdk":  # a DPDK port's address is not the kernel's
        if why := _cannot_bind(pf.network.bind, socket.SOCK_DGRAM):
            problems.append((("network", "bind"), why))
    if pf.metrics is not None and (why := _cannot_bind(pf.metrics.listen, socket.SOCK_STREAM)):
        problems.append((("metrics", "listen"), why))
    return problems


def _cannot_bind(address: str, kind: socket.SocketKind) -> str | None:
    """Why HOST:PORT cannot be listened on now (in use, not this machine's), or None."""
    host, _, port = address.rpartition(":")
    host = host.strip("[]")
    try:
        infos = socket.getaddrinfo(host, int(port), type=kind)
    except (OSError, ValueError) as e:
        return f"cannot listen on {address}: {e}"
    family, _, _, _, where = infos[0]
    with socket.socket(family, kind) as s:
        if kind == socket.SOCK_STREAM:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(where)
        except OSError as e:
            return f"cannot listen on {address}: {e.strerror or e}"
    return None
