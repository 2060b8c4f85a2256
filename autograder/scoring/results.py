"""What grading produces, declared once: the status of a submission, the result of one test
cell, the result of one notebook, and how a result reads on Gradescope.

Results stay plain dicts (``TypedDict``), so they go into JSON feedback, CSV rows and the
gradebook as they are; ``Status`` is a ``str`` for the same reason.
"""

from __future__ import annotations

from enum import Enum
from typing import TypedDict


class Status(str, Enum):
    """How grading of one submission ended."""

    GRADED = "graded"          # every test ran (some may have failed)
    NEEDS_MANUAL = "needs manual grading"  # graded but for answers a grader has yet to score
    TIMEOUT = "timeout"        # a cell or the notebook ran past its time limit
    CRASHED = "crashed"        # the student's kernel died or broke the protocol
    UNGRADABLE = "ungradable"  # no notebook to grade (a PDF, an empty file, ...)
    ERROR = "error"            # the grader itself failed: never the student's fault
    UNGRADED = "ungraded"      # (merge) its shard's run stopped first (a killed task): no score

    def __str__(self) -> str:
        return self.value

    def __format__(self, spec: str) -> str:
        return format(self.value, spec)


class TestResult(TypedDict):
    """One graded test cell."""

    test: str          # its nbgrader grade_id
    points: float      # points earned
    max_points: float
    passed: bool
    message: str       # why points were lost, in words a student can act on; "" if passed
    visibility: str    # "visible": the cell has tests students see; "hidden": only hidden ones
    has_hidden: bool   # whether the cell has hidden tests
    hidden_failed: bool  # the visible tests passed and a hidden check failed


class ManualAnswer(TypedDict):
    """One answer graded by hand (nbgrader's manually graded answer), as the autograder
    leaves it: blank ones score 0 at once, as in nbgrader; the others wait for a grader."""

    cell: str          # its nbgrader grade_id
    max_points: float
    blank: bool        # empty, or the release's stub left as it was
    digest: str        # sha256 of the answer as written: a regrade keeps a manual grade
    rubric: list[dict]  # [{"criterion": str, "points": float}], for graders and feedback


class Result(TypedDict):
    """One graded notebook."""

    status: Status
    message: str               # what stopped grading or went wrong in the student's cells
    tests: list[TestResult]    # every test cell of the master, in its order
    manual: list[ManualAnswer]  # every answer graded by hand, in the master's order
    outputs: list[dict]        # per step: {"stdout": ..., "error": (ename, evalue), ...}


CODE_STUB = "# YOUR CODE HERE\nraise NotImplementedError()"  # nbgrader_config.py's code_stub


def rubric(metadata: dict) -> list[dict]:
    """A hand-graded cell's rubric, ``metadata.autograder.rubric``: a list of
    ``{"criterion": text, "points": number}``; ValueError naming what is wrong."""
    items = metadata.get("autograder", {}).get("rubric", [])
    if not isinstance(items, list) or not all(
            isinstance(i, dict) and isinstance(i.get("criterion"), str) and i["criterion"]
            and isinstance(i.get("points"), (int, float)) and not isinstance(i["points"], bool)
            and i["points"] >= 0 for i in items):
        raise ValueError(f"metadata.autograder.rubric must be a list of {{criterion: text, "
                         f"points: number >= 0}}, got {items!r}")
    return [{"criterion": i["criterion"], "points": float(i["points"])} for i in items]


def manual_answers(steps) -> list[ManualAnswer]:
    """The answers of a planned submission (``normalize.plan``) that are graded by hand."""
    import hashlib

    from ..intake.normalize import TEXT_STUB, manual

    found = []
    for k, step in enumerate(steps):
        if not (manual(step) and step.grade_id):
            continue
        text = step.source.strip()
        blank = step.kind == "missing" or text in ("", TEXT_STUB, CODE_STUB)
        beside = _beside(steps, k, TEXT_STUB) if step.kind == "written" and blank else []
        answer = "\n\n".join([step.source, *beside])  # regrades compare all the words
        found.append({"cell": step.grade_id, "max_points": step.points,
                      "blank": blank and not beside,
                      "digest": hashlib.sha256(answer.encode()).hexdigest(),
                      "rubric": rubric(step.metadata)})
    return found


def _beside(steps, k: int, stub: str) -> list[str]:
    """What the student wrote in markdown cells of their own right around the written
    question ``steps[k]`` (among the cells they added between it and the instructor's cells
    before and after it): perhaps the answer, put beside a question left blank, which a person
    then reads rather than a blank answer scoring 0. The instructor's text in a cell that lost
    its metadata does not count."""
    given = {s.source.strip() for s in steps if s.kind == "markdown" and s.grade_id}
    near = []
    for direction in (-1, 1):
        at = k + direction
        while 0 <= at < len(steps) and not steps[at].grade_id:
            near.append(steps[at])
            at += direction
    return [s.source for s in near
            if s.kind == "markdown" and s.source.strip() not in given | {"", stub}]


def clip(text: str, limit: int) -> str:
    """``text`` in at most ``limit`` characters, cut between words (with "…"), never inside
    one: messages go to students."""
    if len(text) <= limit:
        return text
    cut = text[:limit - 1]
    space = cut.rfind(" ")
    return (cut[:space] if space > limit // 2 else cut).rstrip(" ,;:") + "…"


def test_result(test: str, max_points: float, passed: bool, message: str, source: str,
                hidden_failed: bool = False) -> TestResult:
    """The result of the test cell ``test`` (its master ``source``): all points or none."""
    from ..intake.markers import has_visible_code, hidden_lines

    return {"test": test, "points": max_points if passed else 0.0, "max_points": max_points,
            "passed": passed, "message": clip(message, 1000), "hidden_failed": hidden_failed,
            "visibility": "visible" if has_visible_code(source) else "hidden",
            "has_hidden": bool(hidden_lines(source))}


def gradescope_tests(result: Result, visibility: dict[str, str]) -> list[dict]:
    """The tests of a result as Gradescope's results.json lists them."""
    return [{"name": t["test"], "score": t["points"], "max_score": t["max_points"],
             "output": "passed" if t["passed"] else t["message"],
             "visibility": visibility.get(t["test"], "visible")} for t in result["tests"]]
