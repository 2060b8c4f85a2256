"""Padding, masks and length buckets: turning ragged sentences into tensors."""

from __future__ import annotations

import random
from collections.abc import Sequence

import torch

from ..validate import integer
from .vocab import PAD_ID


def pad_batch(
    sequences: Sequence[Sequence[int]], pad_id: int = PAD_ID
) -> tuple[torch.Tensor, torch.Tensor]:
    """Right-pad id lists to one LongTensor ``[B, T_max]``; also return lengths ``[B]``."""
    if isinstance(sequences, (str, torch.Tensor)) or not isinstance(sequences, Sequence):
        raise TypeError(f"sequences must be a list of id lists, got {type(sequences).__name__}")
    if not sequences:
        raise ValueError("sequences is empty; a batch needs at least one sequence")
    lengths = torch.tensor([len(s) for s in sequences], dtype=torch.long)
    out = torch.full((len(sequences), int(lengths.max())), pad_id, dtype=torch.long)
    for row, seq in enumerate(sequences):
        if len(seq):
            out[row, : len(seq)] = torch.as_tensor(seq, dtype=torch.long)
    return out, lengths


def padding_mask(lengths: torch.Tensor, max_len: int | None = None) -> torch.Tensor:
    """Bool mask ``[B, T]``: True where a position holds a real token, False on padding."""
    if not isinstance(lengths, torch.Tensor) or lengths.dim() != 1:
        raise TypeError(f"lengths must be a 1-D tensor, got {lengths!r}")
    max_len = int(lengths.max()) if max_len is None else max_len
    if lengths.numel() and int(lengths.max()) > max_len:
        longest = int(lengths.max())
        raise ValueError(f"max_len={max_len} is shorter than the longest length {longest}")
    return torch.arange(max_len, device=lengths.device)[None, :] < lengths[:, None]


def bucket_batches(
    lengths: Sequence[int], batch_size: int, shuffle: bool = True, seed: int = 0
) -> list[list[int]]:
    """Group indices of similar length into batches, so little compute goes to padding.

    Indices are sorted by length (random tie-breaking when ``shuffle``), cut into batches, and
    the batch order is shuffled, so every epoch still sees lengths in random order.
    """
    integer("batch_size", batch_size, 1)
    rng = random.Random(seed)
    keys = [rng.random() if shuffle else 0.0 for _ in lengths]
    order = sorted(range(len(lengths)), key=lambda i: (lengths[i], keys[i]))
    batches = [order[i : i + batch_size] for i in range(0, len(order), batch_size)]
    if shuffle:
        rng.shuffle(batches)
    return batches


def lm_windows(
    ids: Sequence[int], block_size: int, batch_size: int, n_batches: int | None = None,
    seed: int = 0,
) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """(inputs [B, T], targets [B, T]) batches of windows cut from one long token stream.

    A window starting at i reads ``ids[i : i + T]`` and predicts ``ids[i + 1 : i + T + 1]``
    (targets are the inputs shifted by one), the way character LMs train on running text.
    With ``n_batches``, that many batches of windows at random starts (repeatable by ``seed``);
    without, every non-overlapping window in order, for evaluation (the last batch may be
    smaller, a tail shorter than one window is dropped).
    """
    for name, value in (("block_size", block_size), ("batch_size", batch_size)):
        integer(name, value, 1)
    if n_batches is not None:
        integer("n_batches", n_batches, 1)
    if isinstance(ids, (str, bytes)) or not isinstance(ids, (Sequence, torch.Tensor)):
        raise TypeError(f"ids must be a sequence of token ids, got {type(ids).__name__}")
    stream = torch.as_tensor(ids, dtype=torch.long)
    if stream.dim() != 1 or len(stream) < block_size + 1:
        raise ValueError(f"ids must be 1-D and hold at least block_size + 1 = {block_size + 1} "
                         f"tokens, got shape {tuple(stream.shape)}")
    if n_batches is None:
        starts = torch.arange(0, len(stream) - block_size, block_size)
        groups = starts.split(batch_size)
    else:
        g = torch.Generator().manual_seed(seed)
        groups = torch.randint(0, len(stream) - block_size, (n_batches, batch_size),
                               generator=g).unbind(0)
    offsets = torch.arange(block_size + 1)
    batches = []
    for group in groups:
        windows = stream[group[:, None] + offsets]  # [B, T + 1]
        batches.append((windows[:, :-1], windows[:, 1:]))
    return batches
