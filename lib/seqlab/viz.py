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
