"""viz plots: labelled colour bars, True/False matrices with a legend, and the Transformer LM
diagram (lectures 00, 04, 05, 08)."""

import re

import matplotlib.pyplot as plt
import numpy as np
import pytest
import torch
from matplotlib.colors import to_rgba
from matplotlib.patches import FancyBboxPatch

from seqlab.attention import causal_mask
from seqlab.transformer import TransformerLM
from seqlab.viz import boolean_heatmap, heatmap, transformer_lm


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    plt.close("all")


def test_heatmap_labels_its_colour_bar_and_refuses_a_boolean_matrix():
    ax = heatmap([[0.9, 0.1], [0.2, 0.8]], ["le", "chat"], ["the", "cat"],
                 colorbar_label="attention weight")
    colorbar = ax.images[0].colorbar
    assert colorbar.ax.get_ylabel() == "attention weight"
    with pytest.raises(ValueError, match="boolean_heatmap"):
        heatmap(np.eye(2, dtype=bool), ["a", "b"], ["c", "d"])


def test_boolean_heatmap_draws_two_colours_with_a_legend_and_no_colour_bar():
    words = ["the", "dog", "runs"]
    ax = boolean_heatmap(causal_mask(3), words, words, true_label="may read",
                         false_label="blocked", colors=("black", "white"))
    image = ax.images[0]
    assert image.colorbar is None
    shown = image.cmap(image.norm(image.get_array()))  # the colour of every cell
    black, white = to_rgba("black"), to_rgba("white")
    expected = [[black if j <= i else white for j in range(3)] for i in range(3)]
    assert np.allclose(shown, np.array(expected))
    legend = ax.get_legend()
    assert [t.get_text() for t in legend.get_texts()] == ["may read", "blocked"]
    assert [to_rgba(h.get_facecolor()) for h in legend.legend_handles] == [black, white]
    assert [t.get_text() for t in ax.get_xticklabels()] == words


def test_boolean_heatmap_takes_zeros_and_ones_and_numbers_long_axes():
    bits = (torch.arange(64)[:, None] >> torch.arange(6)) & 1
    ax = boolean_heatmap(bits, None, None, true_label="1", false_label="0")
    assert ax.images[0].get_array().shape == (64, 6)
    assert ax.get_legend() is not None


@pytest.mark.parametrize("mask, match", [
    ([[0.0, 0.5]], "only True/False"),
    ([["a", "b"]], "only True/False"),
    ([[True, False, True]], "does not match"),
])
def test_boolean_heatmap_names_a_bad_mask(mask, match):
    with pytest.raises(ValueError, match=match):
        boolean_heatmap(mask, ["a"], ["b", "c"])


def _labels(ax):
    """Box labels from the bottom of the diagram to the top."""
    boxes = [p for p in ax.patches if isinstance(p, FancyBboxPatch)]
    texts = {(round(t.get_position()[0], 6), round(t.get_position()[1], 6)): t.get_text()
             for t in ax.texts}
    centres = sorted(((b.get_x() + b.get_width() / 2, b.get_y() + b.get_height() / 2)
                      for b in boxes if b.get_facecolor()[3] > 0), key=lambda c: c[1])
    return [texts[(round(x, 6), round(y, 6))] for x, y in centres]


@pytest.mark.parametrize("norm", ["pre", "post"])
def test_transformer_diagram_is_drawn_from_the_model(norm):
    model = TransformerLM(45, d_model=64, num_heads=4, num_layers=6, norm=norm, dropout=0.1)
    ax = transformer_lm(model)
    labels = _labels(ax)
    kinds = [("+" if label == "+" else "LN" if "LayerNorm" in label else
              "attention" if "self-attention" in label else "FFN" if "feed-forward" in label
              else "other") for label in labels]
    block = (["LN", "attention", "+", "LN", "FFN", "+"] if norm == "pre" else
             ["attention", "+", "LN", "FFN", "+", "LN"])
    assert kinds[2:8] == block
    assert kinds.count("LN") == (3 if norm == "pre" else 2)  # pre-LN ends with a final one
    assert "h = 4 heads, $d_k$ = 16" in labels[3 if norm == "pre" else 2]
    assert any("64 → 256 → 64" in label for label in labels)
    assert any("(45 × 64)" in label and "sinusoidal" in label for label in labels)
    assert any("linear layer 64 → 45" in label for label in labels)
    assert all("dropout p = 0.1" in label for label in labels if "then dropout" in label)
    assert "× 6" in [t.get_text() for t in ax.texts]
    assert f"6 {norm}-LN blocks, d = 64" in ax.get_title()
    assert sum(t.get_text() == "residual" for t in ax.texts) == 2


def test_transformer_diagram_names_a_wrong_model():
    with pytest.raises(TypeError, match=re.escape("model must be a seqlab.transformer."
                                                  "TransformerLM, got Linear")):
        transformer_lm(torch.nn.Linear(2, 2))
