"""Attention: score functions, masked softmax, and scaled dot-product attention.

Lecture 04's notation: for a decoder state s (the query) and encoder states h_1..h_S (keys and
values), scores e_i = score(s, h_i), weights alpha = softmax(e), output a = sum_i alpha_i h_i.

Masks follow torch's ``scaled_dot_product_attention``: a boolean mask is True where a query MAY
attend (a float mask is added to the scores). A query that may attend nowhere gets weights and
output 0, as torch does, where a naive softmax would return NaN.
"""

from __future__ import annotations

import math

import torch
from torch import nn


def _check(name: str, tensor, dims: int | None = None) -> None:
    if not isinstance(tensor, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(tensor).__name__}")
    if dims is not None and tensor.dim() != dims:
        raise ValueError(f"{name} must have {dims} dimensions, got shape {tuple(tensor.shape)}")


# ---------------------------------------------------------------------- score functions
def _check_query_keys(query, keys, kind: str) -> None:
    _check("query", query)
    _check("keys", keys, 3)
    if query.dim() not in (2, 3) or query.shape[0] != keys.shape[0]:
        raise ValueError(f"{kind} score needs query [B, d] (or [B, T, d]) and keys [B, S, d]; "
                         f"got {tuple(query.shape)} and {tuple(keys.shape)}")


def dot_score(query: torch.Tensor, keys: torch.Tensor) -> torch.Tensor:
    """e_i = s . h_i. query [B, d] and keys [B, S, d] -> scores [B, S].

    Every score function also takes all decoder steps at once: query [B, T, d] -> [B, T, S].
    """
    _check_query_keys(query, keys, "dot")
    if query.shape[-1] != keys.shape[-1]:
        raise ValueError(f"dot score needs query and keys of the same size, got "
                         f"{tuple(query.shape)} and {tuple(keys.shape)}")
    return query @ keys.transpose(1, 2) if query.dim() == 3 else \
        torch.einsum("bd,bsd->bs", query, keys)


def scaled_dot_score(query: torch.Tensor, keys: torch.Tensor) -> torch.Tensor:
    """e_i = s . h_i / sqrt(d): keeps scores of large vectors from saturating the softmax.
    The query is scaled before the product, so the product cannot overflow half precision."""
    return dot_score(query / math.sqrt(query.shape[-1]), keys)


class BilinearScore(nn.Module):
    """Luong's "general" score, e_i = s^T W h_i, for query size d_q and key size d_k."""

    def __init__(self, query_dim: int, key_dim: int):
        super().__init__()
        self.W = nn.Linear(key_dim, query_dim, bias=False)

    def prepare_keys(self, keys: torch.Tensor) -> torch.Tensor:
        """W h_i: per-source work, done once before decoding."""
        return self.W(keys)

    def score_prepared(self, query: torch.Tensor, prepared: torch.Tensor) -> torch.Tensor:
        return dot_score(query, prepared)

    def forward(self, query: torch.Tensor, keys: torch.Tensor) -> torch.Tensor:
        return self.score_prepared(query, self.prepare_keys(keys))


class AdditiveScore(nn.Module):
    """Bahdanau's score, e_i = v^T tanh(W s + U h_i), with an attention layer of size d_a."""

    def __init__(self, query_dim: int, key_dim: int, attn_dim: int):
        super().__init__()
        self.W = nn.Linear(query_dim, attn_dim, bias=False)
        self.U = nn.Linear(key_dim, attn_dim, bias=False)
        self.v = nn.Linear(attn_dim, 1, bias=False)

    def prepare_keys(self, keys: torch.Tensor) -> torch.Tensor:
        """U h_i: once per source, shared by every decoder step."""
        return self.U(keys)

    def score_prepared(self, query: torch.Tensor, projected_keys: torch.Tensor) -> torch.Tensor:
        _check_query_keys(query, projected_keys, "additive")
        if query.dim() == 3:
            projected_keys = projected_keys[:, None]  # [B, 1, S, A] against [B, T, 1, A]
        return self.v(torch.tanh(self.W(query).unsqueeze(-2) + projected_keys)).squeeze(-1)

    def forward(self, query: torch.Tensor, keys: torch.Tensor) -> torch.Tensor:
        return self.score_prepared(query, self.prepare_keys(keys))


