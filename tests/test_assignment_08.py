"""Assignment 08: mistakes that the sandbox would hide are still caught, each in its own cell.

Graded calls cross into the sandbox as copies of their arguments, and torch's global generator
is reseeded before every call. So writing into ``ids`` in place, drawing from the global
generator, and popping the caller's lists would pass unnoticed if the tests did not look for them
(ids whose rows share memory, the three draws isolated one at a time, tuples for lists). One
sandboxed grading run (2 workers) grades the three mistakes. That a stubbed answer costs only its
own cells is ``selftest --independence``'s job, which the suite runs for every assignment.
"""

import json
import re

import nbformat
import pytest

from autograder.authoring.course import source_notebook
from autograder.isolation.sandbox import sandbox_problem
from autograder.scoring.grade import grade

A = "08_bert_mlm"
FULL = 12.0
OWN_CELLS = {
    "mask_tokens": {"test_mask_rules", "test_mask_rates", "test_mask_generator"},
    "mlm_loss": {"test_mlm_loss_value", "test_mlm_loss_ignores"},
    "pack_pair": {"test_pack_layout", "test_pack_truncation"},
}
_DRAWS = """
    special = torch.isin(ids, torch.tensor(special_ids))
    ordinary = torch.tensor([i for i in range(vocab_size) if i not in special_ids])
    u = torch.rand(ids.shape{g})
    v = torch.rand(ids.shape{g})
    r = torch.randint(len(ordinary), ids.shape{g})
    chosen = (u < p) & ~special
    to_mask = chosen & (v < mask_rate)
    to_random = chosen & (v >= mask_rate) & (v < mask_rate + random_rate)
"""
# name: (function, its wrong body, the test cells it must lose)
WRONG = {
    "writes_into_ids": ("mask_tokens", _DRAWS.format(g=", generator=generator") + """
    labels = ids.masked_fill(~chosen, -100)
    ids[to_mask] = mask_id
    ids[to_random] = ordinary[r][to_random]
    return ids, labels
""", {"test_mask_rules"}),
    "global_generator": ("mask_tokens", _DRAWS.format(g="") + """
    inputs = torch.where(to_random, ordinary[r], ids.masked_fill(to_mask, mask_id))
    return inputs, ids.masked_fill(~chosen, -100)
""", {"test_mask_generator"}),
    "pops_the_callers_lists": ("pack_pair", """
    if max_len < (2 if b is None else 3):
        raise ValueError("max_len too small")
    while len(a) + len(b or []) + (2 if b is None else 3) > max_len:
        (a if b is None or len(a) >= len(b) else b).pop()
    if b is None:
        return [cls_id, *a, sep_id], [0] * (len(a) + 2)
    return [cls_id, *a, sep_id, *b, sep_id], [0] * (len(a) + 2) + [1] * (len(b) + 1)
""", {"test_pack_truncation"}),
}

pytestmark = pytest.mark.skipif(bool(sandbox_problem()), reason="needs bubblewrap: "
                                + (sandbox_problem() or ""))


def replaced(function: str, body: str) -> nbformat.NotebookNode:
    """The solution with ``function``'s solution region replaced by ``body``."""
    nb = nbformat.read(source_notebook(A), as_version=4)
    region = re.compile(rf"(def {function}\(.*?)\n *### BEGIN SOLUTION\n.*?### END SOLUTION",
                        re.DOTALL)
    cells = [c for c in nb.cells if c.cell_type == "code"
             and c.metadata["nbgrader"].get("solution") and f"def {function}(" in c.source]
    assert len(cells) == 1, f"expected one answer cell defining {function}"
    cells[0].source, found = region.subn(lambda m: m.group(1) + body.rstrip("\n"),
                                         cells[0].source)
    assert found == 1, function
    return nb


def test_every_answer_is_named_and_every_test_cell_owned():
    nb = nbformat.read(source_notebook(A), as_version=4)
    tests = {c.metadata["nbgrader"]["grade_id"]: c.metadata["nbgrader"]["points"]
             for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade")}
    assert set(tests) == set().union(*OWN_CELLS.values())
    assert sum(tests.values()) == FULL
    assert all(cells <= OWN_CELLS[function] for function, _, cells in WRONG.values())


def test_hidden_mistakes_cost_only_their_own_cells(tmp_path):
    notebooks = {name: replaced(function, body) for name, (function, body, _) in WRONG.items()}
    for name, nb in notebooks.items():
        (tmp_path / "subs" / name).mkdir(parents=True)
        nbformat.write(nb, tmp_path / "subs" / name / f"{A}.ipynb")
    rows = grade(A, tmp_path / "subs", tmp_path / "out", workers=2, log=lambda *a: None)
    assert len(rows) == len(notebooks)
    for row in rows:
        name = row["student_id"]
        feedback = json.loads((tmp_path / "out" / "feedback" / name / "feedback.json")
                              .read_text())
        lost = {t["test"] for t in feedback["tests"] if not t["passed"]}
        assert row["status"] == "graded", row
        assert lost == WRONG[name][2], (name, feedback["tests"])
        cost = sum(t["max_points"] for t in feedback["tests"] if t["test"] in lost)
        assert float(row["score"]) == FULL - cost, row
