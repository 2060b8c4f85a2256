"""viz diagrams: the unrolled RNN (lecture 02), encoder-decoder (03) and attention (04)."""

import re

import matplotlib.pyplot as plt
import pytest
from matplotlib.colors import to_rgba
from matplotlib.patches import FancyArrowPatch, FancyBboxPatch

from seqlab.viz import attention_over_source, encoder_decoder, unrolled_rnn


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    plt.close("all")


def _texts(ax):
    return [t.get_text() for t in ax.texts]


def _arrows(ax, colour):
    return [p for p in ax.patches if isinstance(p, FancyArrowPatch)
            and to_rgba(p.get_edgecolor(), 1) == to_rgba(colour, 1)]


@pytest.mark.parametrize("steps", [1, 4, 11])
def test_unrolled_rnn_draws_every_state_and_the_gradient_path(steps):
    ax = unrolled_rnn(steps)
    states = [t for t in _texts(ax) if re.fullmatch(r"\$h_\{?\d+\}?\$", t)]
    assert states == ["$h_0$", *(f"$h_{{{t}}}$" for t in range(1, steps + 1))]
    boxes = [p for p in ax.patches if isinstance(p, FancyBboxPatch)]
    assert len(boxes) == 3 * steps + 1  # h_0 .. h_T, and an input x_t and a loss J_t per step
    # backwards, in red: J_T -> h_T, then one arrow per Jacobian dh_t/dh_{t-1}, t = T .. 2
    assert len(_arrows(ax, "tab:red")) == steps
    jacobians = [rf"\partial h_{{{t}}}/\partial h_{{{t - 1}}}" for t in range(steps, 1, -1)]
    assert all(f"${j}$" in _texts(ax) for j in jacobians)
    product = next(t for t in _texts(ax) if "product" in t)
    factors = [rf"\partial J_{{{steps}}}/\partial h_{{{steps}}}", *jacobians]  # later on the left
    assert r"/\partial h_1 = " + r"\,\cdot\,".join(factors) + "$" in product
    assert f"= {steps - 1} Jacobian" in product
    assert f"T = {steps}" in ax.get_title()


@pytest.mark.parametrize("steps,error", [(0, ValueError), (-2, ValueError), (2.5, TypeError),
                                         ("4", TypeError), (True, TypeError), (None, TypeError)])
def test_unrolled_rnn_rejects_a_bad_steps(steps, error):
    got = re.escape(repr(steps))
    with pytest.raises(error, match=rf"^steps must be an int >= 1, got .*{got}$"):
        unrolled_rnn(steps)


def test_encoder_decoder_reads_the_source_and_emits_the_target_through_one_vector():
    ax = encoder_decoder(("the", "black", "cat"), ("le", "chat", "noir"))
    texts = _texts(ax)
    assert [t for t in texts if t.startswith("$h_")] == ["$h_{1}$", "$h_{2}$", "$h_{3}$"]
    assert [t for t in texts if t.startswith("$s_{")] == [f"$s_{{{t}}}$" for t in range(1, 5)]
    for word in ("the", "black", "cat", "<bos>", "le", "chat", "noir", "<eos>"):
        assert word in texts
    assert texts.count("le") == 2  # read by s_2 after being emitted by s_1 (teacher forcing)
    assert "$s_0 = h_S$\n128 numbers" in texts  # the default bottleneck label
    gold = [p for p in ax.patches if to_rgba(p.get_facecolor()) == to_rgba("gold")]
    assert len(gold) == 1
    ax = encoder_decoder(bottleneck_label="c = h_S, 64 numbers")
    assert "c = h_S, 64 numbers" in _texts(ax)


@pytest.mark.parametrize("kwargs, name", [
    ({"source": "the cat sleeps"}, "source"),
    ({"source": ()}, "source"),
    ({"target": ("le", "")}, "target"),
    ({"target": 3}, "target"),
    ({"bottleneck_label": 128}, "bottleneck_label"),
])
def test_encoder_decoder_names_a_bad_argument(kwargs, name):
    value = re.escape(repr(next(iter(kwargs.values()))))
    with pytest.raises(ValueError, match=rf"^{name} must .*got {value}"):
        encoder_decoder(**kwargs)


def test_attention_prints_each_weight_on_a_line_as_thick_as_the_weight():
    source, weights = ("the", "black", "cat", "sleeps"), (0.05, 0.15, 0.7, 0.1)
    _, given = plt.subplots()
    ax = attention_over_source(source, weights, target_word="chat", ax=given)
    assert ax is given
    texts = _texts(ax)
    assert [t for t in texts if t in {"0.05", "0.15", "0.70", "0.10"}] == [
        "0.05", "0.15", "0.70", "0.10"]
    assert all(word in texts for word in source) and "$y_t$ = chat" in texts
    lines = _arrows(ax, "tab:blue")
    assert len(lines) == len(source)
    widths = [line.get_linewidth() for line in lines]
    assert sorted(widths) == [widths[i] for i in (0, 3, 1, 2)]  # the order of the weights
    assert r"\alpha^t_i" in ax.get_title() and "$a_t$" in texts and "$s_t$" in texts


@pytest.mark.parametrize("weights, expected", [
    ((0.5, 0.5), "one entry per source word"),
    ((0.6, 0.6, -0.2), "non-negative"),
    ((0.5, 0.4, 0.0), "sum to 1"),
    ((0.5, float("nan"), 0.5), "non-negative"),
    (("a", "b", "c"), "numbers"),
])
def test_attention_names_bad_weights(weights, expected):
    got = re.escape(repr(weights))
    with pytest.raises(ValueError, match=rf"^weights must .*{expected}.*{got}"):
        attention_over_source(("the", "cat", "sleeps"), weights)


def test_attention_accepts_rounding_within_the_tolerance_and_checks_the_other_arguments():
    attention_over_source(("a", "b"), (0.5, 0.5 + 5e-7))
    with pytest.raises(ValueError, match="sum to 1"):
        attention_over_source(("a", "b"), (0.5, 0.5 + 5e-6))
    with pytest.raises(ValueError, match="^source must"):
        attention_over_source("ab", (0.5, 0.5))
    with pytest.raises(ValueError, match="^target_word must .*got 3"):
        attention_over_source(("a", "b"), (0.5, 0.5), target_word=3)
