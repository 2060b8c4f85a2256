"""One wrong answer costs only its own cells: how selftest knows which cells use which answer,
and what a student reads when a test cell depended on another one anyway. (The graded check
itself, ``selftest(..., independence=True)`` for every assignment, runs in test_autograder.)"""

import nbformat
import pytest

from autograder.authoring.selftest import answer_map, defined_names
from autograder.course import assignments, source_notebook
from autograder.scoring.execute import name_hint


def test_defined_names_are_the_answer_cells_top_level_definitions():
    source = ("import numpy as np\n\ndef f(x):\n    y = 1\n    return g(x)\n\n"
              "class Model:\n    pass\n\nTABLE, (a, b) = {}, (1, 2)\nlimit: int = 3\n")
    assert defined_names(source) == {"f", "Model", "TABLE", "a", "b", "limit"}


@pytest.mark.parametrize("assignment", assignments())
def test_every_answer_is_used_by_a_test_cell_and_every_test_cell_uses_an_answer(assignment):
    nb = nbformat.read(source_notebook(assignment), as_version=4)
    answers = answer_map(nb)
    tests = {c.metadata["nbgrader"]["grade_id"] for c in nb.cells  # written answers, graded
             if c.metadata.get("nbgrader", {}).get("grade")           # by hand, are not tests
             and not c.metadata["nbgrader"].get("solution")}
    assert answers and all(info["tests"] for info in answers.values()), answers
    assert set().union(*(info["tests"] for info in answers.values())) == tests


@pytest.mark.parametrize("assignment", assignments())
def test_no_test_cell_reads_a_name_another_test_cell_defines(assignment):
    """The static half of the check: a test's free names are answers, given cells' names or
    builtins, never something an earlier test cell left behind."""
    from autograder.scoring.execute import free_and_bound_names

    nb = nbformat.read(source_notebook(assignment), as_version=4)
    left_behind: dict[str, str] = {}
    for cell in nb.cells:
        info = cell.metadata.get("nbgrader", {})
        if cell.cell_type != "code" or not info.get("grade") or info.get("solution"):
            continue
        reads, binds = free_and_bound_names(cell.source)
        borrowed = {n: left_behind[n] for n in reads if n in left_behind}
        assert not borrowed, f"{info['grade_id']} reads names other test cells define: {borrowed}"
        left_behind.update(dict.fromkeys(binds, info["grade_id"]))


def _name_error(code: str, filename: str) -> NameError:
    try:
        exec(compile(code, filename, "exec"), {})
    except NameError as exc:
        return exc
    raise AssertionError("no NameError")


def test_a_missing_grader_helper_is_reported_as_a_grader_bug():
    hint = name_hint(_name_error("_oracle_forward(1)", "<test t>"), "<test t>")
    assert "helper of the grader's" in hint and "earlier test cell" in hint
    assert "bug in the grader" in hint and "exactly this name" not in hint


def test_a_missing_answer_still_asks_for_the_function():
    hint = _name_error("rnn_forward(1)", "<test t>")
    assert name_hint(hint, "<test t>") == " (is the function defined, under exactly this name?)"


def test_a_name_error_inside_the_students_code_is_not_blamed_on_the_grader():
    # raised by the proxy for the student's function, not by the test cell's own line
    exc = _name_error("_their_helper(1)", "<student cell>")
    assert "grader" not in name_hint(exc, "<test t>")
