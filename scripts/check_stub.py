"""Checks python/voltstream/_core.pyi against the compiled extension.

Every public name (module level, and each class's public attributes) must be in
both the stub and the binary, so type checkers and IDEs never see an API that
does not exist, and nothing the binary offers goes undocumented.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

STUB = Path(__file__).resolve().parent.parent / "python" / "voltstream" / "_core.pyi"


def stub_names(path: Path) -> dict[str, set[str]]:
    """Returns {name: set of member names} for the stub's top-level definitions."""
    tree = ast.parse(path.read_text())
    names: dict[str, set[str]] = {}
    for node in tree.body:
        if isinstance(node, ast.ClassDef):
            members = set()
            for item in node.body:
                if isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef):
                    members.add(item.name)
                elif isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name):
                    members.add(item.target.id)
            names[node.name] = {m for m in members if not m.startswith("_")}
        elif isinstance(node, ast.FunctionDef):
            names[node.name] = set()
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names[node.target.id] = set()
    return {k: v for k, v in names.items() if not k.startswith("_") or k == "__version__"}


def binary_names() -> dict[str, set[str]]:
    from voltstream import _core

    names: dict[str, set[str]] = {}
    for name in dir(_core):
        if name.startswith("_") and name != "__version__":
            continue
        obj = getattr(_core, name)
        if isinstance(obj, type):
            names[name] = {m for m in dir(obj) if not m.startswith("_")}
        else:
            names[name] = set()
    return names


def main() -> int:
    stub, binary = stub_names(STUB), binary_names()
    problems = []
    for name in sorted(set(stub) | set(binary)):
        if name not in binary:
            problems.append(f"{name}: in the stub but not in the extension")
        elif name not in stub:
            problems.append(f"{name}: in the extension but not in the stub")
        else:
            for m in sorted(stub[name] ^ binary[name]):
                where = "stub" if m in stub[name] else "extension"
                problems.append(f"{name}.{m}: only in the {where}")
    for p in problems:
        print(f"check_stub: {p}", file=sys.stderr)
    if problems:
        print(
            f"check_stub: {STUB} disagrees with the extension; update one of them", file=sys.stderr
        )
        return 1
    print(f"check_stub: {len(stub)} names agree between {STUB.name} and the extension")
    return 0


if __name__ == "__main__":
    sys.exit(main())
