"""Prove an assignment gradable: the solution gets full marks, the untouched release gets 0 and
grades cleanly, and the release leaks nothing (``release`` refuses to write one that does).

With ``independence``, also prove that one wrong answer costs only its own cells: each answer
cell in turn is replaced by the release's stub (``raise NotImplementedError()``) in an otherwise
correct solution, and only the test cells that *exercise* that answer may lose points.

Which test cells exercise which answer is derived from the names, with ``ast``: an answer cell
defines names at its top level (``def``, ``class``, assignments), and a test cell exercises it
when the test reads one of those names without binding it itself (the names the grader fetches
from the student's notebook, see ``execute.free_and_bound_names``). A test that grades
``modified_precision`` exercises that answer, not ``ngrams``, even if the student's
``modified_precision`` calls their ``ngrams``: such a test must put a reference in its place
(the ``parts=`` pattern of assignments 05-07), so a bug in ``ngrams`` costs only ``ngrams``'
cells. A test cell that reads
a name another test cell left behind (an oracle, a helper) fails this check too, because the
other cell stops before defining it once its own answer is stubbed.

A stubbed answer must lose at least one cell (otherwise nothing tests it), every cell it loses
must exercise it, and the submission must still be ``graded`` (not crashed or timed out). All
variants of an assignment are graded in one ``grade`` call, one sub-folder each.
"""

from __future__ import annotations

import ast
import json
import shutil
import tempfile
import time
from pathlib import Path

import nbformat

from ..course import COURSE, assignments, source_notebook
from ..intake.normalize import measurement_for
from ..scoring.execute import free_and_bound_names
from ..scoring.grade import grade
from ..scoring.results import Status
from .release import release


def defined_names(source: str) -> set[str]:
    """Names an answer cell defines at its top level (functions, classes, assignments; not the
    modules it imports, which tests use too)."""
    names = set()
    for node in ast.parse(source).body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                names.update(n.id for n in ast.walk(target) if isinstance(n, ast.Name))
    return names


def answer_map(source: nbformat.NotebookNode) -> dict[str, dict]:
    """For each answer cell that tests grade (by grade_id): the names it defines and the test
    cells (grade_ids) that exercise it, i.e. read one of those names. Cells graded by hand
    (with points of their own, or measuring for a written answer) are left out."""
    tests = {c.metadata["nbgrader"]["grade_id"]: free_and_bound_names(c.source)[0]
             for c in source.cells if c.cell_type == "code"
             and c.metadata.get("nbgrader", {}).get("grade")
             and not c.metadata["nbgrader"].get("solution")}
    answers = {}
    for cell in source.cells:
        info = cell.metadata.get("nbgrader", {})
        if cell.cell_type == "code" and info.get("solution") and not info.get("grade") \
                and not measurement_for(cell.metadata):
            names = defined_names(cell.source)
            answers[info["grade_id"]] = {
                "names": names, "tests": {t for t, reads in tests.items() if reads & names}}
    return answers


def stubbed(source: nbformat.NotebookNode, released: nbformat.NotebookNode,
            answer: str) -> nbformat.NotebookNode:
    """The solution with the answer cell ``answer`` replaced by the release's version of it."""
    stubs = {c.metadata.get("nbgrader", {}).get("grade_id"): c.source for c in released.cells}
    nb = nbformat.from_dict(json.loads(json.dumps(source)))
    for cell in nb.cells:
        if cell.metadata.get("nbgrader", {}).get("grade_id") == answer:
            cell.source = stubs[answer]
    return nb


def _variant(answer: str) -> str:
    return f"stub-{answer}"


