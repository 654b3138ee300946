"""docs/cli.md from the parser itself: every option of every verb listed once.

`python scripts/cli_doc.py` rewrites docs/cli.md; `--check` exits 1 when the file is
out of date (tests/test_cli_vocabulary.py runs the same comparison in CI).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from voltstream.cli import build_parser

DOC = Path(__file__).resolve().parents[1] / "docs" / "cli.md"

HEAD = """\
# The command line: one name for one idea

Generated from the parser by `python scripts/cli_doc.py` (tests/test_cli_vocabulary.py
fails when it is out of date). Every verb has `--help`, which says more.

The vocabulary, the same in every verb:

- `--listen HOST:PORT`: where a verb receives UDP (capture, record, fold, fengine,
  latency, inspect). `--dest HOST:PORT`: where it sends (simulate, replay, fengine).
- `-o/--output`: the file (the demo: the folder) a verb writes; `--report FILE`: its
  end-of-run report as JSON.
- `--duration S`: how long a verb runs at most; `--idle-timeout S`: stop after that
  long without a packet.
- `--threads N` and `--cpus A,B`: capture threads and the CPUs they are pinned to.
- `--engine`: the capture engine; `--ring-mb`: its kernel-side buffer.
- `--format` and its options (`--nchan`, `--bits`, `--npol`, ...): what the stream
  is. `--stream FILE.toml` describes any format instead.
- `--rate GBPS`: a send rate in Gb/s. `--device auto|gpu|cpu`: where a product runs.
- The options of a run as a service (`--log-format`, `--log-level`, `--max-loss`,
  `--no-progress`) may stand before or after the verb.

An old name still works for one release, with a line saying the new one: see
"Old names" at the end.
"""


def _subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:  # argparse keeps its verbs in this action's choices
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def options_by_name(
    parser: argparse.ArgumentParser,
) -> dict[str, list[tuple[str, argparse.Action]]]:
    """Every option string: the (verb, action) pairs that have it ("" for global ones)."""
    table: dict[str, list[tuple[str, argparse.Action]]] = {}
    for verb, sub in [("", parser), *_subparsers(parser).items()]:
        for action in sub._actions:
            if verb and action.default is argparse.SUPPRESS and action.dest in GLOBAL:
                continue  # the global options' copy after the verb
            for flag in action.option_strings:
                table.setdefault(flag, []).append((verb, action))
    return table


GLOBAL = ("log_format", "log_level", "max_loss", "no_progress")


def _meaning(action: argparse.Action) -> str:
    text = " ".join((action.help or "").split())
    for cut in (". Default:", "; Default:"):
        text = text.split(cut)[0]
    return text.replace("|", "\\|")


def render() -> str:
    parser = build_parser()
    table = options_by_name(parser)
    lines = [HEAD, "## Every option", "", "| option | verbs | meaning |", "|---|---|---|"]
    old = []
    for flag in sorted(table, key=lambda f: f.lstrip("-").lower()):
        if flag in ("-h", "--help") or not flag.startswith("--"):
            continue
        shown = [(v, a) for v, a in table[flag] if a.help != argparse.SUPPRESS]
        hidden = [(v, a) for v, a in table[flag] if a.help == argparse.SUPPRESS]
        if shown:
            verbs = ", ".join(v or "(any)" for v, _ in shown)
            short = [s for s in shown[0][1].option_strings if not s.startswith("--")]
            name = f"`{short[0]}`, `{flag}`" if short else f"`{flag}`"
            lines.append(f"| {name} | {verbs} | {_meaning(shown[0][1])} |")
        for verb, action in hidden:
            old.append(f"| `{flag}` | {verb} | `{getattr(action, 'new', '?')}` |")
    lines += ["", "## Old names", "", "| old | verb | use |", "|---|---|---|", *old, ""]
    return "\n".join(lines)


if __name__ == "__main__":
    text = render()
    if "--check" in sys.argv[1:]:
        sys.exit(0 if DOC.read_text() == text else 1)
    DOC.write_text(text)
