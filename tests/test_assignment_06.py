"""Assignment 06: a stubbed answer costs only its own test cells.

``sample_step`` uses the student's three filters; its test cells pass reference filters (or
recording stand-ins) in through ``parts``. One sandboxed grading run (2 workers) grades two
submissions: the three filters stubbed (every other cell, ``sample_step``'s included, must keep
its points), and the three decoders ``greedy``, ``beam_search`` and ``sample_step`` stubbed (the
filters' cells must keep theirs). Between them every answer is stubbed once, and each loses
exactly the cells of the answers it stubs.
"""

import json
import re

import nbformat
import pytest

from autograder.authoring.course import source_notebook
from autograder.isolation.sandbox import sandbox_problem
from autograder.scoring.grade import grade

A = "06_decoding"
FULL = 15.0
OWN_CELLS = {
    "greedy": {"test_greedy", "test_greedy_stopping"},
    "beam_search": {"test_beam_search_small", "test_beam_search_length_penalty",
                    "test_beam_search_exhaustive", "test_beam_search_cost"},
    "temperature_scale": {"test_temperature"},
    "top_k_filter": {"test_top_k"},
    "top_p_filter": {"test_top_p"},
    "sample_step": {"test_sample_step_filters", "test_sample_step_frequencies"},
}
SUBMISSIONS = {"filters": ("temperature_scale", "top_k_filter", "top_p_filter"),
               "decoders": ("greedy", "beam_search", "sample_step")}

pytestmark = pytest.mark.skipif(bool(sandbox_problem()), reason="needs bubblewrap: "
                                + (sandbox_problem() or ""))


def stubbed(functions) -> nbformat.NotebookNode:
    """The solution with each function's solution region replaced by the release's stub."""
    nb = nbformat.read(source_notebook(A), as_version=4)
    for function in functions:
        region = re.compile(rf"(def {function}\(.*?)### BEGIN SOLUTION\n.*?### END SOLUTION",
                            re.DOTALL)
        cells = [c for c in nb.cells if c.cell_type == "code"
                 and c.metadata["nbgrader"].get("solution") and f"def {function}(" in c.source]
        assert len(cells) == 1, f"expected one answer cell defining {function}"
        cells[0].source, found = region.subn(r"\1raise NotImplementedError()", cells[0].source)
        assert found == 1, function
    return nb


def test_every_answer_is_named_and_every_test_cell_owned():
    nb = nbformat.read(source_notebook(A), as_version=4)
    tests = {c.metadata["nbgrader"]["grade_id"]: c.metadata["nbgrader"]["points"]
             for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade")}
    assert set(tests) == set().union(*OWN_CELLS.values())
    assert sum(tests.values()) == FULL
    assert {f for fs in SUBMISSIONS.values() for f in fs} == set(OWN_CELLS)


def test_a_stubbed_answer_costs_only_its_own_cells(tmp_path):
    for name, functions in SUBMISSIONS.items():
        (tmp_path / "subs" / name).mkdir(parents=True)
        nbformat.write(stubbed(functions), tmp_path / "subs" / name / f"{A}.ipynb")
    rows = grade(A, tmp_path / "subs", tmp_path / "out", workers=2, log=lambda *a: None)
    assert len(rows) == len(SUBMISSIONS)
    for row in rows:
        name = row["student_id"]
        feedback = json.loads((tmp_path / "out" / "feedback" / name / "feedback.json")
                              .read_text())
        lost = {t["test"] for t in feedback["tests"] if not t["passed"]}
        assert row["status"] == "graded", row
        assert lost == set().union(*(OWN_CELLS[f] for f in SUBMISSIONS[name])), (
            name, feedback["tests"])
        cost = sum(t["max_points"] for t in feedback["tests"] if t["test"] in lost)
        assert float(row["score"]) == FULL - cost, row
