"""One name for one idea across every verb (issue 30, item 10), checked over the real
parser: docs/cli.md is what the parser says, each option means the same in every verb
that has it, old names are hidden aliases that say their new name, and errors are one
line, not a page of usage."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from cli_process import run_cli
from repo_script import load_script
from voltstream.cli import build_parser

ROOT = Path(__file__).resolve().parents[1]


def _cli_doc():
    return load_script("scripts/cli_doc.py")


#: Names that once meant what another name means: none may be a visible option.
OLD_NAMES = {
    "--bind": "--listen",
    "--idle": "--idle-timeout",
    "--timeout": "--duration",
    "--cpu": "--cpus",
    "--outdir": "--output",
    "--output-file": "--output",
    "--rate-gbps": "--rate",
    "--capture-engine": "--engine",
}


def test_docs_cli_md_is_the_parser_s_own_table():
    assert (ROOT / "docs" / "cli.md").read_text() == _cli_doc().render(), (
        "docs/cli.md is out of date: run python scripts/cli_doc.py"
    )


def test_no_verb_shows_an_old_name():
    table = _cli_doc().options_by_name(build_parser())
    for flag in OLD_NAMES:
        shown = [v for v, a in table.get(flag, []) if a.help != argparse.SUPPRESS]
        assert not shown, f"{flag} is visible in {shown}; it is {OLD_NAMES[flag]} now"


#: Options whose parsing differs by verb on purpose, and why.
PARSED_PER_VERB = {
    "--dest": "how many destinations a verb sends to: replay one, simulate one per "
    "subband, fengine one per substream with the A.B.C.D+N:PORT range",
    "--listen": "latency also takes port 0 (a free port, printed by --print-address)",
}


def test_one_option_means_one_thing_in_every_verb():
    """The same flag in several verbs stores to the same name and parses alike."""
    table = _cli_doc().options_by_name(build_parser())
    for flag, uses in table.items():
        shown = [(v, a) for v, a in uses if a.help != argparse.SUPPRESS]
        if len(shown) < 2 or flag in ("-h", "--help"):
            continue
        dests = {a.dest for _, a in shown}
        kinds = {getattr(a.type, "__qualname__", repr(a.type)) for _, a in shown}
        assert len(dests) == 1, f"{flag}: stored as {dests} in {[v for v, _ in shown]}"
        if flag not in PARSED_PER_VERB:
            assert len(kinds) == 1, f"{flag}: parsed as {kinds} in {[v for v, _ in shown]}"


def test_threads_and_bits_keep_their_one_meaning():
    """Before: latency --threads was GPU threads per block and fengine --bits the output
    width, beside --threads (capture threads) and --bits (VDIF bits) elsewhere."""
    table = _cli_doc().options_by_name(build_parser())
    assert "latency" not in [v for v, a in table["--threads"] if a.help != argparse.SUPPRESS]
    assert "fengine" not in [v for v, a in table["--bits"] if a.help != argparse.SUPPRESS]


@pytest.mark.parametrize(
    ("old", "new"),
    [
        (["capture", "--bind", "127.0.0.1:7000", "--duration", "1"],
         ["capture", "--listen", "127.0.0.1:7000", "--duration", "1"]),
        (["latency", "--listen", "127.0.0.1:0", "--cpu", "3", "--idle", "2", "--threads", "64"],
         ["latency", "--listen", "127.0.0.1:0", "--cpus", "3", "--idle-timeout", "2",
          "--block-threads", "64"]),
        (["fengine", "--listen", "127.0.0.1:7148", "--output-file", "x", "--bits", "4"],
         ["fengine", "--listen", "127.0.0.1:7148", "-o", "x", "--output-bits", "4"]),
        (["inspect", "--listen", "127.0.0.1:7000", "--timeout", "2"],
         ["inspect", "--listen", "127.0.0.1:7000", "--duration", "2"]),
        (["demo", "--outdir", "d"], ["demo", "-o", "d"]),
        (["replay", "x.pcap", "--dest", "127.0.0.1:1", "--bind", "127.0.0.1:2", "--port", "5",
          "--source-port", "6"],
         ["replay", "x.pcap", "--dest", "127.0.0.1:1", "--send-from", "127.0.0.1:2",
          "--pcap-port", "5", "--pcap-source-port", "6"]),
    ],
)  # fmt: skip
def test_an_old_name_still_works_and_says_the_new_one(old, new, capsys):
    assert vars(build_parser().parse_args(old)) == vars(build_parser().parse_args(new))
    err = capsys.readouterr().err
    for flag in (f for f in old if f in OLD_NAMES or f in ("--threads", "--bits", "--port",
                                                           "--source-port", "--bind")):  # fmt: skip
        assert f"{flag} is an old name: use" in err


def test_run_options_after_the_verb_as_before_it():
    before = build_parser().parse_args(["--max-loss", "0.1", "--log-level", "warning",
                                        "inspect", "x.vdif"])  # fmt: skip
    after = build_parser().parse_args(["inspect", "x.vdif", "--max-loss", "0.1",
                                       "--log-level", "warning"])  # fmt: skip
    assert vars(before) == vars(after)
    # Given before the verb and not after: the verb's copy leaves it alone.
    assert build_parser().parse_args(["--log-format", "json", "inspect", "x"]).log_format == "json"


def test_a_usage_error_is_one_line_with_the_way_to_the_help():
    r = run_cli("fold", "obs.dada", "--dm", "x", "--period", "0.03", "-o", "x.fits")
    assert r.returncode == 2
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    assert "--dm" in lines[0] and "voltstream fold --help" in lines[0]


#: Every verb that captures a live stream, with its other required options.
LIVE_VERBS = [
    ["capture", "--listen", "127.0.0.1:7000", "--duration", "1"],
    ["record", "--listen", "127.0.0.1:7000", "--dirs", "d", "--duration", "1"],
    ["fold", "--listen", "127.0.0.1:7000", "--dm", "10", "--period", "0.1", "-o", "x.ar"],
    ["filterbank", "--listen", "127.0.0.1:7000", "-o", "x.fil"],
    ["search", "--listen", "127.0.0.1:7000", "--fine-channels", "128", "--tsamp", "64e-6"],
]


@pytest.mark.parametrize("argv", LIVE_VERBS, ids=[a[0] for a in LIVE_VERBS])
def test_window_is_the_reorder_window_in_every_live_verb(argv):
    """Before: `fold`/`filterbank --listen` had no --window, and search's --window (the
    baseline's seconds, default 2) went to the capture as a reorder window of 2 chunks,
    and a --window 1.5 failed in the capture's settings."""
    from voltstream.cli.common import _capture_settings

    parse = build_parser().parse_args
    args = parse([*argv, "--format", "ynao"])
    assert _capture_settings(args, args.listen).chunks.window is None  # sized in time
    args = parse([*argv, "--format", "ynao", "--window", "16"])
    assert _capture_settings(args, args.listen).chunks.window == 16


def test_search_baseline_is_its_own_option():
    from voltstream.cli.search_options import settings_from

    args = build_parser().parse_args([*LIVE_VERBS[-1], "--baseline", "1.5"])
    assert settings_from(args, 64e-6).window_s == 1.5
