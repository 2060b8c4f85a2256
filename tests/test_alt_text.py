"""A figure's title becomes the alt text of its picture in a notebook's output."""

from types import SimpleNamespace

import matplotlib.pyplot as plt
from IPython.core.formatters import DisplayFormatter
from IPython.core.pylabtools import select_figure_formats

from seqlab.alt_text import alt_text, load_ipython_extension


def test_the_suptitle_else_every_axes_title_in_order():
    fig, (left, right) = plt.subplots(1, 2)
    left.set_title("Loss")
    right.set_title("BLEU  by\nlength")
    right.set_title("(b)", loc="left")
    assert alt_text(fig) == "Loss; (b); BLEU by length"
    fig.suptitle("Training")
    assert alt_text(fig) == "Training"
    assert alt_text(plt.figure()) == ""
    plt.close("all")


def test_the_inline_picture_carries_it_as_metadata():
    """As in a kernel: the inline backend draws the PNG, the extension adds only metadata (and
    none for a figure without a title)."""
    shell = SimpleNamespace(display_formatter=DisplayFormatter())
    select_figure_formats(shell, {"png"})
    load_ipython_extension(shell)
    fig, ax = plt.subplots()
    ax.set_title("Attention weights")
    data, metadata = shell.display_formatter.format(fig)
    assert data["image/png"] and metadata == {"image/png": {"alt": "Attention weights"}}
    data, metadata = shell.display_formatter.format(plt.subplots()[0])
    assert data["image/png"] and metadata == {}
    plt.close("all")
