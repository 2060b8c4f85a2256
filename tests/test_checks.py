"""The helpers test cells rely on: strict types, and detection of forbidden library calls."""

import math
from collections import Counter

import numpy as np
import pytest
import torch

from autograder.checks import expect_array, expect_counts, expect_float, expect_tensor, own_work


class AlwaysEqual(dict):
    def __eq__(self, other):
        return True

    __hash__ = None


class FloatLike:
    def __eq__(self, other):
        return True

    def __float__(self):
        return 4.0


def test_always_equal_objects_fail():
    with pytest.raises(AssertionError, match="should be a float"):
        expect_float(FloatLike(), 4.0, "perplexity")
    with pytest.raises(AssertionError, match="dict or Counter"):
        expect_counts(AlwaysEqual(), {("a",): 1}, "counts")
    with pytest.raises(AssertionError, match="numpy.ndarray"):
        expect_array([1.0, 2.0], np.array([1.0, 2.0]), "grad")
    with pytest.raises(AssertionError, match="torch.Tensor"):
        expect_tensor(np.zeros(2), torch.zeros(2), "out")


def test_expectations_pass_and_fail_on_values():
    expect_float(np.float64(0.5), 0.5, "p")
    expect_float(math.inf, math.inf, "ppl")
    with pytest.raises(AssertionError, match="should be 4, got 3.2"):
        expect_float(3.2, 4.0, "ppl")
    with pytest.raises(AssertionError, match="should be a float, got bool"):
        expect_float(True, 1.0, "p")
    expect_counts(Counter({("a", "b"): 2, ("c", "d"): 0}), {("a", "b"): 2}, "counts")
    with pytest.raises(AssertionError, match="wrong count"):
        expect_counts(Counter({("a", "b"): 1}), {("a", "b"): 2}, "counts")
    with pytest.raises(AssertionError, match="counts should be int"):
        expect_counts({("a", "b"): 2.0}, {("a", "b"): 2}, "counts")
    with pytest.raises(AssertionError, match="shape"):
        expect_array(np.zeros(3), np.zeros(2), "g")
    with pytest.raises(AssertionError, match="dtype"):
        expect_tensor(torch.zeros(2), torch.zeros(2, dtype=torch.float64), "t")


def test_own_work_catches_the_library_however_imported():
    from seqlab.lm import perplexity as renamed

    def honest(lps):
        return math.exp(-sum(lps) / len(lps))

    def perplexity_cheat(lps):
        return renamed(lps)

    assert own_work(honest, [math.log(0.5)]) == pytest.approx(2.0)
    with pytest.raises(AssertionError, match="perplexity_cheat uses seqlab, which is not "
                                             "available while your notebook is graded"):
        own_work(perplexity_cheat, [math.log(0.5)])


def test_own_work_catches_autograd():
    def by_autograd(z):
        t = torch.tensor(z, requires_grad=True)
        (t**2).sum().backward()
        return t.grad.numpy()

    def by_hand(z):
        return 2 * z

    forbidden = ("seqlab", "torch.autograd")
    assert own_work(by_hand, np.ones(2), forbidden=forbidden).tolist() == [2.0, 2.0]
    with pytest.raises(AssertionError, match="uses torch.autograd"):
        own_work(by_autograd, np.ones(2), forbidden=forbidden)


def test_own_work_refuses_torchs_compiled_attention():
    import torch.nn.functional as F

    q = torch.randn(1, 2, 3)

    def fused(q):
        return F.scaled_dot_product_attention(q, q, q)

    with pytest.raises(RuntimeError, match="scaled_dot_product_attention is torch's own"):
        own_work(fused, q, forbidden_calls=(F.scaled_dot_product_attention,))
    own_work(lambda q: torch.softmax(q @ q.transpose(1, 2), -1) @ q, q,
             forbidden_calls=(F.scaled_dot_product_attention,))
