"""Decoding, written once for every model that generates.

A model that generates follows the ``Generator`` protocol:

- ``bos_id``, ``eos_id``: the ids of <bos> and <eos>;
- ``start(*inputs) -> state`` for a batch of B rows. A seq2seq model takes its sources and does
  the per-source work once (encoder outputs, projected attention keys). A language model takes a
  prompt LongTensor [B, T0] whose rows begin with <bos>, reads all of it but its last token,
  and leaves that token for the first ``step`` (a bare start is the prompt ``[[<bos>]]``);
- ``step(state, last_tokens LongTensor[B]) -> (log_probs FloatTensor[B, V], state)``: the
  distribution of the next token after ``last_tokens`` (a seq2seq model's first step gets <bos>);
- ``select(state, indices LongTensor[K]) -> state``: rows reordered or repeated (K may differ
  from B), what beam search needs to keep its best hypotheses.

State is batch-first: every tensor in it, however deeply nested in dicts, tuples or lists, has
the batch on dim 0, so one ``select_state`` serves every model and a new entry (a key/value
cache) survives selection. Everything here (greedy, sampling, scoring) uses only these three
calls, so it works for n-gram, feed-forward, RNN and Transformer models alike.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Protocol, runtime_checkable

import torch

from .train import evaluating


@runtime_checkable
class Generator(Protocol):
    """What a model must offer to be decoded (see the module docstring)."""

    bos_id: int
    eos_id: int

    def start(self, *inputs) -> Any: ...

    def step(self, state, last_tokens: torch.Tensor) -> tuple[torch.Tensor, Any]: ...

    def select(self, state, indices: torch.Tensor) -> Any: ...


def select_state(state, indices: torch.Tensor):
    """Index every tensor in ``state`` on dim 0 with ``indices``; other values pass through."""
    if isinstance(state, torch.Tensor):
        return state.index_select(0, indices.to(state.device))
    if isinstance(state, dict):
        return {k: select_state(v, indices) for k, v in state.items()}
    if isinstance(state, (tuple, list)):
        return type(state)(select_state(v, indices) for v in state)
    return state


def check_generator(model) -> None:
    """A clear TypeError when ``model`` lacks part of the protocol."""
    missing = [name for name in ("bos_id", "eos_id", "start", "step", "select")
               if not hasattr(model, name)]
    if missing:
        raise TypeError(f"model must implement the decoding protocol (bos_id, eos_id, start, "
                        f"step, select); {type(model).__name__} lacks {', '.join(missing)}")


def _check_positive_int(name: str, value) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name} must be an int >= 1, got {value!r}")


def _model_device(model) -> torch.device:
    if isinstance(model, torch.nn.Module):
        for p in model.parameters():
            return p.device
    return torch.device(getattr(model, "device", "cpu"))


def _first_tokens(model, state, batch: int, device) -> torch.Tensor:
    """The token the first ``step`` reads: <bos> for seq2seq, a prompt's last token for an LM."""
    if isinstance(state, dict) and "next_token" in state:
        return state["next_token"]
    return torch.full((batch,), model.bos_id, dtype=torch.long, device=device)


def _batch_size(inputs) -> int:
    first = inputs[0] if inputs else None
    if isinstance(first, torch.Tensor):
        return first.shape[0]
    if isinstance(first, Sequence):
        return len(first)
    raise TypeError("the first input must be a tensor or a sequence with one row per sentence")


def _trim(rows: list[list[int]], eos_id: int) -> list[list[int]]:
    return [r[: r.index(eos_id)] if eos_id in r else r for r in rows]


@torch.no_grad()
def decode(model, *inputs, max_len: int, choose: Callable[[torch.Tensor], torch.Tensor],
           on_step: Callable | None = None) -> list[list[int]]:
    """Left-to-right decoding with a rule ``choose(log_probs [B, V]) -> tokens [B]``.

    Every row stops at <eos> or after ``max_len`` tokens; returns the token ids of each row
    without <bos>/<eos>. ``on_step(state)`` sees the state after every step (lecture 04 collects
    attention weights this way). Greedy decoding and sampling are this loop with two rules.
    """
    check_generator(model)
    _check_positive_int("max_len", max_len)
    with evaluating(model):
        state = model.start(*inputs)
        batch = _batch_size(inputs)
        tokens = _first_tokens(model, state, batch, _model_device(model))
        done = torch.zeros(batch, dtype=torch.bool, device=tokens.device)
        out = []
        for _ in range(max_len):
            log_probs, state = model.step(state, tokens)
            tokens = choose(log_probs).to(tokens.device)
            tokens = tokens.masked_fill(done, model.eos_id)  # finished rows stay finished
            out.append(tokens)
            if on_step is not None:
                on_step(state)
            done |= tokens == model.eos_id
            if bool(done.all()):
                break
    return _trim(torch.stack(out, dim=1).tolist(), model.eos_id)


def greedy(model, *inputs, max_len: int = 60, on_step: Callable | None = None
           ) -> list[list[int]]:
    """The most probable next token at every step: y_t = argmax_w P(w | y_<t, inputs)."""
    return decode(model, *inputs, max_len=max_len, choose=lambda lp: lp.argmax(-1),
                  on_step=on_step)


