"""Assignment 04 forbids torch's fused attention, and the grader enforces it at torch's dispatcher.

One sandboxed grading run (2 workers) covers the honest solution and one submission per way of
cheating; each cheat replaces only the ``sdpa`` answer and must lose exactly the 3 points of the
test that grades it through ``own_work``, with a message saying why. The visible test calls the
answer outside ``own_work``, where fused attention works as usual, so cheaters keep that point.
A second part checks ``own_work`` in a student's own kernel (no sandbox), where the same guard
runs best effort. Needs bubblewrap for the first part (``.ci/run`` installs it).
"""

import gc
import json
import sys

import pytest
import torch
import torch.nn.functional as F
from test_hostile import cell_of

from autograder.checks import NO_FUSED_ATTENTION, own_work
from autograder.course import source_notebook
from autograder.grade import grade
from autograder.sandbox import Limits, sandbox_problem

A = "04_attention"
FULL = 11.0
LIMITS = Limits(timeout_cell=20, timeout_notebook=150, memory_mb=2048, max_procs=64)

WEIGHTS = '''import gc
import math
import sys

import torch
import torch.nn.functional as F


def _weights(query, key, mask):
    scores = query @ key.transpose(-2, -1) / math.sqrt(query.shape[-1])
    if mask is None:
        return torch.softmax(scores, dim=-1)
    mask = mask.expand_as(scores)
    weights = torch.softmax(scores.masked_fill(~mask, float("-inf")), dim=-1)
    return torch.nan_to_num(weights, nan=0.0).masked_fill(~mask, 0.0)

'''


def fused_by(call: str, first: str = "") -> str:
    """An answer whose weights are honest and whose output comes from ``call`` (fused)."""
    return WEIGHTS + (
        "\ndef scaled_dot_product_attention(query, key, value, mask=None):\n"
        f"{first}    return {call}(query, key, value, attn_mask=mask), "
        "_weights(query, key, mask)\n")


REMOVES = WEIGHTS + '''
def scaled_dot_product_attention(query, key, value, mask=None):
    import autograder.checks
    autograder.checks.own_work = lambda fn, *args, **kwargs: fn(*args, **kwargs)
    for obj in gc.get_objects():
        if isinstance(obj, torch.library.Library) and any("attention" in name
                                                           for name in obj._op_impls):
            obj._destroy()
    out = torch.ops.aten.scaled_dot_product_attention(query, key, value, attn_mask=mask)
    return out, _weights(query, key, mask)
'''

REINSTALLS = WEIGHTS + '''
def scaled_dot_product_attention(query, key, value, mask=None):
    """Take the monitor off, use fused attention, put the very same kernels back."""
    fused = torch.ops.aten.scaled_dot_product_attention
    armed = next((o for o in gc.get_objects() if type(o).__name__ == "_Armed"), None)
    if armed is None:  # not graded right now
        return fused(query, key, value, attn_mask=mask), _weights(query, key, mask)
    kernels = {}
    for f in gc.get_objects():
        if type(f) is type(_weights) and f.__name__ == "refuse":
            cells = dict(zip(f.__code__.co_freevars, (c.cell_contents for c in f.__closure__)))
            if cells.get("used") is armed.used:
                kernels[cells["op"]] = f
    lib, handle = armed.lib, armed.handle
    registrations = [entry.split("/")[1:] for entry in lib._op_impls]
    lib._destroy()
    out = fused(query, key, value, attn_mask=mask)
    lib.m = handle
    for name, dispatch_key in registrations:
        handle.impl(name, dispatch_key, kernels["aten::" + name], False)
    lib._op_impls.update(f"aten/{name}/{dispatch_key}" for name, dispatch_key in registrations)
    return out, _weights(query, key, mask)
'''

LAZY = WEIGHTS + '''
class Pair:
    """Computes only when unpacked, after the graded call has returned."""

    def __init__(self, *args):
        self.args = args

    def __iter__(self):
        query, key, value, mask = self.args
        out = F.scaled_dot_product_attention(query, key, value, attn_mask=mask)
        return iter([out, _weights(query, key, mask)])


def scaled_dot_product_attention(query, key, value, mask=None):
    return Pair(query, key, value, mask)
'''

CHEATS = {  # student -> (sdpa answer, what the failed test's message must say)
    "aten_op": (fused_by("torch.ops.aten.scaled_dot_product_attention"),
                "calls scaled_dot_product_attention: answers must compute attention themselves"),
    "c_nn": (fused_by("torch._C._nn.scaled_dot_product_attention"),
             "calls scaled_dot_product_attention: answers must compute attention themselves"),
    "profiler_off": (fused_by("F.scaled_dot_product_attention", "    sys.setprofile(None)\n"),
                     "the call monitor was switched off"),
    "removes_monitor": (REMOVES, "the fused-attention monitor was disabled during your function"),
    "reinstalls_monitor": (REINSTALLS, "the fused-attention monitor was disabled during your "
                                       "function"),
}


