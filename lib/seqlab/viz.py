"""Plots the lectures share: loss curves, labelled heatmaps, True/False matrices, probability bar
charts, and box-and-arrow diagrams (an unrolled RNN, an encoder-decoder, attention over a source,
a whole Transformer language model).

Each function draws on ``ax`` (a new figure when None) and returns the Axes, so a notebook can
add to it. Every plot gets a title and labelled axes, a colour scale gets a label, and a
True/False matrix gets a two-colour legend instead of a colour scale; a diagram gets a title and
no axes.
"""

from __future__ import annotations

from collections.abc import Sequence

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.colors import ListedColormap
from matplotlib.patches import FancyArrowPatch, FancyBboxPatch, Patch

from .validate import integer


def _axes(ax, figsize):
    if ax is None:
        _, ax = plt.subplots(figsize=figsize)
    return ax


def plot_history(history, ax=None, title: str = "Training loss", log_y: bool = False,
                 window: int | None = None):
    """Per-step training loss (faint); its mean over the last ``window`` steps at every step
    when ``window`` is given, else the per-epoch means (when there are two epochs or more: one
    epoch's mean is a single dot); validation loss per epoch."""
    ax = _axes(ax, (6, 3.5))
    steps = np.arange(1, len(history.step_loss) + 1)
    if len(steps):
        ax.plot(steps, history.step_loss, alpha=0.3, label="train (per step)")
    if window is not None:
        window = integer("window", window, minimum=1)
        if len(steps) >= window:
            mean = np.convolve(history.step_loss, np.ones(window) / window, mode="valid")
            ax.plot(steps[window - 1:], mean, label=f"train (mean of the last {window} steps)")
    if history.train_loss and len(steps):
        per_epoch = len(steps) / len(history.train_loss)
        ends = per_epoch * np.arange(1, len(history.train_loss) + 1)
        if window is None and len(history.train_loss) > 1:
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
    colorbar_label: str = "",
):
    """A labelled heatmap, e.g. attention weights (rows: target words, columns: source words),
    with a colour bar named ``colorbar_label``. True/False matrices go to ``boolean_heatmap``."""
    if np.asarray(matrix).dtype == bool:
        raise ValueError("matrix holds True/False values: draw it with boolean_heatmap, whose "
                         "legend names both colours, not with a colour scale")
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
    ax.figure.colorbar(image, ax=ax, fraction=0.046, label=colorbar_label)
    ax.set(title=title, xlabel=xlabel, ylabel=ylabel)
    return ax


def boolean_heatmap(mask, row_labels: Sequence[str] | None, col_labels: Sequence[str] | None,
                    ax=None, title: str = "", xlabel: str = "", ylabel: str = "",
                    true_label: str = "True", false_label: str = "False",
                    colors: tuple[str, str] = ("0.2", "white")):
    """A True/False matrix (an attention mask, a gold alignment) in two colours, with a legend
    naming both: a 0-1 colour bar would suggest values in between that a mask cannot take.

    ``mask`` holds bools, or only 0s and 1s; ``colors`` are (True, False). Labels of None
    number the rows or columns from 0 instead (for long axes, such as 64 positions).
    """
    values = np.asarray(mask)
    if values.dtype != bool:
        if not np.issubdtype(values.dtype, np.number) or not np.isin(values, (0, 1)).all():
            raise ValueError(f"mask must hold only True/False (or 1/0), got {values.dtype} "
                             f"values {np.unique(values)[:5].tolist()}")
        values = values.astype(bool)
    rows = len(row_labels) if row_labels is not None else values.shape[0]
    cols = len(col_labels) if col_labels is not None else values.shape[-1]
    if values.ndim != 2 or values.shape != (rows, cols):
        raise ValueError(f"mask shape {values.shape} does not match {rows} row labels and "
                         f"{cols} column labels")
    ax = _axes(ax, (min(0.45 * cols, 9) + 3.5, min(0.45 * rows, 8) + 1.5))
    ax.imshow(values.astype(int), cmap=ListedColormap([colors[1], colors[0]]), vmin=0, vmax=1,
              aspect="auto", interpolation="nearest")
    if col_labels is not None:
        ax.set_xticks(range(cols), col_labels, rotation=60, ha="right")
    if row_labels is not None:
        ax.set_yticks(range(rows), row_labels)
    if max(rows, cols) <= 40:  # cell borders, so that white cells stay visible
        ax.set_xticks(np.arange(cols + 1) - 0.5, minor=True)
        ax.set_yticks(np.arange(rows + 1) - 0.5, minor=True)
        ax.grid(which="minor", color="0.75", linewidth=0.5)
        ax.tick_params(which="minor", length=0)
    handles = [Patch(facecolor=c, edgecolor="0.5", label=label)
               for c, label in zip(colors, (true_label, false_label))]
    ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.02, 1.0), borderaxespad=0,
              frameon=False)
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