def temperature_scale(log_probs: torch.Tensor, temperature: float) -> torch.Tensor:
    """log softmax(log p / T): T < 1 sharpens, T > 1 flattens; the ranking never changes."""
    if isinstance(temperature, bool) or not isinstance(temperature, (int, float)):
        raise TypeError(f"temperature must be a number, got {type(temperature).__name__}")
    if not temperature > 0:
        raise ValueError(f"temperature must be > 0, got {temperature!r}; temperature 0 is "
                         "greedy decoding: call greedy(...)")
    return (log_probs / temperature).log_softmax(-1)


def sample(model, *inputs, max_len: int = 60, temperature: float = 1.0,
           generator: torch.Generator | None = None) -> list[list[int]]:
    """Draw each next token from P(w | y_<t, inputs) ** (1/T), renormalised.

    ``generator`` (a CPU ``torch.Generator``) makes the draws repeatable.
    """
    temperature_scale(torch.zeros(1, 1), temperature)  # validates before any work

    def draw(log_probs):
        probs = temperature_scale(log_probs.float(), temperature).exp().cpu()
        return torch.multinomial(probs, 1, generator=generator).squeeze(1)

    return decode(model, *inputs, max_len=max_len, choose=draw)


@torch.no_grad()
def sequence_logprob(model, *inputs, targets: Sequence[Sequence[int]]) -> torch.Tensor:
    """log P(targets[i] <eos> | inputs[i]) for every row i, teacher-forced: [B] float64.

    ``targets`` are token id lists without <bos>/<eos>; the <eos> that ends each is scored too,
    so the empty output has the probability of <eos> first.
    """
    check_generator(model)
    if isinstance(targets, torch.Tensor) or not isinstance(targets, Sequence):
        raise TypeError("targets must be a list of token id lists, one per row")
    batch = _batch_size(inputs)
    if len(targets) != batch:
        raise ValueError(f"targets has {len(targets)} rows but the inputs have {batch}")
    length = max(len(t) for t in targets) + 1
    device = _model_device(model)
    gold = torch.full((batch, length), model.eos_id, dtype=torch.long, device=device)
    for i, t in enumerate(targets):
        gold[i, : len(t)] = torch.as_tensor(list(t), dtype=torch.long)
    lengths = torch.tensor([len(t) + 1 for t in targets], device=device)
    total = torch.zeros(batch, dtype=torch.float64, device=device)
    with evaluating(model):
        state = model.start(*inputs)
        tokens = _first_tokens(model, state, batch, device)
        for t in range(length):
            log_probs, state = model.step(state, tokens)
            picked = log_probs.double().gather(1, gold[:, t : t + 1]).squeeze(1)
            total += torch.where(t < lengths, picked, torch.zeros_like(picked))
            tokens = gold[:, t]
    return total.cpu()


class PrefixLM:
    """Adapter: a plain ``next_logprobs(prefixes LongTensor[B, t]) -> [B, V]`` function becomes
    a ``Generator``. Its state is the prefix read so far, so each step costs a full re-read; a
    real model keeps a hidden state or a cache instead."""

    def __init__(self, next_logprobs: Callable[[torch.Tensor], torch.Tensor], bos_id: int,
                 eos_id: int):
        if not callable(next_logprobs):
            raise TypeError("next_logprobs must be a function of the prefixes [B, t]")
        self.next_logprobs, self.bos_id, self.eos_id = next_logprobs, bos_id, eos_id

    def start(self, prompt: torch.Tensor) -> dict:
        prompt = check_prompt(prompt, self.bos_id)
        return {"prefix": prompt[:, :-1], "next_token": prompt[:, -1]}

    def step(self, state: dict, last_tokens: torch.Tensor):
        prefix = torch.cat([state["prefix"], last_tokens[:, None]], dim=1)
        return self.next_logprobs(prefix), {"prefix": prefix}

    select = staticmethod(select_state)


def check_prompt(prompt, bos_id: int) -> torch.Tensor:
    """A language model's prompt: LongTensor [B, T0 >= 1] whose rows begin with <bos>."""
    if not isinstance(prompt, torch.Tensor) or prompt.dim() != 2 or prompt.shape[1] < 1 \
            or prompt.dtype != torch.long:
        raise ValueError(f"prompt must be a LongTensor [batch, length >= 1] starting with <bos>, "
                         f"got {type(prompt).__name__} "
                         f"{tuple(prompt.shape) if isinstance(prompt, torch.Tensor) else ''}")
    if not bool((prompt[:, 0] == bos_id).all()):
        raise ValueError(f"every prompt row must begin with <bos> (id {bos_id}); got first "
                         f"tokens {prompt[:, 0].tolist()}")
    return prompt


def bos_prompt(bos_id: int, batch: int = 1, device=None) -> torch.Tensor:
    """The bare prompt [[<bos>]] * batch: start a language model from nothing."""
    return torch.full((batch, 1), bos_id, dtype=torch.long, device=device)

