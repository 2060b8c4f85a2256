"""Language models and perplexity: n-gram models with four smoothings, and Bengio's neural LM.

Conventions (lecture 01): a sentence is padded with n-1 ``<bos>`` on the left and ends with
``<eos>``; the model predicts every word and the final ``<eos>``, never ``<bos>``. Words not seen
in training are mapped to ``<unk>``. Log-probabilities are natural logs throughout. The special
tokens are the course vocabulary's (``seqlab.data.Vocab``), so every model shares them.

Both models implement the decoding protocol of ``seqlab.decoding``; ``generate`` and ``sample``
are ``decoding.sample`` on them.
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from collections.abc import Sequence

import numpy as np
import torch
from torch import nn

from . import decoding
from .data.vocab import BOS, BOS_ID, EOS, EOS_ID, UNK
from .losses import TokenLoss, token_cross_entropy
from .tensors import evaluating
from .validate import integer, number

SMOOTHINGS = ("mle", "add-k", "interpolated", "kneser-ney")
DISCOUNTS = ("auto", "modified")  # estimated from the counts of counts


def perplexity(log_probs) -> float:
    """exp(-mean log p) of per-token natural-log probabilities.

    The same number as 2 ** (-mean log2 p) and as the N-th root of 1 / P(all tokens): the base
    cancels. A token with probability 0 (log p = -inf) makes the perplexity ``inf``.
    """
    if isinstance(log_probs, torch.Tensor):
        log_probs = log_probs.detach().cpu().double().numpy()
    try:
        values = np.asarray(log_probs, dtype=np.float64).ravel()
    except (TypeError, ValueError) as err:
        raise TypeError(
            f"log_probs must be a sequence of numbers, got {type(log_probs).__name__}"
        ) from err
    if values.size == 0:
        raise ValueError("log_probs is empty; perplexity needs at least one token")
    if np.isnan(values).any():
        raise ValueError("log_probs contains NaN")
    if (values > 0).any():
        raise ValueError(
            f"log_probs must be natural-log probabilities (<= 0), got a maximum of "
            f"{values.max():.6g}; did you pass negative log-likelihoods (losses)?"
        )
    if np.isneginf(values).any():
        return math.inf
    return math.exp(-values.mean())


def _check_sentences(sentences) -> None:
    if isinstance(sentences, str) or not isinstance(sentences, Sequence):
        raise TypeError(
            f"sentences must be a list of token lists, got {type(sentences).__name__}"
        )
    for s in sentences:
        if isinstance(s, str) or not isinstance(s, Sequence):
            raise TypeError(
                "each sentence must be a list of str tokens (e.g. 'the cat'.split()), "
                f"got {type(s).__name__} {s!r:.40}"
            )


class NGramLM:
    """An n-gram language model.

    ``smoothing``:

    - ``"mle"``: c(h, w) / c(h). An unseen history h gets 0.0 for every word (no distribution).
    - ``"add-k"``: ``(c(h, w) + k) / (c(h) + k * |V|)``; ``k=1`` is Laplace, ``k=0`` is MLE.
    - ``"interpolated"``: Jelinek-Mercer, P_i = lam_i P_ML,i + (1 - lam_i) P_{i-1}, down to a
      uniform distribution; an unseen history passes all its weight to the lower order.
      ``lambdas`` gives lam for orders n, n-1, ..., 1 (default 0.7 each, 0.99 for unigrams).
    - ``"kneser-ney"``: interpolated Kneser-Ney with absolute discount ``discount`` (0.75) at
      every order, continuation counts N1+(. h w) below the top order, a uniform floor.
      ``discount="auto"`` estimates one discount per order as n1 / (n1 + 2 n2) from the counts
      of counts (Ney, Essen & Kneser 1994), which suits small corpora better than 0.75.
      ``discount="modified"`` is modified Kneser-Ney (Chen & Goodman 1998, what KenLM and SRILM
      use): three discounts per order, for n-grams seen once, twice and three or more times.

    ``vocab`` is what the model predicts: every training word, ``<unk>`` and ``<eos>`` (not
    ``<bos>``).
    For every history, seen or not, ``prob`` sums to 1 over ``vocab`` for every smoothing but MLE.

    Decoding protocol: token ids are positions in ``vocab``, and ``bos_id`` = ``len(vocab)`` (an
    input only: its log-probability is always -inf); the state is the last n-1 token ids.
    """

    def __init__(
        self,
        n: int,
        smoothing: str = "mle",
        k: float = 1.0,
        discount: float | str = 0.75,
        lambdas: Sequence[float] | None = None,
    ):
        integer("n", n, 1)
        if smoothing not in SMOOTHINGS:
            raise ValueError(f"smoothing must be one of {SMOOTHINGS}, got {smoothing!r}")
        number("k", k, 0)
        if discount not in DISCOUNTS and (
            isinstance(discount, bool) or not isinstance(discount, (int, float))
            or not 0 < discount <= 1
        ):
            raise ValueError(f"discount must be in (0, 1], 'auto' or 'modified', got {discount!r}")
        if lambdas is None:
            lambdas = [0.7] * (n - 1) + [0.99]
        if len(lambdas) != n or any(not 0 <= lam <= 1 for lam in lambdas):
            raise ValueError(f"lambdas must be {n} weights in [0, 1] (orders n..1), got {lambdas}")
        self.n, self.smoothing, self.k, self.discount = n, smoothing, float(k), discount
        self.lambdas = tuple(float(lam) for lam in lambdas)  # lambdas[0] is order n
        self.vocab: list[str] = []
        self._fitted = False

    # ------------------------------------------------------------------ fitting
    def _pad(self, tokens: Sequence[str]) -> list[str]:
        return [BOS] * (self.n - 1) + [t if t in self._index else UNK for t in tokens] + [EOS]

    def fit(self, sentences: Sequence[Sequence[str]]) -> NGramLM:
        """Count n-grams of every order 1..n in tokenized ``sentences``."""
        _check_sentences(sentences)
        if not sentences:
            raise ValueError("sentences is empty; fit needs at least one sentence")
        words = sorted({t for s in sentences for t in s} - {BOS, EOS, UNK})
        self.vocab = [*words, UNK, EOS]
        self._index = {w: i for i, w in enumerate(self.vocab)}
        # counts[m][history] -> Counter(next word -> count), for m = 1..n (history length m-1)
        top: dict[tuple, Counter] = defaultdict(Counter)
        for s in sentences:
            padded = self._pad(s)
            for i in range(self.n - 1, len(padded)):
                top[tuple(padded[i - self.n + 1 : i])][padded[i]] += 1
        tables = {self.n: top}
        for m in range(self.n - 1, 0, -1):
            lower: dict[tuple, Counter] = defaultdict(Counter)
            upper = tables[m + 1]
            for history, nexts in upper.items():
                for w, c in nexts.items():
                    # Kneser-Ney: count distinct left contexts; otherwise: sum raw counts
                    lower[history[1:]][w] += 1 if self.smoothing == "kneser-ney" else c
            tables[m] = lower
        self._tables = {m: dict(t) for m, t in tables.items()}
        self._totals = {m: {h: sum(c.values()) for h, c in t.items()} for m, t in tables.items()}
        # discounts[m] = (d1, d2, d3+): what an n-gram seen once, twice, 3+ times gives up
        self._discounts = {m: self._estimate_discounts(t) for m, t in tables.items()}
        self._freed = {  # Kneser-Ney: the mass each history passes to the lower order, times c(h)
            m: {h: sum(self._discount(m, c) for c in nexts.values()) for h, nexts in t.items()}
            for m, t in self._tables.items()
        } if self.smoothing == "kneser-ney" else {}
        self._fitted = True
        return self

    def _estimate_discounts(self, table: dict) -> tuple[float, float, float]:
        """One discount, or three for modified KN, from n_k = how many n-grams occur k times:
        Y = n1 / (n1 + 2 n2), and d_k = k - (k + 1) Y n_{k+1} / n_k for modified KN."""
        if self.discount not in DISCOUNTS:
            return (float(self.discount),) * 3
        freq = Counter(c for nexts in table.values() for c in nexts.values())
        n = [freq.get(k, 0) for k in range(5)]
        y = n[1] / (n[1] + 2 * n[2]) if n[1] > 0 else 0.5
        if self.discount == "auto" or not all(n[1:5]):
            return (y,) * 3
        return tuple(min(max(k - (k + 1) * y * n[k + 1] / n[k], 0.0), k) for k in (1, 2, 3))

    def _discount(self, m: int, count: int) -> float:
        return self._discounts[m][min(count, 3) - 1]

    # ------------------------------------------------------------------ probabilities
    def _require_fit(self):
        if not self._fitted:
            raise RuntimeError("this NGramLM is not fitted yet; call fit(sentences) first")

    def _history(self, context: Sequence[str]) -> tuple:
        if isinstance(context, str):
            raise TypeError(f"context must be a tuple of words, got the str {context!r}")
        context = [c if (c == BOS or c in self._index) else UNK for c in context]
        context = [BOS] * max(0, self.n - 1 - len(context)) + context
        return tuple(context[len(context) - self.n + 1 :]) if self.n > 1 else ()

    def _order_terms(self, m: int, history: tuple):
        """(counts, total, weight on counts, weight passed down) at order m for ``history``."""
        counts = self._tables[m].get(history)
        if not counts:
            return None, 0, 0.0, 1.0
        total = self._totals[m][history]
        if self.smoothing == "kneser-ney":
            return counts, total, None, self._freed[m][history] / total
        lam = self.lambdas[self.n - m]
        return counts, total, lam, 1.0 - lam

    def prob(self, word: str, context: Sequence[str] = ()) -> float:
        """P(word | context); the last n-1 words of ``context`` are used, <bos>-padded if short."""
        self._require_fit()
        if not isinstance(word, str):
            raise TypeError(f"word must be a str, got {type(word).__name__}")
        if word == BOS:
            raise ValueError(f"{BOS} is never predicted; it only pads the history")
        word = word if word in self._index else UNK
        history = self._history(context)
        if self.smoothing in ("mle", "add-k"):
            counts = self._tables[self.n].get(history, {})
            total = self._totals[self.n].get(history, 0)
            k = self.k if self.smoothing == "add-k" else 0.0
            denominator = total + k * len(self.vocab)
            return (counts.get(word, 0) + k) / denominator if denominator > 0 else 0.0
        p = 1.0 / len(self.vocab)
        for m in range(1, self.n + 1):
            counts, total, lam, backoff = self._order_terms(m, history[len(history) - m + 1 :])
            if counts is None:
                continue
            c = counts.get(word, 0)
            top = max(c - self._discount(m, c), 0.0) if lam is None else lam * c
            p = top / total + backoff * p
        return p

    def distribution(self, context: Sequence[str] = ()) -> np.ndarray:
        """P(w | context) for every w in ``vocab`` at once (vectorised ``prob``)."""
        self._require_fit()
        history = self._history(context)
        index = self._index
        if self.smoothing in ("mle", "add-k"):
            counts = self._tables[self.n].get(history, {})
            k = self.k if self.smoothing == "add-k" else 0.0
            p = np.full(len(self.vocab), k)
            for w, c in counts.items():
                p[index[w]] += c
            total = p.sum()
            return p / total if total > 0 else p
        p = np.full(len(self.vocab), 1.0 / len(self.vocab))
        for m in range(1, self.n + 1):
            counts, total, lam, backoff = self._order_terms(m, history[len(history) - m + 1 :])
            if counts is None:
                continue
            p *= backoff
            ids = np.fromiter((index[w] for w in counts), dtype=np.int64, count=len(counts))
            c = np.fromiter(counts.values(), dtype=np.float64, count=len(counts))
            if lam is None:
                d = np.asarray(self._discounts[m])[np.minimum(c, 3).astype(np.int64) - 1]
                top = np.maximum(c - d, 0.0)
            else:
                top = lam * c
            p[ids] += top / total
        return p

    def logprob(self, word: str, context: Sequence[str] = ()) -> float:
        """Natural log of ``prob`` (-inf where the probability is 0)."""
        p = self.prob(word, context)
        return math.log(p) if p > 0 else -math.inf

    def token_logprobs(self, tokens: Sequence[str]) -> list[float]:
        """log P of each word of the sentence and of the final <eos>, given its n-1 predecessors."""
        self._require_fit()
        _check_sentences([tokens])
        padded = [BOS] * (self.n - 1) + list(tokens) + [EOS]
        return [self.logprob(padded[i], padded[i - self.n + 1 : i] if self.n > 1 else ())
                for i in range(self.n - 1, len(padded))]

    def sentence_logprob(self, tokens: Sequence[str]) -> float:
        """log P(sentence) = sum of ``token_logprobs``, the end of sentence included."""
        return float(sum(self.token_logprobs(tokens)))

    def perplexity(self, sentences: Sequence[Sequence[str]]) -> float:
        """Per-token perplexity over all predicted tokens (words and one <eos> per sentence)."""
        _check_sentences(sentences)
        if not sentences:
            raise ValueError("sentences is empty; perplexity needs at least one sentence")
        return perplexity([lp for s in sentences for lp in self.token_logprobs(s)])

    # ------------------------------------------------------------------ decoding protocol
    @property
    def bos_id(self) -> int:
        self._require_fit()
        return len(self.vocab)

    @property
    def eos_id(self) -> int:
        self._require_fit()
        return self._index[EOS]

    def encode(self, words: Sequence[str]) -> list[int]:
        """Token ids of ``words`` (unknown words -> ``<unk>``; ``<bos>`` -> ``bos_id``)."""
        self._require_fit()
        return [self.bos_id if w == BOS else self._index.get(w, self._index[UNK]) for w in words]

    def start(self, prompt: torch.Tensor) -> dict:
        prompt = decoding.check_prompt(prompt, self.bos_id)
        width = max(self.n - 1, 0)
        read = prompt[:, :-1]
        pad = torch.full((prompt.shape[0], width), self.bos_id, dtype=torch.long)
        history = torch.cat([pad, read.cpu()], dim=1)[:, read.shape[1]:] if width else pad
        return {"history": history, "next_token": prompt[:, -1].cpu()}

    def step(self, state: dict, last_tokens: torch.Tensor):
        """log P(next | last n-1 tokens) for each row, [B, len(vocab) + 1] (<bos> column -inf).

        An MLE model after an unseen history has no distribution; there it can only stop, so
        <eos> gets log-probability 0.
        """
        history = state["history"]
        if self.n > 1:
            history = torch.cat([history, last_tokens.cpu()[:, None]], dim=1)[:, 1:]
        words = [*self.vocab, BOS]
        rows = []
        for ids in history.tolist():
            p = self.distribution([words[i] for i in ids])
            if p.sum() == 0:
                p = np.zeros_like(p)
                p[self.eos_id] = 1.0
            rows.append(np.append(p, 0.0))
        with np.errstate(divide="ignore"):
            log_probs = torch.from_numpy(np.log(np.array(rows)))
        return log_probs, {"history": history}

    select = staticmethod(decoding.select_state)

    def generate(self, max_len: int = 30, seed: int = 0, context: Sequence[str] = ()) -> list[str]:
        """Sample words until <eos> (not returned) or ``max_len`` words, after ``context``."""
        self._require_fit()
        prompt = torch.tensor([[self.bos_id, *self.encode(context)]])
        ids = decoding.sample(self, prompt, max_len=max_len,
                              generator=torch.Generator().manual_seed(seed))[0]
        return [self.vocab[i] for i in ids]


# ---------------------------------------------------------------------- neural LM
class FeedForwardLM(nn.Module):
    """Bengio et al. (2003): embed the n-1 previous words, concatenate, one tanh hidden layer,
    softmax over the vocabulary. ``direct=True`` adds the paper's direct input-to-output
    connections. Decoding protocol: the state is the window of the last n-1 token ids."""

    def __init__(self, vocab_size: int, context_size: int, embed_dim: int = 32,
                 hidden_dim: int = 64, direct: bool = False, bos_id: int = BOS_ID,
                 eos_id: int = EOS_ID):
        super().__init__()
        for name, value in [("vocab_size", vocab_size), ("context_size", context_size),
                            ("embed_dim", embed_dim), ("hidden_dim", hidden_dim)]:
            integer(name, value, 1)
        self.context_size, self.bos_id, self.eos_id = context_size, bos_id, eos_id
        self.embed = nn.Embedding(vocab_size, embed_dim)
        self.hidden = nn.Linear(context_size * embed_dim, hidden_dim)
        self.out = nn.Linear(hidden_dim, vocab_size)
        width = context_size * embed_dim
        self.direct = nn.Linear(width, vocab_size, bias=False) if direct else None

    def forward(self, context: torch.Tensor) -> torch.Tensor:
        """context: LongTensor [B, n-1] of token ids -> logits [B, V]."""
        if context.dim() != 2 or context.shape[1] != self.context_size:
            raise ValueError(
                f"context must have shape [batch, {self.context_size}], got {tuple(context.shape)}"
            )
        x = self.embed(context).flatten(1)
        logits = self.out(torch.tanh(self.hidden(x)))
        return logits + self.direct(x) if self.direct is not None else logits

    def start(self, prompt: torch.Tensor) -> dict:
        prompt = decoding.check_prompt(prompt, self.bos_id)
        pad = torch.full((prompt.shape[0], self.context_size), self.bos_id, dtype=torch.long,
                         device=prompt.device)
        window = torch.cat([pad, prompt[:, :-1]], dim=1)[:, prompt.shape[1] - 1:]
        return {"window": window, "next_token": prompt[:, -1]}

    def step(self, state: dict, last_tokens: torch.Tensor):
        window = torch.cat([state["window"], last_tokens[:, None]], dim=1)[:, 1:]
        return self(window).float().log_softmax(-1), {"window": window}

    select = staticmethod(decoding.select_state)

    def sample(self, max_len: int = 30, seed: int = 0) -> list[int]:
        """Draw token ids from the model until <eos> (not returned) or ``max_len`` tokens."""
        prompt = decoding.bos_prompt(self.bos_id, device=next(self.parameters()).device)
        return decoding.sample(self, prompt, max_len=max_len,
                               generator=torch.Generator().manual_seed(seed))[0]


def ngram_windows(sentences_ids: Sequence[Sequence[int]], context_size: int, bos_id: int,
                  eos_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(contexts [N, context_size], targets [N]) for every predicted token of every sentence,
    padded with ``bos_id`` and ending with ``eos_id``: the same events an n-gram model scores."""
    contexts, targets = [], []
    for ids in sentences_ids:
        padded = [bos_id] * context_size + list(ids) + [eos_id]
        for i in range(context_size, len(padded)):
            contexts.append(padded[i - context_size : i])
            targets.append(padded[i])
    if not targets:
        raise ValueError("no sentences given")
    return torch.tensor(contexts, dtype=torch.long), torch.tensor(targets, dtype=torch.long)


def feedforward_loss(model: FeedForwardLM, batch) -> TokenLoss:
    """Mean cross-entropy (nats per token) of a (contexts, targets) batch, and its number of
    targets; for ``train.fit``."""
    contexts, targets = batch
    return token_cross_entropy(model(contexts), targets)


@torch.no_grad()
def feedforward_logprobs(model: FeedForwardLM, contexts: torch.Tensor, targets: torch.Tensor,
                         batch_size: int = 4096) -> torch.Tensor:
    """log P(target | context) for every window, as a 1-D float tensor (for ``perplexity``)."""
    device = next(model.parameters()).device
    out = []
    with evaluating(model):
        for i in range(0, len(targets), batch_size):
            logits = model(contexts[i : i + batch_size].to(device)).float()
            lp = logits.log_softmax(-1).gather(1, targets[i : i + batch_size, None].to(device))
            out.append(lp.squeeze(1).cpu())
    return torch.cat(out)
