"""Merging bench/e2e.py results: several runs' JSON into one document (`--merge`, and a
run whose --json already exists), so that each figure measured is kept and none is
ever overwritten by a run that did not measure it (a null).

Per configuration the best confirmed figure of the runs merged wins (each a >= 20 s
lossless run in its own right), else the latest; the entry says which run it came
from. Top-level figures are recomputed from the configurations (`finalize`); a
figure an input held that the merge would leave null or drop (one written by hand,
a configuration this version no longer runs) is carried over from the latest input
that has it.
"""

from __future__ import annotations

#: Sections the merge builds itself, entry by entry.
SECTIONS = ("configs", "skipped")


def rank(c: dict) -> tuple:
    """Merge order: confirmed before unconfirmed, then the higher lossless rate."""
    return (bool(c.get("confirmed_seconds")), c.get("lossless_gbps") or 0.0)


def _commands(command: object) -> list[str]:
    """A document's commands as one flat list (a merged one holds a list of them; an
    older merge nested its inputs' lists one level deeper each time)."""
    if isinstance(command, list):
        return [c for x in command for c in _commands(x)]
    return [command] if isinstance(command, str) else []


def _keep_known(new: dict, old: dict | None) -> dict:
    """``new``, with what ``old`` knew where ``new`` says null (a figure once confirmed
    is never overwritten with null; ``kept_from_earlier`` names those keys)."""
    if old is None:
        return new
    kept = [k for k, v in old.items() if v is not None and new.get(k, v) is None]
    if not kept:
        return new
    earlier = sorted(set(new.get("kept_from_earlier", [])) | set(kept))
    return new | {k: old[k] for k in kept} | {"kept_from_earlier": earlier}


def merge_docs(docs: list[dict], sources: list[str], others: tuple, finalize) -> dict:
    """One document from ``docs`` (in order, the latest last), each named by its
    ``sources`` entry; ``others``: the top-level sections kept whole (gpu_alone...);
    ``finalize``: the top-level figures from the configurations."""
    doc: dict = {
        "machine": docs[0].get("machine"),
        "date": docs[-1].get("date"),
        "command": [c for d in docs for c in _commands(d.get("command"))],
        "configs": {},
        "skipped": {},
    }
    for d, source in zip(docs, sources, strict=True):
        for name, c in d.get("configs", {}).items():
            c = dict(c, merged_from=c.get("merged_from", source))
            old = doc["configs"].get(name)
            if old is None or rank(c) >= rank(old):
                doc["configs"][name] = _keep_known(c, old)
        for k, why in d.get("skipped", {}).items():  # a real reason beats "not selected"
            if k not in doc["skipped"] or not why.startswith("not selected"):
                doc["skipped"][k] = why
        doc.update({k: d[k] for k in others if d.get(k)})
    doc = finalize(doc)
    for d in docs:  # never a null over a figure an input had
        for k, v in d.items():
            if v is None or isinstance(v, bool):
                continue
            if doc.get(k) is None:
                doc[k] = v
            elif isinstance(v, dict) and isinstance(doc[k], dict) and k not in SECTIONS:
                # A section of figures (ratios, figures, ab_runs): every entry an input
                # had; what the merge computed or met first where both have one.
                doc[k] = {**{kk: vv for kk, vv in v.items() if vv is not None}, **doc[k]}
    return doc