# ---------------------------------------------------------------------- diagrams
# Boxes and arrows in data units on an equal-aspect Axes without axes lines, so arcs bend evenly.
_INCH = 0.75  # figure inches per data unit: text stays readable at Colab width
_BACKWARD = {"color": "tab:red", "linestyle": "--"}  # gradients flowing backwards in time
_INPUT = "0.92"  # fill of boxes that hold data (words, losses), not network states


def _canvas(ax, xlim, ylim, title):
    ax = _axes(ax, (_INCH * (xlim[1] - xlim[0]), _INCH * (ylim[1] - ylim[0])))
    ax.set(xlim=xlim, ylim=ylim, aspect="equal", title=title)
    ax.axis("off")
    return ax


def _box(ax, xy, label, fc="white", width=0.9, height=0.55, **text):
    """A rounded box centred at ``xy`` with its label; returns the box for ``_arrow``."""
    box = FancyBboxPatch((xy[0] - width / 2, xy[1] - height / 2), width, height,
                         boxstyle="round,pad=0.03", fc=fc, ec="k", zorder=2)
    ax.add_patch(box)
    ax.text(*xy, label, ha="center", va="center", zorder=3, **text)
    return box


def _centre(box):
    return box.get_x() + box.get_width() / 2, box.get_y() + box.get_height() / 2


def _arrow(ax, a, b, label="", rad=0.0, offset=(0.0, 0.0), at=0.5, color="k", **style):
    """An arrow from box ``a`` to box ``b``, bent by ``rad`` (matplotlib's arc3) and clipped at
    the boxes' edges; the label sits at fraction ``at`` along the curve, moved by ``offset``."""
    (xa, ya), (xb, yb) = _centre(a), _centre(b)
    ax.add_patch(FancyArrowPatch((xa, ya), (xb, yb), patchA=a, patchB=b, arrowstyle="-|>",
                                 mutation_scale=12, connectionstyle=f"arc3,rad={rad}",
                                 color=color, zorder=1, **style))
    if label:  # a point on arc3's quadratic Bezier curve, whose control point is (cx, cy)
        cx, cy = (xa + xb) / 2 + rad * (yb - ya), (ya + yb) / 2 - rad * (xb - xa)
        x, y = ((1 - at) ** 2 * p + 2 * at * (1 - at) * c + at**2 * q
                for p, c, q in ((xa, cx, xb), (ya, cy, yb)))
        ax.text(x + offset[0], y + offset[1], label, ha="center", va="center", color=color,
                zorder=3, bbox={"boxstyle": "square,pad=0.05", "fc": "white", "ec": "none"})


def _words(name, words):
    if isinstance(words, str) or not isinstance(words, Sequence) or not words or not all(
            isinstance(w, str) and w for w in words):
        raise ValueError(f"{name} must be a non-empty sequence of words such as "
                         f"('the', 'cat'), got {words!r}")
    return list(words)


