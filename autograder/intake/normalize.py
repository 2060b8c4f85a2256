"""Turn whatever a student submitted into the notebook we grade, using the master copy.

Only the student's code is taken from the submission: their answer cells (matched by nbgrader's
``grade_id``), any cells they added, and the order of their cells. Everything the instructor wrote
(given cells, test cells, points) comes from the master, wherever the student moved, split,
duplicated, edited or deleted it and whatever they did to its metadata. Notebook-level metadata
(kernelspec, nbformat minor) is ignored. The file is read as JSON, not validated against a
schema, so a newer nbformat minor or missing cell ids cannot make a submission ungradable.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from pathlib import Path


@dataclass
class Step:
    """One cell of the graded notebook, in order. ``kind``: code (student), given (master code
    run in the sandbox and, to define the tests' names, in the grader), test (master, run by the
    grader), written (the student's answer to a question graded by hand: text, never run),
    markdown or missing (shown, not run)."""

    kind: str
    source: str
    metadata: dict = field(default_factory=dict)
    grade_id: str = ""
    points: float = 0.0
    note: str = ""  # why a test may fail for where it ran, for the student (see ``plan``)


def _text(source) -> str:
    """A cell's source as text that UTF-8 can write: JSON may escape a lone surrogate
    ("\\ud800"), which no file, report or kernel downstream could encode; it becomes "?"."""
    if isinstance(source, list) and all(isinstance(s, str) for s in source):
        source = "".join(source)
    if not isinstance(source, str):
        raise ValueError("a cell's source is neither text nor a list of lines")
    return source.encode("utf-8", "replace").decode("utf-8")


MAX_NOTEBOOK_BYTES = 50 * 2**20
"""A notebook file larger than this is not read: one with its outputs cleared is far smaller."""
MAX_JSON_CONTAINERS = 2_000_000
"""Lists and objects a notebook's JSON may hold (an upper bound, counted on the raw bytes before
parsing): each costs tens of bytes in Python, and a file of nothing but empty lists would
otherwise cost the grader gigabytes."""
MAX_CELLS = 2_000
"""Cells a submission may hold: the assignments have under 50; the graded copy, the feedback
and the similarity report all grow with the count."""
MAX_SOURCE = 2_000_000
"""Characters of source, all cells together (about 40,000 lines of code)."""

RESUBMIT = ("re-download it from Jupyter with File > Download (or from Colab with File > "
            "Download > Download .ipynb) and submit that file")


def parse_json(raw: bytes, what: str = "notebook"):
    """``raw`` as JSON, within the limits above; ValueError saying why not (too large, too many
    objects, nested too deeply, not UTF-8, not JSON), never another exception."""
    if len(raw) > MAX_NOTEBOOK_BYTES:
        raise ValueError(f"unreadable {what}: the file is {len(raw) / 2**20:.0f} MB, over the "
                         f"{MAX_NOTEBOOK_BYTES // 2**20} MB a submission may be; clear its "
                         "outputs (Kernel > Restart Kernel and Clear Outputs), save, and submit "
                         "it again")
    containers = raw.count(b"[") + raw.count(b"{")
    if containers > MAX_JSON_CONTAINERS:
        raise ValueError(f"unreadable {what}: it holds over {MAX_JSON_CONTAINERS:,} JSON lists "
                         f"and objects, far more than a notebook has; {RESUBMIT}")
    try:
        return json.loads(raw.decode("utf-8-sig"))
    except RecursionError:
        raise ValueError(f"unreadable {what}: its JSON is nested too deeply to be a notebook; "
                         f"{RESUBMIT}") from None
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise ValueError(f"unreadable {what}: not valid JSON ({str(err)[:100]}); "
                         f"{RESUBMIT}") from None


def read_notebook(path: Path) -> dict:
    """The notebook as a dict with string sources; ValueError saying why it is unreadable (or
    over what a submission may hold: ``MAX_CELLS``, ``MAX_SOURCE``, ``parse_json``'s limits)."""
    raw = Path(path).read_bytes()
    if not raw.strip():
        raise ValueError("unreadable notebook: the file is empty")
    nb = parse_json(raw)
    if not isinstance(nb, dict) or not isinstance(nb.get("cells"), list):
        raise ValueError("unreadable notebook: no list of cells (is this a Jupyter notebook?)")
    if nb.get("nbformat", 4) != 4:
        raise ValueError(f"unreadable notebook: nbformat {nb.get('nbformat')!r} (expected 4)")
    if len(nb["cells"]) > MAX_CELLS:
        raise ValueError(f"the notebook has {len(nb['cells']):,} cells, over the {MAX_CELLS:,} a "
                         "submission may have; delete the cells you do not need and submit "
                         "again")
    cells, size = [], 0
    for cell in nb["cells"]:
        if not isinstance(cell, dict) or not isinstance(cell.get("cell_type"), str):
            raise ValueError("unreadable notebook: a cell has no type")
        meta = cell.get("metadata")
        source = _text(cell.get("source", ""))
        size += len(source)
        if size > MAX_SOURCE:
            raise ValueError(f"the notebook's cells hold over {MAX_SOURCE:,} characters, more "
                             "than a submission may; delete what you do not need (large pasted "
                             "data, say) and submit again")
        cells.append({"cell_type": cell["cell_type"], "source": source,
                      "metadata": meta if isinstance(meta, dict) else {}})
    return {**nb, "cells": cells}


def _grade_id(cell: dict) -> str:
    info = cell["metadata"].get("nbgrader")
    gid = info.get("grade_id") if isinstance(info, dict) else None
    return gid if isinstance(gid, str) else ""


TEXT_STUB = "YOUR ANSWER HERE"  # what a release shows in a written answer's place


def manual(step: Step) -> bool:
    """Whether the cell is graded by hand (nbgrader's manually graded answer): a written
    answer, or an answer cell of code that carries points."""
    return step.kind == "written" or (step.kind in ("missing", "code") and step.points > 0)


def measurement_for(metadata: dict) -> str:
    """The written question an answer cell of code measures for
    (``metadata.autograder.measurement_for``: its grade_id), or "". Such a cell is where the
    student runs their own functions (a table, a plot) for a written answer; a person grades
    it through that answer, no test reads it."""
    target = metadata.get("autograder", {}).get("measurement_for", "")
    if not isinstance(target, str):
        raise ValueError(f"metadata.autograder.measurement_for must be the grade_id of a "
                         f"written question, got {target!r}")
    return target


def master_step(cell: dict) -> Step:
    info = cell["metadata"].get("nbgrader", {})
    gid = info.get("grade_id", "")
    if cell["cell_type"] != "code":
        if info.get("solution") and info.get("grade"):  # a question answered in words
            return Step("written", "", cell["metadata"], gid, float(info.get("points") or 0))
        return Step("markdown", cell["source"], cell["metadata"], gid)
    if info.get("grade") and not info.get("solution"):
        return Step("test", cell["source"], cell["metadata"], gid,
                    float(info.get("points") or 0))
    if info.get("solution"):
        return Step("missing", "# this answer cell was missing from the submission",
                    cell["metadata"], gid, float(info.get("points") or 0) if info.get("grade")
                    else 0.0)
    return Step("given", cell["source"], cell["metadata"], gid)


def fingerprint(master: dict) -> str:
    """A short digest of everything in the master that decides a grade: its given and test
    cells (hidden tests included), answer cells' places and points, written questions' points
    and rubrics. A row graded under another fingerprint was graded by other tests."""
    import hashlib

    digest = hashlib.sha256()
    for step in map(master_step, master["cells"]):
        if step.kind == "markdown":
            continue
        source = step.source if step.kind in ("given", "test") else ""
        digest.update(json.dumps([step.kind, step.grade_id, source, step.points,
                                  step.metadata.get("autograder", {})]).encode())
    return digest.hexdigest()[:12]


def plan(master: dict, student: dict) -> list[Step]:
    """The cells to run, in the order of the student's notebook, as nbgrader's autograde runs it.

    A cell the student kept runs where the student has it: an answer with the student's code
    (a split answer keeps all its parts, in order), an instructor cell (given, test, or the
    master's markdown) with the master's source, points and metadata, once, where its first copy
    is. "Kept" means a cell with its ``grade_id``: cells are matched by that alone, never by
    their text, which a student may edit. A given cell whose metadata the student stripped is
    therefore the student's own code (it still runs where they have it, so their notebook works
    as it did for them), and the master's copy is placed as if deleted. A deleted master cell
    goes after the nearest preceding master cell that is there, and after any cells the student
    added right after that one.

    One exception to the student's order: the instructor's given and test cells always run in
    the master's order, since a test resolves names first from the given and test cells that ran
    before it in the grader (see ``execute``). A student who moves a test (or a given cell)
    above an instructor cell that precedes it in the master gains nothing: it runs right after
    that cell. A test that runs above the answer it checks sees only what ran before it, as in
    the student's own notebook; its ``note`` says so, for the feedback when it fails.
    """
    masters = [master_step(c) for c in master["cells"]]
    items = _kept(masters, student)
    _place_deleted(items, masters)
    steps = _instructor_order(items, masters)
    return _note_tests_above_answers(steps, masters)


def _kept(masters: list[Step], student: dict) -> list[tuple[int | None, Step]]:
    """The student's cells in their order, as (master index or None if added, step)."""
    index = {s.grade_id: i for i, s in enumerate(masters) if s.grade_id}
    items: list[tuple[int | None, Step]] = []
    seen: set[int] = set()
    for cell in student["cells"]:
        m = index.get(_grade_id(cell))
        if m is None:
            if cell["cell_type"] in ("code", "markdown"):
                items.append((None, Step(cell["cell_type"], cell["source"])))
        elif masters[m].kind == "written":  # the student's words, as they wrote them
            if m not in seen:
                items.append((m, replace(masters[m], source=cell["source"])))
                seen.add(m)
            else:  # a copied or split answer cell: its words join the first one's, in order
                at = next(k for k, (mi, _) in enumerate(items) if mi == m)
                first = items[at][1]
                items[at] = (m, replace(first, source=first.source + "\n\n" + cell["source"]))
        elif masters[m].kind == "missing":  # an answer: the student's code
            if cell["cell_type"] == "code":
                first = m not in seen
                items.append((m, Step("code", cell["source"], masters[m].metadata if first
                                      else {}, masters[m].grade_id if first else "",
                                      masters[m].points if first else 0.0)))
                seen.add(m)
        elif m not in seen:  # the instructor's cell, from the master, where its first copy is
            items.append((m, masters[m]))
            seen.add(m)
    return items


def _place_deleted(items: list[tuple[int | None, Step]], masters: list[Step]) -> None:
    """Insert each master cell the student does not have after the nearest preceding master
    cell that is there, and after the cells the student added right after that one."""
    for m, step in enumerate(masters):
        if any(mi == m for mi, _ in items):
            continue
        before = [(mi, pos) for pos, (mi, _) in enumerate(items) if mi is not None and mi < m]
        at = max(before)[1] + 1 if before else 0
        while at < len(items) and items[at][0] is None:
            at += 1
        if step.kind == "test":
            step = replace(step, note="this test cell is not in your notebook, deleted or "
                                      "without its grade_id; it ran where the assignment has it")
        items.insert(at, (m, step))


def _instructor_order(items: list[tuple[int | None, Step]], masters: list[Step]) -> list[Step]:
    """The steps, with each given or test cell held back until every given or test cell that
    precedes it in the master has run."""
    order = sorted(m for m, s in items if m is not None and s.kind in ("given", "test"))
    steps: list[Step] = []
    held: dict[int, Step] = {}
    k = 0
    for m, step in items:
        if m is None or step.kind not in ("given", "test"):
            steps.append(step)
            continue
        if m != order[k] and step.kind == "test" and not step.note:
            step = replace(step, note=f"in your notebook this test is above "
                                      f"{masters[order[k]].grade_id}, which comes before it in "
                                      "the assignment; it ran right after that cell")
        held[m] = step
        while k < len(order) and order[k] in held:
            steps.append(held.pop(order[k]))
            k += 1
    return steps


def _note_tests_above_answers(steps: list[Step], masters: list[Step]) -> list[Step]:
    """Note each test that runs before the first part of the student's answer it follows in
    the master: the likeliest reason it fails, so this note replaces any other."""
    answer_of, answer = {}, ""
    for s in masters:
        if s.kind == "missing":
            answer = s.grade_id
        elif s.kind == "test" and answer:
            answer_of[s.grade_id] = answer
    first: dict[str, int] = {}
    for i, s in enumerate(steps):
        if s.kind == "code" and s.grade_id:
            first.setdefault(s.grade_id, i)
    out = []
    for i, s in enumerate(steps):
        gid = answer_of.get(s.grade_id, "") if s.kind == "test" else ""
        if first.get(gid, -1) > i:
            s = replace(s, note=f"in your notebook this test is above your answer cell {gid}, "
                                "and cells run in your notebook's order: move it below")
        out.append(s)
    return out


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


def given_imports(master: dict) -> tuple[str, ...]:
    """The top-level packages the instructor's given cells import (``torch``, ``numpy``):
    a sandbox can import them before the notebook needs them (see ``Sandbox``)."""
    import ast

    found = []
    for cell in master["cells"]:
        if master_step(cell).kind != "given":
            continue
        try:
            tree = ast.parse(cell["source"])
        except SyntaxError:
            continue
        for node in tree.body:
            names = ([a.name for a in node.names] if isinstance(node, ast.Import) else
                     [node.module] if isinstance(node, ast.ImportFrom) and node.module and
                     not node.level else [])
            found += [n.split(".")[0] for n in names]
    return tuple(dict.fromkeys(found))
