"""Oracles, fixtures and reference parts of the assignments' hidden tests, written once.

Hidden test cells run in the grader (``scoring.execute``), never beside a student's code, so
they may import what students never see: this module is not in the student edition
(``authoring.publish`` ships ``checks`` and ``guard`` only), and visible tests, which students
also run in their own kernel, never import it. A test cell still imports what it uses in its
own hidden block, under a ``_`` name: a name that a test cell binds shadows the student's in
later cells, and no cell may rely on what another cell defined (``selftest --independence``).

The functions a test hands to a student's answer (a model's ``step``, a reference part passed
through ``parts=``) are called back in the grader, as a test cell's own functions are
(``isolation.session``). Those that take arguments from a student's code check them first
(types, and sizes where the work grows with them): they run in the grader, on its time.
"""

from __future__ import annotations

import itertools
import math
import os
import random
from collections import Counter
from types import SimpleNamespace

import numpy as np
import torch

from .checks import expect_float, own_work

MAX_ELEMENTS = 10**5  # a reference part refuses larger tensors: it runs on the grader's time


def fresh_seed() -> int:
    """A seed drawn when the test runs, from the operating system's randomness: inputs made
    from it cannot be known in advance, so no answer can have worked out their results before
    it was called (a test that times an answer must time it on those). Name it in a failure
    message, so that the failure can be reproduced."""
    return int.from_bytes(os.urandom(4), "little")


# ------------------------------------------------------------- 02: RNN language model


def rnn_forward(params: dict, ids, targets, h0):
    """Assignment 02's vanilla RNN language model, one step at a time:
    h_t = tanh(W E[x_t] + U h_{t-1} + b), z_t = V h_t + c. Returns (hs [T+1, H], probs [T, V],
    the mean of -log softmax(z_t)[y_t])."""
    h, hs, probs, nll = h0, [h0], [], []
    for x, y in zip(ids, targets):
        h = np.tanh(params["E"][x] @ params["W"].T + h @ params["U"].T + params["b"])
        z = params["V"] @ h + params["c"]
        lse = z.max() + np.log(np.exp(z - z.max()).sum())
        hs.append(h)
        probs.append(np.exp(z - lse))
        nll.append(lse - z[y])
    return np.stack(hs), np.stack(probs), float(np.mean(nll))


def rnn_gradients(params: dict, ids, targets, h0) -> dict:
    """The gradients of ``rnn_forward``'s mean loss by torch's autograd, an independent
    reference: one array per parameter and for ``h0``."""
    tp = {k: torch.tensor(v, requires_grad=True) for k, v in params.items()}
    th0 = torch.tensor(h0, requires_grad=True)
    h, total = th0, 0.0
    for x, y in zip(ids, targets):
        h = torch.tanh(tp["W"] @ tp["E"][int(x)] + tp["U"] @ h + tp["b"])
        total = total - torch.log_softmax(tp["V"] @ h + tp["c"], 0)[int(y)]
    (total / len(ids)).backward()
    return {**{k: v.grad.numpy() for k, v in tp.items()}, "h0": th0.grad.numpy()}


# ------------------------------------------------------------------- 05: Transformer


def _modest(*tensors) -> None:
    """Each tensor at most MAX_ELEMENTS elements, counting an empty axis as one: the parts
    loop over axes, so a [0, 10**9] tensor would cost as much as a full one."""
    for t in tensors:
        if t is not None and (type(t) is not torch.Tensor or
                              math.prod(max(n, 1) for n in t.shape) > MAX_ELEMENTS):
            raise TypeError(f"expected a torch.Tensor of at most {MAX_ELEMENTS} elements")


def split_heads(x, n_heads):
    """Reference part: [B, T, d] -> [B, n_heads, T, d // n_heads], head i holding features
    i*d_k to (i+1)*d_k - 1."""
    _modest(x)
    if type(n_heads) is not int or not 1 <= n_heads <= x.shape[-1]:
        raise ValueError("n_heads should be an int between 1 and d_model")
    d_k = x.shape[-1] // n_heads
    return torch.stack([x[..., i * d_k : (i + 1) * d_k] for i in range(n_heads)], dim=1)


def merge_heads(x):
    """Reference part: [B, h, T, d_k] -> [B, T, h * d_k]."""
    _modest(x)
    return torch.cat([x[:, i] for i in range(x.shape[1])], dim=-1)


