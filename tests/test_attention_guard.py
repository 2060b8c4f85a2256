"""Assignment 04 asks for attention computed by hand; in its sandbox torch's attention refuses.

One sandboxed grading run (2 workers) covers the honest solution and one submission per way of
reaching torch's attention that a student found or might find: fused operators by any name,
ONNX's operator and its Python wrapper, decompositions, the Python multi-head functions and
modules, torch's source copied at run time, and attempts to undo the refusals (the profiler
switched off from C, the garbage collector searched for the guard, ctypes). Each replaces only
the ``sdpa`` answer and must lose exactly that answer's two test cells, with a message saying
why. A second part checks ``own_work`` in a student's own kernel (no sandbox), where the same
refusals hold for one call and are undone after it. Needs bubblewrap for the first part.
"""

import json

import pytest
import torch
import torch.nn.functional as F
from helpers import coded_solution
from test_hostile import cell_of

from autograder.checks import NO_FUSED_ATTENTION, own_work
from autograder.isolation.sandbox import Limits, sandbox_problem
from autograder.scoring.grade import grade

A = "04_attention"
FULL = 11.0  # every autograded point; the written question's 2 are left blank
MAX = 13.0
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


def cheat(body: str) -> str:
    """An answer with honest weights whose output comes from ``body`` (torch's attention)."""
    return WEIGHTS + ("\ndef scaled_dot_product_attention(query, key, value, mask=None):\n"
                      f"{body}    return out, _weights(query, key, mask)\n")


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

REFUSED = "is torch's own attention, which is switched off while this assignment is graded"
CHEATS = {  # student -> (sdpa answer, what the failed tests' messages must say)
    "aten_op": (fused_by("torch.ops.aten.scaled_dot_product_attention"),
                "aten::scaled_dot_product_attention " + REFUSED),
    "c_nn": (fused_by("torch._C._nn.scaled_dot_product_attention"),
             "aten::scaled_dot_product_attention " + REFUSED),
    # the profiler the rules used to rest on, switched off from C code: nothing rests on it now
    "profiler_off": (fused_by("F.scaled_dot_product_attention",
                              "    list(map(sys.setprofile, [None]))\n"),
                     "aten::scaled_dot_product_attention " + REFUSED),
    "flash_kernel": (cheat("    out = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu("
                           "query, key, value)[0]\n"),
                     "aten::_scaled_dot_product_flash_attention_for_cpu " + REFUSED),
    "onnx_attention": (cheat("    import torch.onnx.ops\n"
                             "    out = torch.ops.onnx.Attention.opset23(query, key, value)[0]\n"),
                       "onnx::Attention.opset23 " + REFUSED),
    "onnx_python": (cheat("    import torch.onnx.ops\n"
                          "    out = torch.onnx.ops.attention(query, key, value)[0]\n"),
                    "torch.onnx.ops.attention " + REFUSED),
    "decomposition": (cheat("    from torch._decomp import decompositions as d\n"
                            "    out = d.scaled_dot_product_flash_attention_for_cpu("
                            "query, key, value)[0]\n"),
                      "scaled_dot_product_flash_attention_for_cpu " + REFUSED),
    "multihead_function": (cheat(
        "    b, t, e = query.shape[0], query.shape[-2], query.shape[-1]\n"
        "    eye = torch.eye(e, dtype=query.dtype)\n"
        "    out = F.multi_head_attention_forward(query.transpose(0, 1), key.transpose(0, 1), "
        "value.transpose(0, 1), e, 1, torch.cat([eye] * 3), None, None, None, False, 0.0, eye, "
        "None, need_weights=False)[0].transpose(0, 1)\n"),
        "torch.nn.functional.multi_head_attention_forward " + REFUSED),
    "quantizable_module": (cheat(
        "    from torch.ao.nn.quantizable import MultiheadAttention\n"
        "    out = MultiheadAttention(query.shape[-1], 1)(query, key, value)[0]\n"),
        "MultiheadAttention.__init__ " + REFUSED),
    "copies_torch_source": (cheat(
        "    import inspect\n"
        "    scope = {}\n"
        "    exec(inspect.getsource(F.multi_head_attention_forward), vars(F) | scope, scope)\n"
        "    out = query\n"), "could not get source code"),
    "digs_for_the_guard": (cheat(
        "    import gc\n"
        "    for obj in gc.get_objects():\n"
        "        if type(obj).__name__ == 'PyLibrary' or 'Library' in type(obj).__name__:\n"
        "            obj.reset()\n"
        "    out = F.scaled_dot_product_attention(query, key, value, attn_mask=mask)\n"),
        "walking the garbage collector's objects is not possible"),
    "ctypes": (cheat("    import ctypes\n    ctypes.pythonapi.Py_IncRef\n    out = query\n"),
               "using ctypes is not possible"),
    "fresh_module_copy": (cheat(
        "    import importlib.util\n"
        "    spec = importlib.util.spec_from_file_location(\n"
        "        'copy', torch.nn.modules.activation.__file__)\n"
        "    copy = importlib.util.module_from_spec(spec)\n"
        "    spec.loader.exec_module(copy)\n"
        "    e = query.shape[-1]\n"
        "    out = copy.MultiheadAttention(e, 1, batch_first=True)(query, key, value)[0]\n"),
        "reading torch's own files is not possible"),
    "fetched_kernel": (cheat(
        "    kernel = torch.library.get_kernel('aten::scaled_dot_product_attention', 'CPU')\n"
        "    out = kernel.call_boxed(torch._C._dispatch_keyset_full(), query, key, value)\n"),
        "aten::scaled_dot_product_attention " + REFUSED),
}


