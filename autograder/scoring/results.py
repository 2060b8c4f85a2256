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


class Result(TypedDict):
    """One graded notebook."""

    status: Status
    message: str               # what stopped grading or went wrong in the student's cells
    tests: list[TestResult]    # every test cell of the master, in its order
    outputs: list[dict]        # per step: {"stdout": ..., "error": (ename, evalue)}


def test_result(test: str, max_points: float, passed: bool, message: str, source: str,
                hidden_failed: bool = False) -> TestResult:
    """The result of the test cell ``test`` (its master ``source``): all points or none."""
    from ..authoring.release import has_visible_code, hidden_lines

    return {"test": test, "points": max_points if passed else 0.0, "max_points": max_points,
            "passed": passed, "message": message[:1000], "hidden_failed": hidden_failed,
            "visibility": "visible" if has_visible_code(source) else "hidden",
            "has_hidden": bool(hidden_lines(source))}


def gradescope_tests(result: Result, visibility: dict[str, str]) -> list[dict]:
    """The tests of a result as Gradescope's results.json lists them."""
    return [{"name": t["test"], "score": t["points"], "max_score": t["max_points"],
             "output": "passed" if t["passed"] else t["message"],
             "visibility": visibility.get(t["test"], "visible")} for t in result["tests"]]