def unrolled_rnn(steps: int = 4, ax=None):
    """An RNN unrolled over ``steps`` time steps, with the gradient path of the last loss.

    Black: the forward pass in lecture 02's symbols, h_t = tanh(W x_t + U h_{t-1} + b) and the
    loss J_t read from V h_t. Red, dashed: backpropagation through time from J_T, which reaches
    h_1 only through every Jacobian dh_t/dh_{t-1}: a product of T - 1 matrices, which is why the
    gradient vanishes or explodes with distance.
    """
    integer("steps", steps, 1)  # time steps T
    T, dx = steps, 2.0
    ax = _canvas(ax, (-0.8, dx * T + 1.6), (-3.0, 2.6),
                 f"RNN unrolled over T = {T} steps: forward (black), gradient of $J_{{{T}}}$ "
                 "(red)")
    h = [_box(ax, (0, 0), "$h_0$")]
    for t in range(1, T + 1):
        h.append(_box(ax, (dx * t, 0), f"$h_{{{t}}}$"))
        x = _box(ax, (dx * t, -1.6), f"$x_{{{t}}}$", fc=_INPUT)
        loss = _box(ax, (dx * t, 1.8), f"$J_{{{t}}}$", fc=_INPUT)
        _arrow(ax, h[t - 1], h[t], "$U$", offset=(0, -0.22))
        _arrow(ax, x, h[t], "$W$", offset=(0.22, 0))
        _arrow(ax, h[t], loss, "$V$", offset=(-0.22, 0.15))
    _arrow(ax, loss, h[T], rf"$\partial J_{{{T}}}/\partial h_{{{T}}}$", rad=-0.5,
           offset=(0.55, 0), **_BACKWARD)
    jacobians = [rf"\partial h_{{{t}}}/\partial h_{{{t - 1}}}" for t in range(T, 1, -1)]
    for t, jacobian in zip(range(T, 1, -1), jacobians):
        _arrow(ax, h[t], h[t - 1], f"${jacobian}$", rad=0.6, offset=(0, 0.2), **_BACKWARD)
    product = r"\,\cdot\,".join([rf"\partial J_{{{T}}}/\partial h_{{{T}}}", *jacobians])
    ax.text(dx * T / 2, -2.5, rf"$\partial J_{{{T}}}/\partial h_1 = {product}$"
            f":  a product of T − 1 = {T - 1} Jacobian{'s' * (T != 2)}", ha="center", va="center",
            color=_BACKWARD["color"])
    return ax


def encoder_decoder(source: Sequence[str] = ("the", "cat", "sleeps"),
                    target: Sequence[str] = ("le", "chat", "dort"), ax=None,
                    bottleneck_label: str = "$s_0 = h_S$\n128 numbers"):
    """An encoder RNN reads ``source``; its final state is all the decoder ever sees of it.

    The highlighted bottleneck box (``bottleneck_label``; lecture 03's s_0 = h_S) is the decoder's
    initial state: a fixed-size vector must hold the whole source, however long, which is why
    translation quality falls with length. The decoder reads <bos> y_1 ... and emits y_1 ... <eos>.
    """
    source, target = _words("source", source), _words("target", target)
    if not isinstance(bottleneck_label, str):
        raise ValueError(f"bottleneck_label must be a str, got {bottleneck_label!r}")
    inputs, outputs = ["<bos>", *target], [*target, "<eos>"]
    width = max(0.9, 0.12 * max(map(len, source + inputs + outputs)) + 0.3)
    dx, S, T = width + 0.7, len(source), len(inputs)
    start = dx * S + 0.5  # the bottleneck's centre, a wider box
    ax = _canvas(ax, (-0.8, start + dx * T + 0.8), (-2.4, 2.5),
                 "Encoder-decoder: one vector carries the whole source")
    state = None
    for i, word in enumerate(source):
        h = _box(ax, (dx * i, 0), f"$h_{{{i + 1}}}$")
        _arrow(ax, _box(ax, (dx * i, -1.3), word, fc=_INPUT, width=width), h)
        if state is not None:
            _arrow(ax, state, h)
        state = h
    lines = bottleneck_label.splitlines() or [""]
    bottleneck = _box(ax, (start, 0), bottleneck_label, fc="gold", height=0.35 + 0.3 * len(lines),
                      width=max(1.4, 0.12 * max(map(len, lines)) + 0.3))
    _arrow(ax, state, bottleneck, "copy", offset=(0, 0.22), at=0.35)  # s_0 is h_S itself
    state = bottleneck
    for t, (word_in, word_out) in enumerate(zip(inputs, outputs), start=1):
        s = _box(ax, (start + dx * t, 0), f"$s_{{{t}}}$")
        _arrow(ax, _box(ax, (start + dx * t, -1.3), word_in, fc=_INPUT, width=width), s)
        _arrow(ax, s, _box(ax, (start + dx * t, 1.5), word_out, fc=_INPUT, width=width))
        _arrow(ax, state, s)
        state = s
    for x, name in ((dx * (S - 1) / 2, "encoder"), (start + dx * (T + 1) / 2, "decoder")):
        ax.text(x, -2.05, name, ha="center", va="center", color="0.4", fontstyle="italic")
    return ax


