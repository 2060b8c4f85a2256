"""Plots the lectures share: loss curves, labelled heatmaps, probability bar charts.

Each function draws on ``ax`` (a new figure when None) and returns the Axes, so a notebook can
add to it. Every plot gets a title and labelled axes.
"""

from __future__ import annotations

from collections.abc import Sequence

import matplotlib.pyplot as plt
import numpy as np


def _axes(ax, figsize):
    if ax is None:
        _, ax = plt.subplots(figsize=figsize)
    return ax


def plot_history(history, ax=None, title: str = "Training loss", log_y: bool = False):
    """Per-step training loss (faint), per-epoch train and validation loss."""
    ax = _axes(ax, (6, 3.5))
    steps = np.arange(1, len(history.step_loss) + 1)
    if len(steps):
        ax.plot(steps, history.step_loss, alpha=0.3, label="train (per step)")
    if history.train_loss and len(steps):
        per_epoch = len(steps) / len(history.train_loss)
        ends = per_epoch * np.arange(1, len(history.train_loss) + 1)
        ax.plot(ends, history.train_loss, "o-", label="train (epoch mean)")
        if history.valid_loss:
            ax.plot(ends[: len(history.valid_loss)], history.valid_loss, "s-", label="validation")
    ax.set(title=title, xlabel="optimizer step", ylabel="loss (nats per token)")
    if log_y:
        ax.set_yscale("log")
    ax.legend()
    return ax


def heatmap(
    matrix,
    row_labels: Sequence[str],
    col_labels: Sequence[str],
    ax=None,
    title: str = "",
    xlabel: str = "",
    ylabel: str = "",
    cmap: str = "viridis",
    annotate: bool = False,
):
    """A labelled heatmap, e.g. attention weights (rows: target words, columns: source words)."""
    matrix = np.asarray(matrix, dtype=float)
    if matrix.ndim != 2 or matrix.shape != (len(row_labels), len(col_labels)):
        raise ValueError(
            f"matrix shape {matrix.shape} does not match {len(row_labels)} row labels and "
            f"{len(col_labels)} column labels"
        )
    ax = _axes(ax, (0.45 * len(col_labels) + 2, 0.45 * len(row_labels) + 1.5))
    image = ax.imshow(matrix, cmap=cmap, aspect="auto")
    ax.set_xticks(range(len(col_labels)), col_labels, rotation=60, ha="right")
    ax.set_yticks(range(len(row_labels)), row_labels)
    if annotate:
        for (i, j), v in np.ndenumerate(matrix):
            ax.text(j, i, f"{v:.2f}", ha="center", va="center", fontsize=7, color="w")
    ax.figure.colorbar(image, ax=ax, fraction=0.046)
    ax.set(title=title, xlabel=xlabel, ylabel=ylabel)
    return ax


def bar_distribution(
    labels: Sequence[str], probs, ax=None, title: str = "", top: int | None = 20,
    ylabel: str = "probability",
):
    """Bars of a probability distribution over tokens, largest first (the ``top`` largest)."""
    probs = np.asarray(probs, dtype=float)
    if probs.ndim != 1 or len(probs) != len(labels):
        raise ValueError(f"probs shape {probs.shape} does not match {len(labels)} labels")
    order = np.argsort(-probs, kind="stable")[:top]
    ax = _axes(ax, (max(4, 0.35 * len(order) + 1), 3))
    ax.bar(range(len(order)), probs[order])
    ax.set_xticks(range(len(order)), [labels[i] for i in order], rotation=60, ha="right")
    ax.set(title=title, xlabel="token", ylabel=ylabel)
    return ax


_TREE_STYLE = {  # status -> (colour, legend label)
    "expanded": ("tab:blue", "kept in the beam, expanded"),
    "finished": ("tab:green", "finished (ends in <eos>)"),
    "dropped": ("0.6", "dropped (outside the beam, or search over)"),
}


def search_tree(nodes, ax=None, title: str = "Search tree", highlight: Sequence[str] = ()):
    """Draw a left-to-right search tree, e.g. every candidate a beam search scored.

    ``nodes`` maps each prefix (a tuple of token strings, the root ``()`` implied) to
    ``(log_prob, status)`` with status ``"expanded"``, ``"finished"`` or ``"dropped"``; every
    prefix's parent must be in ``nodes`` too. Depth runs along x (output position), siblings
    are stacked by log-probability, each node shows its token and cumulative log-probability,
    and the edges of the ``highlight`` path (a token sequence from the root) are drawn bold.
    """
    nodes = {tuple(k): v for k, v in dict(nodes).items()}
    for prefix, value in nodes.items():
        if not (isinstance(value, tuple) and len(value) == 2 and value[1] in _TREE_STYLE):
            raise ValueError(f"nodes[{prefix!r}] must be (log_prob, status) with status in "
                             f"{sorted(_TREE_STYLE)}, got {value!r}")
        if len(prefix) > 1 and prefix[:-1] not in nodes:
            raise ValueError(f"prefix {prefix!r} has no parent {prefix[:-1]!r} in nodes")
    children: dict[tuple, list[tuple]] = {}
    for prefix in nodes:
        if prefix:
            children.setdefault(prefix[:-1], []).append(prefix)
    y: dict[tuple, float] = {}

    def place(prefix, next_leaf):  # depth-first; leaves take consecutive rows, best on top
        kids = sorted(children.get(prefix, []), key=lambda p: -nodes[p][0])
        for kid in kids:
            next_leaf = place(kid, next_leaf)
        if kids:
            y[prefix] = float(np.mean([y[k] for k in kids]))
            return next_leaf
        y[prefix] = float(next_leaf)
        return next_leaf + 1

    rows = place((), 0)
    depth = max((len(p) for p in nodes), default=0)
    ax = _axes(ax, (2.0 * depth + 1.5, 0.42 * rows + 1.2))
    path = {tuple(highlight[:i]) for i in range(1, len(highlight) + 1)}
    for prefix in nodes:
        parent = prefix[:-1]
        bold = prefix in path
        ax.plot([len(parent), len(prefix)], [y[parent], y[prefix]], "-",
                color="k" if bold else "0.75", lw=2.5 if bold else 1, zorder=1)
    for status, (colour, label) in _TREE_STYLE.items():
        chosen = [p for p in nodes if nodes[p][1] == status]
        ax.scatter([len(p) for p in chosen], [y[p] for p in chosen], s=40, color=colour,
                   zorder=2, label=label)
        for p in chosen:
            ax.annotate(f"{p[-1]}  {nodes[p][0]:.2f}", (len(p), y[p]), xytext=(5, 4),
                        textcoords="offset points", va="bottom", fontsize=8, zorder=3,
                        fontweight="bold" if p in path else "normal",
                        bbox={"boxstyle": "square,pad=0.05", "fc": "white", "ec": "none"})
    ax.scatter([0], [y[()]], s=40, color="k", zorder=2)
    ax.annotate("<bos>", (0, y[()]), xytext=(-6, 0), textcoords="offset points", ha="right",
                va="center", fontsize=8)
    ax.set_xlim(-0.7, depth + 0.9)
    ax.set_ylim(rows - 0.5, -0.5)
    ax.set_yticks([])
    ax.set_xticks(range(depth + 1))
    ax.set(title=title, xlabel="output position t (tokens generated)",
           ylabel="candidates (more probable higher)")
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.12), ncol=3, fontsize=8)
    return ax