def attention(query, key, value, mask=None):
    """Reference part: scaled dot-product attention over the last two axes, (output, weights);
    mask True where a query may attend, and a query that may attend nowhere gets zeros."""
    _modest(query, key, value, mask)
    lead = torch.broadcast_shapes(query.shape[:-2], key.shape[:-2], value.shape[:-2])
    if lead.numel() * query.shape[-2] * key.shape[-2] > 10**6:
        raise ValueError("attention too large for the reference")
    scores = torch.einsum("...td,...sd->...ts", query, key) / math.sqrt(query.shape[-1])
    mask = torch.ones_like(scores, dtype=torch.bool) if mask is None else mask
    mask = torch.broadcast_to(mask, scores.shape)
    weights = torch.softmax(scores.masked_fill(~mask, float("-inf")), dim=-1)
    weights = torch.where(mask, weights, torch.zeros_like(weights))
    return torch.einsum("...ts,...sd->...td", weights, value), weights


def multi_head_attention(query, key, value, W_q, W_k, W_v, W_o, n_heads, mask=None):
    """Reference part: multi-head attention from the three parts above, (output [B, T, d],
    weights [B, T, S] averaged over the heads); mask broadcastable to [B, T, S]."""
    _modest(query, key, value, W_q, W_k, W_v, W_o, mask)
    q, k, v = (split_heads(x @ W.T, n_heads) for x, W in ((query, W_q), (key, W_k),
                                                             (value, W_v)))
    out, weights = attention(q, k, v, None if mask is None else mask.unsqueeze(-3))
    return merge_heads(out) @ W_o.T, weights.mean(dim=1)


def attention_loops(q, k, v, mask=None):
    """Oracle: scaled dot-product attention by loops over every leading index, query and key,
    (output, weights); a query that may attend nowhere gets zeros."""
    lead, T, S = q.shape[:-2], q.shape[-2], k.shape[-2]
    allowed = torch.ones(T, S, dtype=torch.bool) if mask is None else mask
    allowed = allowed.expand(*lead, T, S)
    out = torch.zeros(*lead, T, v.shape[-1], dtype=q.dtype)
    weights = torch.zeros(*lead, T, S, dtype=q.dtype)
    for idx in itertools.product(*map(range, lead)):
        for t in range(T):
            keys = [s for s in range(S) if allowed[idx][t, s]]
            if not keys:
                continue
            scores = torch.stack([q[idx][t] @ k[idx][s] for s in keys]) / math.sqrt(q.shape[-1])
            p = torch.exp(scores - scores.max())
            p = p / p.sum()
            for j, s in enumerate(keys):
                weights[idx][t, s] = p[j]
                out[idx][t] += p[j] * v[idx][s]
    return out, weights


def multi_head_attention_loops(q, k, v, W_q, W_k, W_v, W_o, n_heads, mask=None):
    """Oracle: multi-head attention item by item and head by head, (output, weights averaged
    over the heads)."""
    B, T, d = q.shape
    S, d_k = k.shape[1], d // n_heads
    allowed = torch.ones(B, T, S, dtype=torch.bool) if mask is None else mask.expand(B, T, S)
    out = torch.zeros(B, T, d, dtype=q.dtype)
    weights = torch.zeros(B, T, S, dtype=q.dtype)
    for b in range(B):
        Q, K, V = q[b] @ W_q.T, k[b] @ W_k.T, v[b] @ W_v.T
        heads = []
        for i in range(n_heads):
            cols = slice(i * d_k, (i + 1) * d_k)
            head, p = attention_loops(Q[:, cols], K[:, cols], V[:, cols], allowed[b])
            heads.append(head)
            weights[b] += p / n_heads
        out[b] = torch.cat(heads, dim=-1) @ W_o.T
    return out, weights


# ------------------------------------------------------------------------ 06: decoding
BOS, EOS = 0, 1  # assignment 06's ids of <bos> and <eos>


