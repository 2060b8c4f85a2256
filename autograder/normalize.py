"""Turn whatever a student submitted into the notebook we grade, using the master copy.

Only the student's code is taken from the submission: their answer cells (matched by nbgrader's
``grade_id``) and any cells they added. Everything the instructor wrote (given cells, test cells,
points) comes from the master, wherever the student moved, split, duplicated, edited or deleted
it and whatever they did to its metadata. Notebook-level metadata (kernelspec, nbformat minor) is
ignored. The file is read as JSON, not validated against a schema, so a newer nbformat minor or
missing cell ids cannot make a submission ungradable.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path


@dataclass
class Step:
    """One cell of the graded notebook, in order. ``kind``: code (student), given (master code
    run in the sandbox and, to define the tests' names, in the grader), test (master, run by the
    grader), markdown or missing (shown, not run)."""

    kind: str
    source: str
    metadata: dict = field(default_factory=dict)
    grade_id: str = ""
    points: float = 0.0


def _text(source) -> str:
    if isinstance(source, str):
        return source
    if isinstance(source, list) and all(isinstance(s, str) for s in source):
        return "".join(source)
    raise ValueError("a cell's source is neither text nor a list of lines")


def read_notebook(path: Path) -> dict:
    """The notebook as a dict with string sources; ValueError saying why it is unreadable."""
    raw = Path(path).read_bytes()
    if not raw.strip():
        raise ValueError("unreadable notebook: the file is empty")
    try:
        nb = json.loads(raw.decode("utf-8-sig"))
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise ValueError(f"unreadable notebook: not valid JSON ({err}); re-download it from "
                         "Jupyter with File > Download and submit that file") from None
    if not isinstance(nb, dict) or not isinstance(nb.get("cells"), list):
        raise ValueError("unreadable notebook: no list of cells (is this a Jupyter notebook?)")
    if nb.get("nbformat", 4) != 4:
        raise ValueError(f"unreadable notebook: nbformat {nb.get('nbformat')!r} (expected 4)")
    cells = []
    for cell in nb["cells"]:
        if not isinstance(cell, dict) or not isinstance(cell.get("cell_type"), str):
            raise ValueError("unreadable notebook: a cell has no type")
        meta = cell.get("metadata")
        cells.append({"cell_type": cell["cell_type"], "source": _text(cell.get("source", "")),
                      "metadata": meta if isinstance(meta, dict) else {}})
    return {**nb, "cells": cells}


def _grade_id(cell: dict) -> str:
    info = cell["metadata"].get("nbgrader")
    gid = info.get("grade_id") if isinstance(info, dict) else None
    return gid if isinstance(gid, str) else ""


def master_step(cell: dict) -> Step:
    info = cell["metadata"].get("nbgrader", {})
    gid = info.get("grade_id", "")
    if cell["cell_type"] != "code":
        return Step("markdown", cell["source"], cell["metadata"], gid)
    if info.get("grade") and not info.get("solution"):
        return Step("test", cell["source"], cell["metadata"], gid,
                    float(info.get("points") or 0))
    if info.get("solution"):
        return Step("missing", "# this answer cell was missing from the submission",
                    cell["metadata"], gid, float(info.get("points") or 0) if info.get("grade")
                    else 0.0)
    return Step("given", cell["source"], cell["metadata"], gid)


def plan(master: dict, student: dict) -> list[Step]:
    """The cells to run, in order. Each master cell the student does not supply (every test and
    given cell, and deleted answers) goes after the last student cell that comes before it in
    the master, and after any cells the student added there."""
    masters = [master_step(c) for c in master["cells"]]
    index = {s.grade_id: i for i, s in enumerate(masters) if s.grade_id}
    answers = {s.grade_id for s in masters if s.kind == "missing"}
    items: list[tuple[int | None, Step]] = []  # (master index it stands for, step)
    placed: set[int] = set()
    for cell in student["cells"]:
        gid = _grade_id(cell)
        m = index.get(gid)
        if gid in answers:
            meta = masters[m].metadata
            if cell["cell_type"] == "code":  # a split answer keeps all its parts, in order
                items.append((m, Step("code", cell["source"], meta if m not in placed else {},
                                      gid if m not in placed else "")))
                placed.add(m)
        elif m is not None:
            continue  # instructor cells always come from the master
        elif cell["cell_type"] == "code":
            items.append((None, Step("code", cell["source"])))
        elif cell["cell_type"] == "markdown":
            items.append((None, Step("markdown", cell["source"])))
    for m, step in enumerate(masters):
        if m in placed:
            continue
        at = 0
        for pos, (mi, _) in enumerate(items):
            if mi is not None and mi < m:
                at = pos + 1
        while at < len(items) and items[at][0] is None:
            at += 1
        items.insert(at, (m, step))
    return [step for _, step in items]


def withheld(master: dict) -> tuple[str, ...]:
    """Packages the master notebook withholds from the sandbox (``metadata.autograder.withhold``),
    e.g. torch where gradients must be computed by hand."""
    names = master.get("metadata", {}).get("autograder", {}).get("withhold", [])
    if not isinstance(names, list) or not all(isinstance(n, str) and n.isidentifier()
                                              for n in names):
        raise ValueError(f"metadata.autograder.withhold must be a list of package names, "
                         f"got {names!r}")
    return tuple(names)


def refuses_attention(master: dict) -> bool:
    """Whether the assignment's answers must compute attention themselves
    (``metadata.autograder.refuse_attention``): torch's attention then refuses in its sandbox."""
    flag = master.get("metadata", {}).get("autograder", {}).get("refuse_attention", False)
    if not isinstance(flag, bool):
        raise ValueError(f"metadata.autograder.refuse_attention must be true or false, got "
                         f"{flag!r}")
    return flag