def attention_over_source(source: Sequence[str], weights, target_word: str | None = None,
                          ax=None):
    """One decoder step of attention: the context a_t = sum_i alpha^t_i h_i over the source.

    Each encoder state h_i (over its word) is joined to the context box by a line as thick and
    as dark as its weight alpha^t_i, printed on it: the student sees which words the decoder
    state s_t reads to write ``target_word``, instead of one vector for the whole source.
    ``weights`` must be non-negative, one per source word, and sum to 1.
    """
    source = _words("source", source)
    if target_word is not None and not isinstance(target_word, str):
        raise ValueError(f"target_word must be a str or None, got {target_word!r}")
    try:
        w = np.asarray(weights, dtype=float)
    except (TypeError, ValueError):
        raise ValueError(f"weights must be numbers, got {weights!r}") from None
    if w.shape != (len(source),):
        raise ValueError(f"weights must have one entry per source word ({len(source)}), "
                         f"got {weights!r}")
    if not np.isfinite(w).all() or (w < 0).any():
        raise ValueError(f"weights must be finite and non-negative, got {weights!r}")
    if abs(w.sum() - 1) > 1e-6:
        raise ValueError(f"weights must sum to 1 (within 1e-6), got {weights!r} with sum "
                         f"{w.sum():.6g}")
    width = max(0.9, 0.12 * max(map(len, source)) + 0.3)
    dx = width + 0.7
    centre = dx * (len(source) - 1) / 2
    ax = _canvas(ax, (-0.8, max(dx * (len(source) - 1), centre + 2.2) + 0.8), (-2.4, 4.6),
                 r"Attention at step $t$: context $a_t = \sum_i \alpha^t_i\, h_i$")
    context = _box(ax, (centre, 2.8), "$a_t$", fc="gold")
    decoder = _box(ax, (centre + 2.2, 2.8), "$s_t$")
    word = "$y_t$" if target_word is None else f"$y_t$ = {target_word}"
    output = _box(ax, (centre + 1.1, 4.0), word, fc=_INPUT, width=max(1.2, 0.12 * len(word)))
    _arrow(ax, context, output)
    _arrow(ax, decoder, output)
    state = None
    for i, (src, a) in enumerate(zip(source, w)):
        h = _box(ax, (dx * i, 0), f"$h_{{{i + 1}}}$")
        _arrow(ax, _box(ax, (dx * i, -1.3), src, fc=_INPUT, width=width), h)
        _arrow(ax, h, context, f"{a:.2f}", at=0.3, color="tab:blue", lw=0.5 + 6 * a,
               alpha=0.25 + 0.75 * a)
        if state is not None:
            _arrow(ax, state, h)
        state = h
    ax.text(centre, -2.1, r"on the lines: $\alpha^t_i$, the softmax over $i$ of "
            r"score$(s_t, h_i)$", ha="center", va="center", color="tab:blue")
    return ax


