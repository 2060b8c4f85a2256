"""viz.search_tree: the beam-search tree lecture 06 draws."""

import matplotlib.pyplot as plt
import pytest

from seqlab.viz import search_tree

NODES = {("he",): (-0.1, "expanded"), ("it",): (-2.3, "dropped"),
         ("he", "hit"): (-0.6, "expanded"), ("he", "<eos>"): (-3.0, "dropped"),
         ("he", "hit", "<eos>"): (-0.9, "finished")}


def test_search_tree_places_every_node_and_labels_the_plot():
    ax = search_tree(NODES, title="toy", highlight=["he", "hit", "<eos>"])
    labels = [t.get_text() for t in ax.texts]
    assert "hit  -0.60" in labels and "<bos>" in labels and len(labels) == len(NODES) + 1
    assert ax.get_title() == "toy" and "position" in ax.get_xlabel()
    bold = [line for line in ax.lines if line.get_linewidth() > 2]
    assert len(bold) == 3  # the highlighted path: three edges
    legend = [t.get_text() for t in ax.get_legend().get_texts()]
    assert any("finished" in t for t in legend) and any("dropped" in t for t in legend)
    # siblings are stacked best first: "he" above "it" (y grows downwards)
    he, it = (next(t for t in ax.texts if t.get_text().startswith(w)) for w in ("he ", "it "))
    assert he.xy[1] < it.xy[1]
    plt.close(ax.figure)


def test_search_tree_rejects_orphans_and_unknown_statuses():
    with pytest.raises(ValueError, match="no parent"):
        search_tree({("a", "b"): (-1.0, "expanded")})
    with pytest.raises(ValueError, match="status"):
        search_tree({("a",): (-1.0, "kept")})
