"""Every numeric option of `fold` (and the verbs that share them) is checked before any
work starts: NaN, inf, negative or out-of-range values end in one line naming the
option and its limit, exit status 2, no traceback, no allocation. A pipeline file's
[fold] section is held to the same limits."""

from __future__ import annotations

import pytest

from cli_process import run_cli
from voltstream.cli.options import MAX_NBIN

FOLD = ["--dm", "10", "--period", "0.02", "-o"]


@pytest.mark.parametrize(
    "option,value,limit",
    [
        ("--dm", "nan", "at least 0"),
        ("--dm", "inf", "at least 0"),
        ("--dm", "-3", "at least 0"),
        ("--nbin", "100000000", f"from 2 to {MAX_NBIN}"),
        ("--nbin", "0", f"from 2 to {MAX_NBIN}"),
        ("--nbin", "-4", f"from 2 to {MAX_NBIN}"),
        ("--tsub", "nan", "above 0"),
        ("--tsub", "inf", "above 0"),
        ("--tsub", "-1", "above 0"),
        ("--period", "nan", "above 0"),
        ("--period", "inf", "above 0"),
        ("--period", "0", "above 0"),
        ("--chan-bw", "nan", "other than 0"),
        ("--freq", "inf", "above 0"),
        ("--gpus", "0", "above 0"),
        ("--start-packet", "-1", "at least 0"),
        ("--duration", "nan", "above 0"),
        ("--idle-timeout", "inf", "above 0"),
        ("--buffer-mb", "nan", "above 0"),
    ],
)
def test_a_bad_number_for_fold_is_one_line_and_exit_2(tmp_path, option, value, limit):
    # The input does not exist: the number is refused before the file is looked at.
    r = run_cli("fold", str(tmp_path / "x.dada"), *FOLD, str(tmp_path / "o.fits"),
                option, value)  # fmt: skip
    assert r.returncode == 2, (r.returncode, r.stderr)
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in r.stderr, r.stderr
    assert f"argument {option}" in lines[0] and limit in lines[0] and value in lines[0]
    assert not (tmp_path / "o.fits").exists()


@pytest.mark.parametrize(
    "args,option",
    [
        (["--dm", "nan"], "--dm"),
        (["--dm", "-1"], "--dm"),
        (["--rate", "nan"], "--rate"),
        (["--pulse-phase", "inf"], "--pulse-phase"),
        (["--period", "inf"], "--period"),
    ],
)
def test_simulate_shares_the_limits(tmp_path, args, option):
    r = run_cli("simulate", "--duration", "0.01", "-o", str(tmp_path / "s.dada"), *args)
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert f"argument {option}" in r.stderr and "Traceback" not in r.stderr


@pytest.mark.parametrize(
    "line,key", [("dm = nan", "dm"), ("dm = -1.0", "dm"), ("nbin = 100000000", "nbin"),
                 ("tsub = inf", "tsub")]
)  # fmt: skip
def test_a_pipeline_files_fold_numbers_are_checked_too(tmp_path, line, key):
    values = {"dm": "dm = 10.0", "nbin": "", "tsub": ""}
    values[key] = line
    toml = tmp_path / "p.toml"
    toml.write_text(
        '[network]\nbind = "127.0.0.1:7000"\n\n[stream]\nformat = "ynao"\n\n'
        "[run]\nduration = 1\n\n"
        f'[fold]\noutput = "{tmp_path / "o.fits"}"\nperiod = 0.02\ndevice = "cpu"\n'
        + "\n".join(v for v in values.values() if v)
        + "\n"
    )
    r = run_cli("run", str(toml), "--check")
    assert r.returncode == 2 and "Traceback" not in r.stderr, (r.returncode, r.stderr)
    assert key in r.stderr


def test_an_archive_larger_than_memory_is_refused_before_folding(tmp_path):
    """Each number within its bounds, but together (2e8 sub-integrations of 65536 bins)
    more than any machine holds: one line naming --nbin and --tsub, exit 2."""
    data = tmp_path / "s.dada"
    made = run_cli("simulate", "--duration", "0.2", "--dm", "5", "-o", str(data))
    assert made.returncode == 0, made.stderr
    out = tmp_path / "o.fits"
    r = run_cli("fold", str(data), "--device", "cpu", "--dm", "5", "--period", "0.0333",
                "--nbin", str(MAX_NBIN), "--tsub", "1e-9", "-o", str(out))  # fmt: skip
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "--nbin 65536 with --tsub 1e-09 s" in lines[0], r.stderr
    assert "sub-integrations" in lines[0] and not out.exists()