def selftest(assignment: str, course: Path = COURSE, log=print, independence: bool = False,
             workers: int | None = None) -> list[str]:
    """Return the failures found (empty when the assignment is sound)."""
    failures = []
    start = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        released = release(assignment, tmp / "release", course)  # raises on any leak
        release_nb = released / f"{assignment}.ipynb"
        subs = tmp / "submissions"
        for student, notebook in [("solution", source_notebook(assignment, course)),
                                  ("untouched", release_nb)]:
            (subs / student).mkdir(parents=True)
            shutil.copy(notebook, subs / student / f"{assignment}.ipynb")
        answers = {}
        if independence:
            source = nbformat.read(source_notebook(assignment, course), as_version=4)
            release_cells = nbformat.read(release_nb, as_version=4)
            answers = answer_map(source)
            for answer in answers:
                (subs / _variant(answer)).mkdir(parents=True)
                nbformat.write(stubbed(source, release_cells, answer),
                               subs / _variant(answer) / f"{assignment}.ipynb")
        rows = {r["student_id"]: r for r in grade(assignment, subs, tmp / "out", course,
                                                  workers=workers, log=lambda *a: None)}
        results = {student: json.loads((tmp / "out" / "feedback" / student / "feedback.json")
                                       .read_text())["tests"] for student in rows}
    solution, untouched = rows["solution"], rows["untouched"]
    by_hand = _by_hand(assignment, course)
    autograded = solution["max_score"] - sum(by_hand.values())
    if solution["status"] not in (Status.GRADED, Status.NEEDS_MANUAL) or \
            solution["auto_score"] != autograded or solution["needs_manual"] != len(by_hand):
        failures.append(f"{assignment}: the solution scored {solution['auto_score']:g}/"
                        f"{autograded:g} by the autograder with {solution['needs_manual']} of "
                        f"{len(by_hand)} written answer(s) left to grade ({solution['status']} "
                        f"{solution['message']})")
    if untouched["status"] != Status.GRADED or untouched["score"] != 0:
        failures.append(f"{assignment}: the untouched release scored {untouched['score']} "
                        f"({untouched['status']} {untouched['message']})")
    failures += _rubrics(assignment, course)
    for answer, info in answers.items():
        failures += _independent(assignment, answer, info, rows[_variant(answer)],
                                 results[_variant(answer)], log)
    log(f"selftest {assignment}: {'ok' if not failures else 'FAILED'} "
        f"(solution {solution['auto_score']:g}/{autograded:g} autograded, "
        f"{sum(by_hand.values()):g} point(s) by hand, untouched {untouched['score']}"
        f"{f', {len(answers)} answers stubbed in turn' if answers else ''})"
        f" in {time.perf_counter() - start:.1f} s")
    return failures


def _by_hand(assignment: str, course: Path) -> dict[str, float]:
    """The assignment's cells graded by hand: grade_id -> points."""
    from ..intake.normalize import manual, master_step, read_notebook

    master = read_notebook(source_notebook(assignment, course))
    return {s.grade_id: s.points for s in map(master_step, master["cells"]) if manual(s)}


def _rubrics(assignment: str, course: Path) -> list[str]:
    """Each written question's rubric, if it has one, is well formed and adds up to its
    points; each measurement cell names a written question."""
    from ..intake.normalize import manual, master_step, read_notebook
    from ..scoring.results import rubric

    failures = []
    master = read_notebook(source_notebook(assignment, course))
    steps = list(map(master_step, master["cells"]))
    written = {s.grade_id for s in steps if s.kind == "written"}
    for step in steps:
        target = measurement_for(step.metadata) if step.kind == "missing" else ""
        if target and target not in written:
            failures.append(f"{assignment}: {step.grade_id} measures for {target!r}, which is "
                            f"not a written question of the assignment (those are: "
                            f"{', '.join(sorted(written)) or 'none'})")
    for step in filter(manual, steps):
        try:
            items = rubric(step.metadata)
        except ValueError as err:
            failures.append(f"{assignment}: {step.grade_id}: {err}")
            continue
        if items and abs(sum(i["points"] for i in items) - step.points) > 1e-9:
            failures.append(f"{assignment}: {step.grade_id}'s rubric adds up to "
                            f"{sum(i['points'] for i in items):g} points, the cell has "
                            f"{step.points:g}")
    return failures


def _independent(assignment: str, answer: str, info: dict, row: dict, tests: list[dict],
                 log) -> list[str]:
    """Failures of one stubbed answer: it must cost something, and only cells that use it."""
    lost = {t["test"]: t for t in tests if not t["passed"]}
    names = ", ".join(sorted(info["names"]))
    where = f"{assignment}: with the answer {answer} ({names}) stubbed"
    failures = []
    if row["status"] not in (Status.GRADED, Status.NEEDS_MANUAL):
        failures.append(f"{where}, grading ended {row['status']}: {row['message'][:300]}")
    for test in sorted(set(lost) - info["tests"]):
        failures.append(f"{where}, {test} lost its points although it uses none of these "
                        f"names: {lost[test]['message'][:300]}")
    if not lost:
        failures.append(f"{where}, no test cell lost points: nothing tests this answer")
    points = sum(t["max_points"] for t in lost.values())
    log(f"  {answer} stubbed: loses {', '.join(sorted(lost)) or 'nothing'} ({points:g} "
        f"point(s)); cells using it: {', '.join(sorted(info['tests'])) or 'none'}")
    return failures


def selftest_all(names: list[str] | None = None, course: Path = COURSE, log=print,
                 independence: bool = False) -> list[str]:
    failures = []
    for name in names or assignments(course):
        failures += selftest(name, course, log, independence=independence)
    return failures