def random_model(seed, vocab: int, eos_bias: float = 0.0, max_rows: int | None = None):
    """A model with the decoding protocol whose next-token distribution is a fresh random one
    for every input and prefix, so a hypothesis continued from another one's state gets other
    numbers. Returns ``(model, dist, rows)``: ``dist(source, prefix)`` gives the log-probs
    (a list) after ``prefix`` (a tuple that starts with <bos>); ``rows`` lists how many rows each
    ``model.step`` call got. With ``max_rows``, a call that takes their total past it raises
    AssertionError, so that a search listing every output stops at once."""
    rows: list[int] = []

    def dist(source, prefix):
        rng = random.Random(f"{seed}/{source}/{prefix}")
        logits = [rng.gauss(0.0, 1.5) for _ in range(vocab)]
        logits[EOS] += eos_bias
        logits[BOS] = -math.inf
        top = max(logits)
        lse = top + math.log(sum(math.exp(z - top) for z in logits))
        return [z - lse for z in logits]

    def start(inputs):
        inputs = torch.as_tensor(inputs, dtype=torch.long)
        return {"source": inputs, "prefix": torch.zeros(len(inputs), 0, dtype=torch.long)}

    def step(state, last_tokens):
        if type(last_tokens) is not torch.Tensor or last_tokens.dim() != 1 \
                or last_tokens.dtype.is_floating_point:
            raise TypeError("model.step expects last_tokens as a LongTensor [B]")
        if len(last_tokens) != len(state["source"]):
            raise ValueError(f"model.step got {len(last_tokens)} tokens for a state of "
                             f"{len(state['source'])} rows (one token per row; select the "
                             "state when rows are reordered or repeated)")
        rows.append(len(last_tokens))
        if max_rows is not None and sum(rows) > max_rows:
            raise AssertionError(f"model.step was asked for {sum(rows)} rows in {len(rows)} "
                                 f"calls (the rows of last_tokens, summed), more than the "
                                 f"{max_rows} allowed: beam search steps k hypotheses per input "
                                 "at each step, k * (max_len + 1) * B rows at most")
        prefix = torch.cat([state["prefix"], last_tokens.long()[:, None]], dim=1)
        log_probs = [dist(int(s), tuple(p)) for s, p in zip(state["source"].tolist(),
                                                            prefix.tolist())]
        return torch.tensor(log_probs, dtype=torch.float64), {"source": state["source"],
                                                              "prefix": prefix}

    def select(state, indices):
        indices = torch.as_tensor(indices, dtype=torch.long)
        for value in state.values():  # repeating rows multiplies them: bound the result
            if type(value) is not torch.Tensor or \
                    indices.numel() * math.prod(value.shape[1:]) > MAX_ELEMENTS:
                raise ValueError(f"model.select expects a state of tensors and indices that "
                                 f"select at most {MAX_ELEMENTS} elements of each")
        return {key: value[indices] for key, value in state.items()}

    model = SimpleNamespace(bos_id=BOS, eos_id=EOS, start=start, step=step, select=select)
    return model, dist, rows


def oracle_greedy(dist, source, max_len: int) -> list[int]:
    """Greedy decoding of one input, one step at a time."""
    prefix, out = (BOS,), []
    for _ in range(max_len):
        log_probs = dist(source, prefix)
        best = max(range(len(log_probs)), key=log_probs.__getitem__)
        if best == EOS:
            break
        out.append(best)
        prefix += (best,)
    return out


def check_outputs(got, expected, what: str, hint: str = "") -> None:
    """``got``, what ``greedy`` returned, must be one list of int per row, equal to
    ``expected``'s, without <bos> or <eos>; ``hint`` ends the message of a wrong output."""
    assert type(got) is list and len(got) == len(expected), (
        f"{what}: expected a list of {len(expected)} outputs, one per input row")
    for row, (g, e) in enumerate(zip(got, expected)):
        assert type(g) is list and all(type(w) is int for w in g), (
            f"{what}: each output should be a list of int (use .tolist()), got "
            f"{type(g).__name__}")
        assert EOS not in g and BOS not in g, f"{what}: outputs should not contain <bos> or <eos>"
        assert g == e, f"{what}, row {row} of {len(expected)}: got {g}, expected {e}{hint}"


def oracle_beam(dist, source, k: int, max_len: int, beta: float, variant: str = "rules"):
    """Beam search of one input by the rules of assignment 06's part 2, one hypothesis at a
    time: (tokens, logprob), or None if nothing finished. ``variant`` breaks rule 3 at step
    max_len, to name it in feedback: "no_cut_off" lets no hypothesis finish there without
    <eos>; "join_if_room" finishes the <eos> candidates first and lets the live hypotheses
    join only if fewer than k have finished then."""
    live, finished = [((BOS,), 0.0)], []

    def key(f):
        return -f[1] / f[2] ** beta

    for t in range(1, max_len + 1):
        cands = sorted(((lp + step_lp, prefix, w) for prefix, lp in live
                        for w, step_lp in enumerate(dist(source, prefix))
                        if lp + step_lp > -math.inf), key=lambda c: -c[0])
        last = t == max_len
        new = [(list(prefix[1:]) + ([] if w == EOS else [w]), score, t)
               for score, prefix, w in cands[:k] if w == EOS or (last and variant == "rules")]
        finished = sorted(finished + new, key=key)[:k]
        live = [(prefix + (w,), score) for score, prefix, w in cands if w != EOS][:k]
        if last and variant == "join_if_room" and len(finished) < k:
            finished += [(list(prefix[1:]), score, t) for prefix, score in live]
        if len(finished) >= k:
            break
    if not finished:
        return None
    tokens, logprob, _ = min(finished, key=key)
    return tokens, logprob


