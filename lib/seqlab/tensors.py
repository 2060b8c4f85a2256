"""Helpers every model module and the training loop share without depending on each other: one
walk over nested containers of tensors (``train.to_device`` and ``decoding.select_state`` move
or reindex a batch or a decoder state without knowing its layout), and eval mode for a block.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable

import torch


def map_tensors(fn: Callable[[torch.Tensor], torch.Tensor], tree):
    """``tree`` with ``fn`` applied to every tensor in it, however deeply nested in dicts,
    tuples (named ones too) and lists; other values are returned as they are."""
    if isinstance(tree, torch.Tensor):
        return fn(tree)
    if isinstance(tree, dict):
        return {k: map_tensors(fn, v) for k, v in tree.items()}
    if isinstance(tree, tuple) and hasattr(tree, "_fields"):  # a namedtuple takes fields
        return type(tree)(*(map_tensors(fn, v) for v in tree))
    if isinstance(tree, (tuple, list)):
        return type(tree)(map_tensors(fn, v) for v in tree)
    return tree


@contextlib.contextmanager
def evaluating(model):
    """Eval mode (no dropout) inside the block, the model's previous mode after it.

    Every helper that scores or decodes uses this, so none leaves a model in eval mode.
    """
    was_training = getattr(model, "training", None)
    if was_training is not None:
        model.eval()
    try:
        yield model
    finally:
        if was_training is not None:
            model.train(was_training)