def transformer_lm(model, ax=None):
    """The whole ``seqlab.transformer.TransformerLM``, bottom to top, with ``model``'s own sizes.

    Tokens -> token embedding + position vectors -> dropout -> N blocks (causal multi-head
    self-attention, then the feed-forward network, each inside a residual connection with its
    LayerNorm before the sublayer (pre-LN) or after the sum (post-LN), as the model was built)
    -> final LayerNorm (pre-LN only) -> linear layer to the vocabulary -> softmax. Grey arrows:
    the residual paths that skip each sublayer.
    """
    from .transformer import TransformerLM  # viz stays importable without the models

    if not isinstance(model, TransformerLM):
        raise TypeError(f"model must be a seqlab.transformer.TransformerLM, got "
                        f"{type(model).__name__}")
    block = model.layers[0]
    attn, ffn = block.self_attn, block.ffn
    vocab, d = model.out.out_features, attn.d_model
    dropout, pre = block.attn_block.drop.p, model.config.norm == "pre"
    kind = model.embed.positions.kind
    width, dy = 7.0, 1.0
    sublayers = (f"causal multi-head self-attention: h = {attn.num_heads} heads, "
                 f"$d_k$ = {attn.d_k},\nthen dropout p = {dropout:g}",
                 f"feed-forward network {d} → {ffn.linear1.out_features} → {d} (ReLU), "
                 f"at each position,\nthen dropout p = {dropout:g}")
    rows = [("tokens $w_1 \\dots w_T$", _INPUT),
            (f"token embedding $E[w_t]$ ({vocab} × {d}) + {kind} position vector $PE[t]$,"
             f"\nthen dropout p = {dropout:g}", "white")]
    for sub in sublayers:  # one block; the frame says how many there are
        rows += [("LayerNorm", "white"), (sub, "lavender"), ("+", "white")] if pre else \
            [(sub, "lavender"), ("+", "white"), ("LayerNorm", "white")]
    rows += [("final LayerNorm", "white")] if pre else []
    rows += [(f"linear layer {d} → {vocab}: a score per word", "white"),
             ("softmax: $P(w_{t+1} \\mid w_1 \\dots w_t)$ at every position $t$", _INPUT)]
    top = dy * (len(rows) - 1)
    ax = _canvas(ax, (-width / 2 - 1.6, width / 2 + 1.6), (-0.6, top + 1.0),
                 f"TransformerLM: {len(model.layers)} {'pre' if pre else 'post'}-LN blocks, "
                 f"d = {d}")
    boxes = []
    for i, (label, fill) in enumerate(rows):
        small = label in ("+", "LayerNorm")
        boxes.append(_box(ax, (0, dy * i), label, fc=fill, width=0.6 if label == "+" else
                          (1.8 if small else width), height=0.42 if small else 0.6,
                          fontsize=8 if "\n" in label else 9))
        if i:
            _arrow(ax, boxes[i - 1], boxes[i])
    first, last = 2, 8  # rows 2..7 hold the block that repeats
    frame = FancyBboxPatch((-width / 2 - 0.9, dy * first - 0.4), width + 1.8,
                           dy * (last - first - 1) + 0.8, boxstyle="round,pad=0.05", fc="none",
                           ec="tab:blue", ls="--", zorder=0)
    ax.add_patch(frame)
    ax.text(width / 2 + 1.0, dy * (first + last - 1) / 2, f"× {len(model.layers)}",
            ha="left", va="center", color="tab:blue", fontsize=12)
    x_skip = -width / 2 - 0.45
    for add in [i for i, (label, _) in enumerate(rows) if label == "+"]:
        # the residual path leaves below the sublayer (pre-LN: below its LayerNorm too)
        start = add - 3 if pre else add - 2
        branch = dy * start + dy / 2
        ax.plot([0, x_skip, x_skip], [branch, branch, dy * add], color="0.55", lw=1.2,
                zorder=1)
        ax.plot([0], [branch], "o", color="0.55", ms=3, zorder=3)
        ax.add_patch(FancyArrowPatch((x_skip, dy * add), _centre(boxes[add]),
                                     patchB=boxes[add], arrowstyle="-|>", mutation_scale=12,
                                     color="0.55", lw=1.2, zorder=1))
        ax.text(x_skip - 0.1, (branch + dy * add) / 2, "residual", ha="right", va="center",
                color="0.45", fontsize=8, rotation=90)
    return ax
