"""What a training loss returns, and the masked cross-entropy every topic's loss is built on.

A loss for ``train.fit`` is any callable ``loss_fn(model, batch) -> TokenLoss``: the mean over
the batch's targets (what ``backward`` runs on) and how many targets that mean is over. The
count travels with the value, not with the function, so a ``functools.partial`` or a lambda of a
loss is weighted exactly as the loss itself, and ``train.evaluate`` returns the loss per target
over a whole data set (whose exp is the perplexity) rather than a mean of batch means, which
over-weights the targets of small batches.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
import torch.nn.functional as F


class TokenLoss(NamedTuple):
    """A batch's mean loss (a 0-dim tensor) and the number of targets it averages."""

    mean: torch.Tensor
    count: int | torch.Tensor


def token_cross_entropy(logits: torch.Tensor, targets: torch.Tensor,
                        ignore_index: int = -100) -> TokenLoss:
    """Mean cross-entropy over the targets not equal to ``ignore_index`` (padding, or BERT's
    unselected positions), with their count. ``logits`` [..., V] and ``targets`` [...]; the
    logits are read in float32 even when autocast computed them in half precision."""
    if logits.shape[:-1] != targets.shape:
        raise ValueError(f"logits {tuple(logits.shape)} and targets {tuple(targets.shape)} must "
                         "share every dimension but the last (the vocabulary)")
    mean = F.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(), targets.reshape(-1),
                           ignore_index=ignore_index)
    return TokenLoss(mean, (targets != ignore_index).sum())  # a tensor: no GPU sync per step