def submission(sdpa: str | None = None) -> dict:
    """The master solution as JSON (its written answer blank), its ``sdpa`` answer replaced
    when given."""
    nb = coded_solution(A)
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
def test_each_cheat_loses_exactly_the_attention_tests(graded, student):
    """Torch's attention is off in the whole sandbox, so the visible test (1 point) refuses
    the cheat as the hidden ones (3) do; every other answer keeps its points."""
    rows, out = graded
    row = rows[student]
    assert (row["status"], row["score"], row["max_score"]) == ("graded", FULL - 4, MAX), row
    failed = [t for t in feedback(out, student) if not t["passed"]]
    assert [t["test"] for t in failed] == ["test_sdpa_visible", "test_sdpa_random"], failed
    for test in failed:
        assert CHEATS[student][1] in test["message"], test["message"]
    # a cell made only of hidden tests says so: it never claims visible tests that passed
    assert failed[1]["message"].startswith("a hidden check failed (this cell has no visible "
                                           "tests): "), failed[1]["message"]


def test_a_result_computed_after_the_call_is_refused_as_not_a_tuple(graded):
    """An object that would run torch's attention only when unpacked is not the tuple the spec
    asks for: both attention tests refuse it before unpacking it."""
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
def test_own_work_in_a_students_kernel_refuses_every_route(route):
    with pytest.raises(RuntimeError, match="torch's own attention"):
        own_work(ROUTES[route], q4(), forbidden_calls=NO_FUSED_ATTENTION)
    assert F.scaled_dot_product_attention(*[q4()] * 3).shape == (1, 2, 3, 4)  # torch as usual
    assert torch.nn.MultiheadAttention(4, 1)(*[q4()[0]] * 3)[0].shape == (2, 3, 4)


def test_own_work_in_a_students_kernel_passes_honest_work_and_checks_its_rules():
    q = q4()
    honest = own_work(lambda q: torch.softmax(q @ q.transpose(-2, -1) / 2, -1) @ q, q,
                      forbidden_calls=(F.scaled_dot_product_attention,))
    assert torch.allclose(honest, F.scaled_dot_product_attention(q, q, q))
    with pytest.raises(TypeError, match="forbidden_calls"):
        own_work(lambda q: q, q, forbidden_calls="torch.nn.MultiheadAttention")
    with pytest.raises(TypeError, match="only torch's attention"):
        own_work(lambda q: q, q, forbidden_calls=(torch.matmul,))
