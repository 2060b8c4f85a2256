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

Budgets: every decoder takes at most ``max_len`` steps, <eos> included, so greedy, beam search
and exact search search the same space of outputs.
"""

from __future__ import annotations

import heapq
import itertools
import warnings
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
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


# ---------------------------------------------------------------------- sampling
def temperature_scale(log_probs: torch.Tensor, temperature: float) -> torch.Tensor:
    """log softmax(log p / T): T < 1 sharpens, T > 1 flattens; the ranking never changes.
    T -> 0 approaches greedy decoding, T -> infinity the uniform distribution."""
    if isinstance(temperature, bool) or not isinstance(temperature, (int, float)):
        raise TypeError(f"temperature must be a number, got {type(temperature).__name__}")
    if not temperature > 0:
        raise ValueError(f"temperature must be > 0, got {temperature!r}; temperature 0 is "
                         "greedy decoding: call greedy(...)")
    return (log_probs / temperature).log_softmax(-1)


def top_k_filter(log_probs: torch.Tensor, k: int) -> torch.Tensor:
    """Keep the k most probable tokens of each row (ties with the k-th are kept too, as in
    HuggingFace and nanoGPT); the rest get -inf. Returns renormalised log-probs [B, V]."""
    _check_positive_int("k", k)
    k = min(k, log_probs.shape[-1])
    kth = log_probs.topk(k, dim=-1).values[..., -1:]
    return log_probs.masked_fill(log_probs < kth, float("-inf")).log_softmax(-1)


def top_p_filter(log_probs: torch.Tensor, p: float) -> torch.Tensor:
    """Nucleus filter (Holtzman et al. 2020): keep the smallest set of most probable tokens
    whose mass reaches p, the token that crosses p included, so at least one token stays.
    Returns renormalised log-probs [B, V] with -inf outside the set."""
    if isinstance(p, bool) or not isinstance(p, (int, float)) or not 0 < p <= 1:
        raise ValueError(f"p must be a number in (0, 1], got {p!r}")
    sorted_lp, order = log_probs.sort(dim=-1, descending=True)
    mass_before = sorted_lp.softmax(-1).cumsum(-1) - sorted_lp.softmax(-1)
    drop_sorted = mass_before >= p  # the crossing token has mass_before < p: kept
    drop = drop_sorted.scatter(-1, order, drop_sorted)
    return log_probs.masked_fill(drop, float("-inf")).log_softmax(-1)


def sampling_distribution(log_probs: torch.Tensor, temperature: float = 1.0,
                          top_k: int | None = None, top_p: float | None = None
                          ) -> torch.Tensor:
    """The log-probs ``sample`` draws from: temperature, then top-k, then top-p (HF's order)."""
    log_probs = temperature_scale(log_probs.float(), temperature)
    if top_k is not None:
        log_probs = top_k_filter(log_probs, top_k)
    if top_p is not None:
        log_probs = top_p_filter(log_probs, top_p)
    return log_probs


def sample(model, *inputs, max_len: int = 60, temperature: float = 1.0,
           top_k: int | None = None, top_p: float | None = None,
           generator: torch.Generator | None = None) -> list[list[int]]:
    """Draw each next token from ``sampling_distribution`` of the model's next-token log-probs.

    ``generator`` (a CPU ``torch.Generator``) makes the draws repeatable.
    """
    sampling_distribution(torch.zeros(1, 2), temperature, top_k, top_p)  # validate first

    def draw(log_probs):
        probs = sampling_distribution(log_probs, temperature, top_k, top_p).exp().cpu()
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



# ---------------------------------------------------------------------- search
@dataclass
class Hypothesis:
    """One output: ``tokens`` without <bos>/<eos>, ``logprob`` = sum of the log-probs of its
    steps (the final <eos> included when ``finished``), ``score`` = what it was ranked by."""

    tokens: list[int]
    logprob: float
    score: float
    finished: bool = True


def _score(logprob: float, length: int, length_penalty: float) -> float:
    return logprob / length ** length_penalty if length_penalty else logprob


@torch.no_grad()
def beam_search(model, *inputs, beam_size: int, max_len: int = 60,
                length_penalty: float = 0.0, n_best: int = 1) -> list[list[Hypothesis]]:
    """Beam search, batched over sentences and beams.

    Each step extends every live beam by every token; among a sentence's K * V candidates,
    those ending in <eos> that rank within the top K are set aside as finished, and the K best
    others stay live. A sentence is done when ``beam_size`` hypotheses have finished (HF's
    ``early_stopping=True``) or after ``max_len`` steps, when the live beams join the finished
    ones (``finished=False``). Final ranking: ``logprob / len ** length_penalty`` with ``len`` the
    output tokens including <eos>. ``length_penalty`` 0 ranks by log-probability (favouring
    short outputs); 1 by log-probability per token. HF divides by ``len ** length_penalty``
    the same way (its default 1.0); GNMT (Wu et al. 2016) divides by ((5 + len) / 6) ** alpha.

    Returns, per input row, up to ``n_best`` hypotheses, best first. ``beam_size=1`` is greedy.
    """
    check_generator(model)
    _check_positive_int("beam_size", beam_size)
    _check_positive_int("max_len", max_len)
    _check_positive_int("n_best", n_best)
    if n_best > beam_size:
        raise ValueError(f"n_best ({n_best}) cannot exceed beam_size ({beam_size})")
    if isinstance(length_penalty, bool) or not isinstance(length_penalty, (int, float)):
        raise TypeError(f"length_penalty must be a number, got {length_penalty!r}")
    batch, k = _batch_size(inputs), beam_size
    device = _model_device(model)
    with evaluating(model):
        state = model.start(*inputs)
        first = _first_tokens(model, state, batch, device)
        rows = torch.arange(batch, device=device).repeat_interleave(k)
        state, tokens = model.select(state, rows), first[rows.to(first.device)]
        scores = torch.full((batch, k), float("-inf"), dtype=torch.float64, device=device)
        scores[:, 0] = 0.0  # one live beam at first, so no candidate appears k times
        history = torch.empty(batch, k, 0, dtype=torch.long, device=device)
        finished: list[list[Hypothesis]] = [[] for _ in range(batch)]
        done = torch.zeros(batch, dtype=torch.bool)
        for t in range(1, max_len + 1):
            log_probs, state = model.step(state, tokens)
            vocab = log_probs.shape[-1]
            cand = scores[..., None] + log_probs.to(device).double().view(batch, k, vocab)
            cand = cand.view(batch, -1)
            kth = cand.topk(k, dim=-1).values[:, -1:]
            eos_cand = cand.view(batch, k, vocab)[:, :, model.eos_id]
            ended = (eos_cand >= kth) & eos_cand.isfinite()
            # best first, so the last free slots go to the most probable endings
            for b, beam in sorted(ended.nonzero().tolist(), key=lambda i: -eos_cand[i[0], i[1]]):
                if not done[b] and len(finished[b]) < k:
                    lp = float(eos_cand[b, beam])
                    finished[b].append(Hypothesis(history[b, beam].tolist(), lp,
                                                  _score(lp, t, length_penalty)))
            live = cand.view(batch, k, vocab).clone()
            live[:, :, model.eos_id] = float("-inf")
            scores, index = live.view(batch, -1).topk(k, dim=-1)
            beam, token = index // vocab, index % vocab
            history = torch.cat([history.gather(1, beam[..., None].expand(-1, -1, t - 1)),
                                 token[..., None]], dim=2)
            done |= torch.tensor([len(f) >= k for f in finished])
            if bool(done.all()):
                break
            state = model.select(state, (beam + torch.arange(batch, device=device)[:, None] * k)
                                 .view(-1))
            tokens = token.view(-1)
        for b in range(batch):
            if not done[b]:  # out of steps: the live beams compete with the finished ones
                for j in range(k):
                    lp = float(scores[b, j])
                    if lp > float("-inf"):
                        finished[b].append(Hypothesis(history[b, j].tolist(), lp,
                                                      _score(lp, history.shape[2],
                                                             length_penalty), False))
    return [sorted(f, key=lambda h: -h.score)[:n_best] for f in finished]


@torch.no_grad()
def exact_search(model, *inputs, max_len: int, max_expansions: int = 10_000,
                 beam_size: int = 5) -> list[Hypothesis | None]:
    """The output with the highest log-probability among all outputs of at most ``max_len``
    steps (<eos> included), found exactly, for every input row.

    Best-first search: log-probs are <= 0, so a prefix's log-probability bounds every extension,
    and the first finished hypothesis taken from the frontier is the best. Prefixes worse than
    beam search's best finished output are pruned. The empty output (<eos> first) is a valid
    answer, and often the model's best one (Stahlberg & Byrne 2019).

    A row that needs more than ``max_expansions`` model steps gets None (with a warning), never
    a guess.
    """
    check_generator(model)
    _check_positive_int("max_len", max_len)
    _check_positive_int("max_expansions", max_expansions)
    beams = beam_search(model, *inputs, beam_size=beam_size, max_len=max_len)
    batch = _batch_size(inputs)
    device = _model_device(model)
    results: list[Hypothesis | None] = []
    with evaluating(model):
        start = model.start(*inputs)
        first = _first_tokens(model, start, batch, device)
        for b in range(batch):
            found = beams[b][0] if beams[b] and beams[b][0].finished else None
            # prune below beam's best, less a slack: a float32 model scores a row alone (here)
            # and among beams (there) with different rounding, about 1e-6 per step apart
            bound = float("-inf") if found is None else found.logprob - 1e-4 * (
                1 + abs(found.logprob))
            results.append(_best_first(model, model.select(start, torch.tensor([b], device=device)),
                                       first[b : b + 1], max_len, max_expansions, bound))
    over = sum(r is None for r in results)
    if over:
        warnings.warn(f"exact_search: {over} of {batch} row(s) needed more than max_expansions="
                      f"{max_expansions} steps; they are None (raise max_expansions or max_len "
                      "smaller)", RuntimeWarning, stacklevel=2)
    return results


def _best_first(model, state, token, max_len, max_expansions, bound):
    tie = itertools.count()  # heap order for equal log-probs, never comparing states
    frontier = [(-0.0, next(tie), [], state, token)]
    best = None if bound == float("-inf") else bound
    expansions = 0
    while frontier:
        neg, _, prefix, state, token = heapq.heappop(frontier)
        if token is None:  # a finished hypothesis: nothing left can beat it
            return Hypothesis(prefix, -neg, -neg)
        if expansions >= max_expansions:
            return None
        expansions += 1
        log_probs, state = model.step(state, token)
        log_probs = log_probs[0].double().cpu()
        end = -neg + float(log_probs[model.eos_id])
        if best is None or end >= best:
            heapq.heappush(frontier, (-end, next(tie), prefix, None, None))
        if len(prefix) + 1 >= max_len:
            continue  # only <eos> fits in the budget
        for w in torch.nonzero(log_probs > float("-inf")).flatten().tolist():
            lp = -neg + float(log_probs[w])
            if w != model.eos_id and (best is None or lp >= best):
                heapq.heappush(frontier, (-lp, next(tie), [*prefix, w], state,
                                          torch.tensor([w], device=token.device)))
    raise RuntimeError("exact search emptied its frontier: the model's log-probs changed "
                       "between calls, or are not normalised")


# ---------------------------------------------------------------------- contrastive decoding
class _Contrast:
    """A generator whose "log-probs" are the contrastive scores of an expert and an amateur."""

    def __init__(self, expert, amateur, alpha: float, amateur_temperature: float):
        self.expert, self.amateur = expert, amateur
        self.alpha, self.tau = alpha, amateur_temperature
        self.bos_id, self.eos_id = expert.bos_id, expert.eos_id
        self.device, self.training = _model_device(expert), False

    def start(self, *inputs):
        return self.expert.start(*inputs), self.amateur.start(*inputs)

    def step(self, state, last_tokens):
        lp_e, s_e = self.expert.step(state[0], last_tokens)
        lp_a, s_a = self.amateur.step(state[1], last_tokens)
        return contrastive_scores(lp_e, lp_a, self.alpha, self.tau), (s_e, s_a)

    def select(self, state, indices):
        return self.expert.select(state[0], indices), self.amateur.select(state[1], indices)

    def eval(self):
        return self

    def train(self, mode=True):
        return self


def contrastive_scores(expert_log_probs: torch.Tensor, amateur_log_probs: torch.Tensor,
                       alpha: float = 0.1, amateur_temperature: float = 1.0) -> torch.Tensor:
    """log p_expert - log p_amateur(T) over the plausible head {x : p_expert(x) >= alpha *
    max p_expert}, -inf elsewhere (Li et al. 2023). The head keeps the amateur from promoting
    tokens the expert itself finds implausible."""
    if not 0 <= alpha <= 1:
        raise ValueError(f"alpha must be in [0, 1], got {alpha!r}")
    lp_e = expert_log_probs.float().log_softmax(-1)
    lp_a = temperature_scale(amateur_log_probs.float().to(lp_e.device), amateur_temperature)
    head = lp_e >= lp_e.max(-1, keepdim=True).values + torch.log(torch.tensor(alpha))
    return (lp_e - lp_a).masked_fill(~head, float("-inf"))


def contrastive_decoding(expert, amateur, *inputs, alpha: float = 0.1,
                         amateur_temperature: float = 1.0, beam_size: int = 1,
                         max_len: int = 60) -> list[list[Hypothesis]]:
    """Search for the output that the expert likes much more than the amateur does.

    Both models read the same inputs and share the vocabulary and specials. Returns what
    ``beam_search`` returns; ``logprob`` there is the summed contrastive score.
    Not to be confused with contrastive *search* (Su et al. 2022), a single-model method.
    """
    check_generator(expert)
    check_generator(amateur)
    if (expert.bos_id, expert.eos_id) != (amateur.bos_id, amateur.eos_id):
        raise ValueError("expert and amateur must share <bos> and <eos> ids, got "
                         f"{(expert.bos_id, expert.eos_id)} and "
                         f"{(amateur.bos_id, amateur.eos_id)}")
    with evaluating(expert), evaluating(amateur):
        return beam_search(_Contrast(expert, amateur, alpha, amateur_temperature), *inputs,
                           beam_size=beam_size, max_len=max_len)


# ---------------------------------------------------------------------- degeneration
def _ngrams(seq: Sequence, n: int) -> list[tuple]:
    return [tuple(seq[i : i + n]) for i in range(len(seq) - n + 1)]


def repetition_rate(sequences: Sequence[Sequence], n: int = 2) -> float:
    """Mean over sequences of 1 - unique n-grams / n-grams (rep-n, Welleck et al. 2020):
    0 when no n-gram of a sequence repeats, near 1 for a loop. Sequences shorter than n skip."""
    _check_positive_int("n", n)
    rates = [1 - len(set(g)) / len(g) for s in sequences if (g := _ngrams(s, n))]
    if not rates:
        raise ValueError(f"no sequence has {n} tokens or more")
    return sum(rates) / len(rates)


def distinct_n(sequences: Sequence[Sequence], n: int = 2) -> float:
    """Distinct n-grams / all n-grams over all sequences together (Li et al. 2016)."""
    _check_positive_int("n", n)
    counts = Counter(g for s in sequences for g in _ngrams(s, n))
    if not counts:
        raise ValueError(f"no sequence has {n} tokens or more")
    return len(counts) / sum(counts.values())
