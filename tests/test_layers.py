"""The tree shows the layering docs/architecture.md states: every import between
product folders (Python) and between core layers (Rust) is one the table allows.

The Python table is docs/architecture.md's ("Units: what each owns and may import"),
read from there: one statement of the layers, no copy to drift. A new arrow fails here
with the file that draws it; to allow one, add it to that table with the reason. No
import cycle between modules either (inside a folder too), Python or the binding crate.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "python" / "voltstream"
CORE = ROOT / "crates" / "voltstream-core" / "src"

DOC = ROOT / "docs" / "architecture.md"


def _doc_table() -> tuple[set[str], dict[str, set[str]]]:
    """The base modules and each unit's "may import" names, read from the table in
    docs/architecture.md ("Units: what each owns and may import"): the one statement
    of the layers, which this test enforces. A cell's names are those in backquotes
    outside brackets (inside them: the reason)."""
    text = DOC.read_text()
    base_line = re.search(r"^base: (.*?)\.$", text, re.M | re.S)
    assert base_line, "docs/architecture.md lost its 'base:' line"
    base = set(re.findall(r"`([\w/]+)`", re.sub(r"\([^()]*\)", "", base_line.group(1))))
    table = text[text.index("| unit | owns | may import |") :].split("\n\n")[0]
    allowed: dict[str, set[str]] = {}
    for line in table.splitlines()[2:]:
        unit, _owns, may = (c.strip() for c in line.strip().strip("|").split(" | "))
        name = unit.strip("`").removesuffix("/").removesuffix(".py")
        names = re.findall(r"`([\w/]+)`", re.sub(r"\([^()]*\)", "", may))
        allowed[name] = {n.removesuffix("/") for n in names}
    return base, allowed


BASE, PYTHON_ALLOWED = _doc_table()
PYTHON_ALLOWED.update({unit: set() for unit in (*BASE, "__init__")})


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
            if folder == unit or folder in BASE:
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


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one node (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def _module_graph() -> dict[str, set[str]]:
    """Every module of the package and the modules it imports (anywhere in the file,
    a function's lazy import and a TYPE_CHECKING one too: each is a dependency)."""
    modules = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        modules[".".join(parts).removesuffix(".__init__")] = path
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        pkg = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
        out = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom):
                base = pkg[: len(pkg) - node.level + 1] if node.level else []
                mod = ".".join(base + ([node.module] if node.module else []))
                wanted = [f"{mod}.{a.name}" for a in node.names] + [mod]
            elif isinstance(node, ast.Import):
                wanted = [a.name for a in node.names]
            else:
                continue
            for target in wanted:
                while target and target not in modules:
                    target = target.rpartition(".")[0]
                if target and target not in (name, "voltstream"):
                    out.add(target)
        graph[name] = out
    return graph


def test_no_python_module_imports_itself_round_a_cycle():
    """Before: cli -> commands <-> commands_cluster (and run_pipeline), and
    cluster/engines <-> cluster/node."""
    assert not _cycles(_module_graph())


def test_the_binding_crate_has_no_module_cycle():
    src = ROOT / "crates" / "voltstream-py" / "src"
    graph = {
        p.stem: set(re.findall(r"crate::([a-z_]+)", _rust_code(p))) - {p.stem}
        for p in src.glob("*.rs")
    }
    assert not _cycles(graph)


def test_the_cycle_finder_finds_cycles():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert "voltstream.cli.parser" in _module_graph()["voltstream.cli"]


def test_argparse_stays_in_the_cli_package():
    """Product folders get values and settings objects, never a Namespace: only cli/
    imports argparse (and latency/send.py, a test source run as its own script)."""
    users = sorted(
        str(p.relative_to(PACKAGE))
        for p in PACKAGE.rglob("*.py")
        if re.search(r"^\s*(import argparse|from argparse import)", p.read_text(), re.M)
        and p.parent.name != "cli"
    )
    assert users == ["latency/send.py"], users


def test_a_long_module_says_why_at_its_top():
    """No module over 500 lines without the reason in its docstring ("Over 500
    lines: ..."), so that a long file is a decision, not an accident."""
    unexplained = []
    for path in sorted(PACKAGE.rglob("*.py")):
        text = path.read_text()
        if text.count("\n") <= 500:
            continue
        doc = ast.get_docstring(ast.parse(text)) or ""
        if not re.search(r"\b(Over )?[5-9]\d\d lines", doc):
            unexplained.append(f"{path.relative_to(ROOT)} ({text.count(chr(10))} lines)")
    assert not unexplained, unexplained