def make_score(kind: str, query_dim: int, key_dim: int, attn_dim: int | None = None):
    """A score function by name: "dot", "scaled_dot", "bilinear" or "additive"."""
    if kind in ("dot", "scaled_dot") and query_dim != key_dim:
        raise ValueError(f"{kind} attention needs query_dim == key_dim, got {query_dim} and "
                         f"{key_dim}; use 'bilinear' or 'additive'")
    if kind == "dot":
        return dot_score
    if kind == "scaled_dot":
        return scaled_dot_score
    if kind == "bilinear":
        return BilinearScore(query_dim, key_dim)
    if kind == "additive":
        return AdditiveScore(query_dim, key_dim, attn_dim or query_dim)
    raise ValueError(f"score must be one of 'dot', 'scaled_dot', 'bilinear', 'additive', "
                     f"got {kind!r}")


# ---------------------------------------------------------------------- softmax and attend
def masked_softmax(scores: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
    """Softmax over the last axis, ignoring positions where the boolean ``mask`` is False.

    A row with no allowed position gets all-zero weights instead of NaN.
    """
    if mask is None:
        return torch.softmax(scores, dim=-1)
    if mask.dtype != torch.bool:
        raise TypeError(f"mask must be a bool tensor (True = may attend), got {mask.dtype}")
    scores = scores.masked_fill(~mask, float("-inf"))
    weights = torch.softmax(scores, dim=-1)
    return weights.masked_fill(~mask.expand_as(weights), 0.0)  # fully masked rows: NaN -> 0


def attend(query: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, score,
           mask: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """One decoder step's attention: (context [B, d_v], weights [B, S]).

    ``score`` is a callable (query [B, d], keys [B, S, d_k]) -> [B, S] or a name for
    ``make_score`` ("dot", "scaled_dot"); ``mask`` [B, S] is True on real source positions.
    """
    _check("values", values, 3)
    if isinstance(score, str):
        score = make_score(score, query.shape[-1], keys.shape[-1])
    if keys.shape[:2] != values.shape[:2]:
        raise ValueError(f"keys and values must share [B, S], got {tuple(keys.shape)} and "
                         f"{tuple(values.shape)}")
    if mask is not None and tuple(mask.shape) != tuple(keys.shape[:2]):
        raise ValueError(f"mask must have shape {tuple(keys.shape[:2])}, got {tuple(mask.shape)}")
    weights = masked_softmax(score(query, keys), mask)
    return torch.einsum("bs,bsd->bd", weights, values), weights


def scaled_dot_product_attention(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                                 mask: torch.Tensor | None = None
                                 ) -> tuple[torch.Tensor, torch.Tensor]:
    """softmax(Q K^T / sqrt(d) + mask) V for tensors shaped (..., T, d), (..., S, d), (..., S, d_v).

    Returns (output (..., T, d_v), weights (..., T, S)). ``mask`` broadcasts to (..., T, S):
    bool (True = may attend) or float (added to the scores), as in torch. Equal to
    ``torch.nn.functional.scaled_dot_product_attention``, which also returns zeros for a query
    that may attend nowhere.
    """
    for name, t in (("query", query), ("key", key), ("value", value)):
        _check(name, t)
        if t.dim() < 2:
            raise ValueError(f"{name} must have shape (..., length, dim), got {tuple(t.shape)}")
    if query.shape[-1] != key.shape[-1] or key.shape[-2] != value.shape[-2]:
        raise ValueError(
            f"shapes do not fit: query {tuple(query.shape)}, key {tuple(key.shape)}, value "
            f"{tuple(value.shape)}; need query (..., T, d), key (..., S, d), value (..., S, d_v)"
        )
    # scaled before the product, as torch's fused kernel does: Q K^T itself may exceed
    # float16's largest number (65,504) where Q K^T / sqrt(d) does not
    scores = (query / math.sqrt(query.shape[-1])) @ key.transpose(-2, -1)
    if mask is not None:
        _check("mask", mask)
        try:
            torch.broadcast_shapes(mask.shape, scores.shape)
        except RuntimeError as err:
            raise ValueError(f"mask of shape {tuple(mask.shape)} does not broadcast to the "
                             f"scores' shape {tuple(scores.shape)} (..., T, S)") from err
        if mask.dtype == torch.bool:
            weights = masked_softmax(scores, mask.expand_as(scores))
        else:
            weights = torch.softmax(scores + mask, dim=-1)
    else:
        weights = torch.softmax(scores, dim=-1)
    return weights @ value, weights


def causal_mask(length: int, device=None) -> torch.Tensor:
    """Bool [length, length], True on and below the diagonal: position t sees 1..t only."""
    return torch.ones(length, length, dtype=torch.bool, device=device).tril()
