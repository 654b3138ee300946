"""The tree shows the layering docs/architecture.md states: every import between
product folders (Python) and between core layers (Rust) is one the table allows.

A new arrow fails here with the file that draws it; to allow one, change the table
below and the table in docs/architecture.md together, with the reason.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "python" / "voltstream"
CORE = ROOT / "crates" / "voltstream-core" / "src"

# Package-root modules every folder may import: no voltstream imports but each other.
BASE = {"errors", "observation", "device", "digitiser", "spead_items", "config_files", "_core",
        "capture_defaults"}  # fmt: skip

# What each unit may import besides BASE: a folder, or one module of a folder.
PYTHON_ALLOWED: dict[str, set[str]] = {
    "__init__": set(),
    "errors": set(),
    "observation": set(),
    "device": set(),
    "digitiser": set(),
    "spead_items": set(),
    "config_files": set(),
    "capture_defaults": set(),
    "dsp": set(),
    "fold": {"dsp"},
    "io": {"dsp/dedisperse", "dsp/packed", "pipeline/interfaces", "config_files"},
    "sim": {"dsp/dedisperse", "io/vdif"},
    "formats": {"dsp/packed", "sim/packetize", "io/vdif"},
    "streams": {"formats"},
    "capture_config": {"streams"},
    "record": {"capture_config", "io/dada"},
    # A pipeline file: a capture file's sections, stream descriptions, station codes.
    "pipeline_file": {"capture_config", "streams", "formats"},
    # Replay reads recordings (io), rebuilds packets (formats); its cli module builds
    # the verb's options from cli_options.
    "replay": {"io", "formats", "cli_options", "config_files"},
    "monitor": set(),
    # Metrics server and status view: the verbs' runs report to it through callbacks.
    "ops": set(),
    "testing": set(),  # fault plans for tests: packets in, packets out
    # Signals, exit status, logs, progress bar: used by cli and commands, which hand
    # the run loops a stop event and a progress callback (no arrow from the loops).
    "service": set(),
    "pipeline": {"dsp", "fold", "io", "formats", "capture_config"},
    "fengine": {"dsp", "pipeline", "streams", "capture_config"},
    # The low-latency mode: its CuPy side builds on the kernel loader (dsp/cuda).
    "latency": {"dsp/cuda"},
    # Many nodes, one observation (issue 16): the row merger, NumPy only for now.
    "subbands": {"formats"},
    # Many nodes (issue 16): a node captures and folds as the one-host pipeline does.
    "cluster": {"dsp", "fold", "io", "pipeline", "formats", "capture_config"},
    # The command line sits on top and may import anything.
    "cli_options": {"*"},
    "commands": {"*"},
    "commands_common": {"*"},
    "commands_simulate": {"*"},
    "commands_cluster": {"*"},
    "commands_fengine": {"*"},
    "commands_latency": {"*"},
    "cli_latency": {"*"},
    "run_pipeline": {"*"},  # `voltstream run`: a file to a verb's command line
    "cli": {"*"},
}

# Rust: what each core layer may use from the others (crate::X), outside tests.
RUST_ALLOWED: dict[str, set[str]] = {
    "error": set(),
    "wire": set(),
    "memory": set(),
    "host_counters": set(),
    "stats": {"host_counters"},  # a snapshot carries the kernel's counters
    "assemble": {"wire", "memory", "stats"},
    "ring": {"assemble"},
    "capture": {"wire", "assemble", "ring", "memory", "stats", "host_counters"},
    "record": {"ring", "assemble"},  # chunks from the capture's rings to files
    # The low-latency frame path: frames from the wire layer, received by a
    # capture engine (socket), handed to the GPU.
    "latency": {"wire", "capture"},
    # capture::host: socket options, written once; latency: the one clock and the
    # test pattern the frame sender shares with the receiver; wire: the frame
    # sender's packet described as a layout (bench_layout), so both read one table.
    "send": {"capture", "latency", "wire"},
}


def _unit(path: Path) -> str:
    rel = path.relative_to(PACKAGE).parts
    return rel[0] if len(rel) > 1 else rel[0].removesuffix(".py")


def _targets(path: Path) -> set[str]:
    """`folder/module` (or `module`) of every voltstream import in a file."""
    pkg = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            base = pkg[: len(pkg) - node.level] if node.level else []
            mod = ".".join(base + ([node.module] if node.module else []))
            names = [f"{mod}.{a.name}" for a in node.names]
        elif isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        else:
            continue
        for name in names:
            parts = name.split(".")
            if parts[0] != "voltstream" or len(parts) < 2:
                continue
            top = parts[1]
            if (PACKAGE / top).is_dir():
                sub = parts[2] if len(parts) > 2 else ""
                found.add(f"{top}/{sub}" if (PACKAGE / top / f"{sub}.py").exists() else top)
            elif (PACKAGE / f"{top}.py").exists() or top == "_core":
                found.add(top)
    return found


def test_python_imports_follow_the_layers():
    bad = []
    for path in sorted(PACKAGE.rglob("*.py")):
        unit = _unit(path)
        allowed = PYTHON_ALLOWED.get(unit)
        if allowed is None:
            bad.append(f"{path.relative_to(ROOT)}: unit {unit!r} is not in the layer table")
            continue
        for target in _targets(path):
            folder = target.split("/")[0]
            if folder == unit or folder in BASE or "*" in allowed:
                continue
            if target not in allowed and folder not in allowed:
                bad.append(f"{path.relative_to(ROOT)} imports {target} ({unit} may not)")
    assert not bad, "\n".join(bad)


def _rust_code(path: Path) -> str:
    """A Rust file without its test module(s) and comments: what the library uses."""
    if path.name.endswith("tests.rs") or path.name == "testutil.rs":
        return ""
    text = path.read_text()
    cut = text.find("#[cfg(test)]")
    text = text if cut < 0 else text[:cut]
    return re.sub(r"//.*", "", text)


def test_rust_layers_use_only_lower_layers():
    bad = []
    for path in sorted(CORE.rglob("*.rs")):
        rel = path.relative_to(CORE).parts
        layer = rel[0].removesuffix(".rs")
        if layer in ("lib", "main"):
            continue
        allowed = RUST_ALLOWED.get(layer)
        if allowed is None:
            bad.append(f"{path.relative_to(ROOT)}: layer {layer!r} is not in the layer table")
            continue
        for used in set(re.findall(r"crate::([a-z_]+)", _rust_code(path))):
            if used not in (layer, "Error", "Result", "error") and used not in allowed:
                bad.append(f"{path.relative_to(ROOT)} uses crate::{used} ({layer} may not)")
    assert not bad, "\n".join(bad)


def test_the_checks_see_imports():
    # The walkers must find the arrows they judge, or the tests above pass vacuously.
    assert "dsp/packed" in _targets(PACKAGE / "io" / "vdif.py")
    assert "wire" in re.findall(r"crate::([a-z_]+)", _rust_code(CORE / "assemble" / "assembler.rs"))
