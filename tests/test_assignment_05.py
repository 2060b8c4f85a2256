"""Assignment 05: a stubbed answer costs only its own test cells.

``multi_head_attention`` uses the student's ``split_heads``, ``merge_heads`` and
``scaled_dot_product_attention``, and ``pre_ln_block`` uses their ``multi_head_attention``; the
test cells of those two pass reference versions in through ``parts``. One sandboxed grading run
(2 workers) grades two submissions that between them stub every answer once, each with the
answers it builds on stubbed and itself intact: the first stubs the three parts of multi-head
attention (``multi_head_attention`` must keep its points), the second stubs
``multi_head_attention`` (``pre_ln_block`` must keep its points). Each loses exactly the cells
of the answers it stubs.
"""

import json
import re

import nbformat
import pytest

from autograder.authoring.course import source_notebook
from autograder.isolation.sandbox import sandbox_problem
from autograder.scoring.grade import grade

A = "05_transformer"
FULL = 15.0
OWN_CELLS = {
    "scaled_dot_product_attention": {"test_sdpa", "test_sdpa_mask"},
    "split_heads": {"test_split_heads"},
    "merge_heads": {"test_merge_heads"},
    "multi_head_attention": {"test_mha", "test_mha_mask"},
    "sinusoidal_positions": {"test_positions"},
    "causal_mask": {"test_causal_mask"},
    "pre_ln_block": {"test_block_ffn", "test_block"},
}
SUBMISSIONS = {
    "parts": ("scaled_dot_product_attention", "split_heads", "merge_heads", "causal_mask",
              "pre_ln_block"),
    "attention": ("multi_head_attention", "sinusoidal_positions"),
}

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
    stubbed_once = [f for fs in SUBMISSIONS.values() for f in fs]
    assert sorted(stubbed_once) == sorted(OWN_CELLS)


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
