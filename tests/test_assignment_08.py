"""Assignment 08: mistakes that the sandbox would hide are still caught, each in its own cell.

Graded calls cross into the sandbox as copies of their arguments, and torch's global generator
is reseeded before every call. So writing into ``ids`` in place, drawing from the global
generator, and popping the caller's lists would pass unnoticed if the tests did not look for them
(ids whose rows share memory, the three draws isolated one at a time, tuples for lists). One
sandboxed grading run grades the three mistakes (``test_redteam``'s harness). Which cells each
answer owns is pinned in ``test_assignment_parts.py``; that a stubbed answer costs only its own
cells is ``selftest --independence``'s job, which the suite runs for every assignment.
"""

import re

import pytest
from test_hostile import cell_of
from test_redteam import feedback, graded, notebook

from autograder.isolation.sandbox import sandbox_problem

A = "08_bert_mlm"
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
# name: (answer cell and function, its wrong body, the test cells it must lose)
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


def with_body(function: str, body: str) -> str:
    """The solution's answer cell ``function`` with its solution region replaced by ``body``."""
    source = "".join(cell_of(notebook(A), function)["source"])
    region = re.compile(r"\n *### BEGIN SOLUTION\n.*?### END SOLUTION", re.DOTALL)
    source, found = region.subn(lambda m: "\n" + body.strip("\n"), source)
    assert found == 1, function
    return source


def test_hidden_mistakes_cost_only_their_own_cells(tmp_path):
    students = {name: notebook(A, **{function: with_body(function, body)})
                for name, (function, body, _) in WRONG.items()}
    rows, out = graded(tmp_path, A, students)
    for name, (_, _, lost) in WRONG.items():
        tests = feedback(out, name)
        assert {t for t, r in tests.items() if not r["passed"]} == lost, (name, tests)
        cost = sum(tests[t]["max_points"] for t in lost)
        assert (rows[name]["status"], rows[name]["score"]) == ("graded", 12 - cost), rows[name]