def oracle_exhaustive(dist, source, vocab: int, max_len: int, alpha: float):
    """The best output of one input by score log P / L ** alpha among every output: finished
    within max_len steps, or max_len tokens and out of steps. (tokens, logprob)."""
    words = [w for w in range(vocab) if w not in (BOS, EOS)]
    best = None
    for n in range(max_len + 1):
        for seq in itertools.product(words, repeat=n):
            prefix, logprob = (BOS,), 0.0
            for w in seq:
                logprob += dist(source, prefix)[w]
                prefix += (w,)
            if n < max_len:
                logprob, length = logprob + dist(source, prefix)[EOS], n + 1
            else:
                length = n
            if best is None or logprob / length ** alpha > best[2]:
                best = (list(seq), logprob, logprob / length ** alpha)
    return best[0], best[1]


_RULE_BROKEN = {
    "no_cut_off": "rule 3: at step max_len every one of the k best candidates finishes, those "
                  "without <eos> cut off",
    "join_if_room": "rule 3: at step max_len the k best candidates all finish, with or without "
                    "<eos>, whether or not k hypotheses have finished already",
}


def broken_rule(got, dist, source, k: int, max_len: int, beta: float) -> str:
    """A hint naming the rule a wrong beam-search output breaks, when one variant explains it
    ("" otherwise)."""
    for variant, rule in _RULE_BROKEN.items():
        other = oracle_beam(dist, source, k, max_len, beta, variant)
        if other is not None and got == other[0]:
            return f" (your output is what beam search gives if you break {rule})"
    return ""


def check_beams(got, expected, what: str, hint=lambda row, tokens: "") -> None:
    """``got``, what ``beam_search`` returned, must be one ``(tokens, logprob)`` tuple per row
    equal to ``expected``'s; ``hint(row, tokens)`` is added to the message of wrong tokens."""
    assert type(got) is list and len(got) == len(expected), (
        f"{what}: expected a list of {len(expected)} (tokens, logprob) tuples, one per row")
    for row, (g, (tokens, logprob)) in enumerate(zip(got, expected)):
        assert type(g) is tuple and len(g) == 2, (
            f"{what}: row {row} should be a (tokens, logprob) tuple, got {type(g).__name__}")
        assert type(g[0]) is list and all(type(w) is int for w in g[0]), (
            f"{what}: row {row}'s tokens should be a list of int, got {type(g[0]).__name__}")
        assert g[0] == tokens, f"{what}, row {row}: got {g[0]}, expected {tokens}" + hint(
            row, g[0])
        expect_float(g[1], logprob, f"{what}, row {row}: the log-probability (not the score)",
                     rel=1e-6, abs_=1e-9)


# --------------------------------------------------------------------------- 07: BLEU


def ngrams(tokens, n):
    """Reference part: the n-grams (tuples) of a list of tokens, in order."""
    if type(tokens) not in (list, tuple) or type(n) is not int:
        raise TypeError("expected a list of tokens and an int n")
    if n < 1:  # a negative n would make len(tokens) - n + 1 empty n-grams
        raise ValueError(f"n should be at least 1, got {n}")
    return [tuple(tokens[i : i + n]) for i in range(len(tokens) - n + 1)]


def max_ref_counts(refs_tokens, n):
    """Reference part: n-gram -> its largest count in any one reference."""
    if type(refs_tokens) not in (list, tuple):
        raise TypeError("expected a list of references")
    best = Counter()
    for ref in refs_tokens:
        best |= Counter(ngrams(ref, n))  # | keeps the larger count
    return best


def modified_precision(hyp_tokens, refs_tokens, n):
    """Reference part: (clipped n-gram matches, n-grams) of a hypothesis."""
    hyp, best = Counter(ngrams(hyp_tokens, n)), max_ref_counts(refs_tokens, n)
    return sum(min(c, best[g]) for g, c in hyp.items()), sum(hyp.values())


def brevity_penalty(c, r):
    """Reference part: 1 if c > r, exp(1 - r / c) if 0 < c <= r, 0 if c = 0."""
    if not all(type(v) in (int, float) for v in (c, r)):
        raise TypeError("expected two numbers")
    return 1.0 if c > r else (math.exp(1 - r / c) if c else 0.0)


# --------------------------------------------------------------------------- 08: BERT MLM


def masked(mask_tokens, ids, special_ids, mask_id, vocab_size, seed, forbidden, **rates):
    """A student's ``mask_tokens`` on ``ids`` with a generator seeded ``seed``, under the
    assignment's rules, after checking what it returns: (inputs, labels), LongTensors of the
    shape of ``ids``."""
    got = own_work(mask_tokens, ids, special_ids, mask_id, vocab_size,
                   torch.Generator().manual_seed(seed), forbidden=forbidden, **rates)
    assert type(got) is tuple and len(got) == 2, (
        f"mask_tokens should return a tuple (inputs, labels), got {type(got).__name__}")
    for t in got:
        assert type(t) is torch.Tensor and t.dtype == torch.long \
            and tuple(t.shape) == tuple(ids.shape), (
                f"mask_tokens should return two LongTensors of shape {tuple(ids.shape)}")
    return got