def submission(sdpa: str | None = None) -> dict:
    """The master solution as JSON, its ``sdpa`` answer replaced when given."""
    nb = json.loads(source_notebook(A).read_text())
    if sdpa is not None:
        cell_of(nb, "sdpa")["source"] = sdpa
    return nb


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    if sandbox_problem():
        pytest.skip(f"needs bubblewrap: {sandbox_problem()}")
    tmp = tmp_path_factory.mktemp("attention")
    subs, out = tmp / "subs", tmp / "out"
    for student, sdpa in [("honest", None), ("lazy_result", LAZY),
                          *((s, c[0]) for s, c in CHEATS.items())]:
        (subs / student).mkdir(parents=True)
        (subs / student / f"{A}.ipynb").write_text(json.dumps(submission(sdpa)))
    rows = grade(A, subs, out, limits=LIMITS, workers=2, log=lambda *a: None)
    return {r["student_id"]: r for r in rows}, out


def feedback(out, student) -> list[dict]:
    return json.loads((out / "feedback" / student / "feedback.json").read_text())["tests"]


def test_the_honest_solution_gets_full_marks(graded):
    rows, _ = graded
    assert rows["honest"]["status"] == "graded", rows["honest"]
    assert rows["honest"]["score"] == FULL, rows["honest"]


@pytest.mark.parametrize("student", sorted(CHEATS))
def test_each_cheat_loses_exactly_the_graded_attention_test(graded, student):
    rows, out = graded
    row = rows[student]
    assert (row["status"], row["score"], row["max_score"]) == ("graded", FULL - 3, FULL), row
    failed = [t for t in feedback(out, student) if not t["passed"]]
    assert [t["test"] for t in failed] == ["test_sdpa_random"], failed
    assert CHEATS[student][1] in failed[0]["message"], failed[0]["message"]


def test_a_result_computed_after_the_call_is_refused_as_not_a_tuple(graded):
    """An object that runs fused attention only when unpacked, outside the watched call, is not
    the tuple the spec asks for: both attention tests refuse it before unpacking it."""
    rows, out = graded
    assert (rows["lazy_result"]["status"], rows["lazy_result"]["score"]) == ("graded", FULL - 4)
    failed = {t["test"]: t["message"] for t in feedback(out, "lazy_result") if not t["passed"]}
    assert sorted(failed) == ["test_sdpa_random", "test_sdpa_visible"], failed
    assert all("should return a tuple (output, weights), got Pair" in m for m in failed.values())


def q4() -> torch.Tensor:
    return torch.randn(1, 2, 3, 4)


ROUTES = {
    "F": lambda q: F.scaled_dot_product_attention(q, q, q),
    "torch.ops": lambda q: torch.ops.aten.scaled_dot_product_attention(q, q, q),
    "torch._C._nn": lambda q: torch._C._nn.scaled_dot_product_attention(q, q, q),
    "flash kernel": lambda q: torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(
        q, q, q)[0],
    "math kernel": lambda q: torch.ops.aten._scaled_dot_product_attention_math(q, q, q)[0],
    "vmap": lambda q: torch.vmap(F.scaled_dot_product_attention)(q, q, q),
    "no_grad": lambda q: torch.no_grad()(F.scaled_dot_product_attention)(q, q, q),
    "nn.MultiheadAttention": lambda q: torch.nn.MultiheadAttention(4, 1, batch_first=True)(
        q[0], q[0], q[0])[0],
}


@pytest.mark.parametrize("route", sorted(ROUTES))
def test_own_work_in_a_students_kernel_catches_every_route(route):
    with pytest.raises(AssertionError, match="answers must compute attention themselves"):
        own_work(ROUTES[route], q4(), forbidden_calls=NO_FUSED_ATTENTION)
    assert F.scaled_dot_product_attention(*[q4()] * 3).shape == (1, 2, 3, 4)  # torch as usual


def test_own_work_in_a_students_kernel_passes_honest_work_and_fails_closed():
    q = q4()
    honest = own_work(lambda q: torch.softmax(q @ q.transpose(-2, -1) / 2, -1) @ q, q,
                      forbidden_calls=(F.scaled_dot_product_attention,))
    assert torch.allclose(honest, F.scaled_dot_product_attention(q, q, q))

    def removes(q):  # only the guard's Library: torch's own ones stay, for later tests
        for obj in gc.get_objects():
            if type(obj) is torch.library.Library and (
                    "aten/scaled_dot_product_attention/CompositeImplicitAutograd" in obj._op_impls):
                obj._destroy()
        return torch.ops.aten.scaled_dot_product_attention(q, q, q)

    with pytest.raises(AssertionError, match="monitor was disabled"):
        own_work(removes, q, forbidden_calls=NO_FUSED_ATTENTION)
    with pytest.raises(AssertionError, match="monitor was switched off"):
        own_work(lambda q: sys.setprofile(None), q, forbidden_calls=NO_FUSED_ATTENTION)
    with pytest.raises(TypeError, match="forbidden_calls"):
        own_work(lambda q: q, q, forbidden_calls="torch.nn.MultiheadAttention")
