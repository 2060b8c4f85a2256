"""BLEU from scratch, number for number equal to sacrebleu 2.6 with the same options.

Papineni et al. (2002): clipped n-gram precisions p_1..p_N, their geometric mean, times a
brevity penalty. Corpus BLEU adds up the counts of all sentences first and computes once.
The edge cases (no matches, empty hypotheses, smoothing) follow sacrebleu's choices exactly;
the tests compare the two on random corpora.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache

from .validate import integer

SMOOTHINGS = {"none": None, "floor": 0.1, "add-k": 1.0, "exp": None}  # default smooth_value
TOKENIZERS = ("13a", "none")

# mteval-v13a, as in WMT. Step 1 pads every character of the class [{-~ [-` space-& (-+ :-@ /]
# with spaces; sacrebleu does it with a regex, str.translate does the same in one C pass.
_PAD = str.maketrans({c: f" {c} " for c in map(chr, range(128))
                      if re.fullmatch(r"[\{-\~\[-\` -\&\(-\+\:-\@\/]", c)})
# Then "." and "," are split off unless next to a digit, and "-" after a digit.
_PERIOD_AFTER = re.compile(r"([^0-9])([\.,])")
_PERIOD_BEFORE = re.compile(r"([\.,])([^0-9])")
_DASH = re.compile(r"([0-9])(-)")


@lru_cache(maxsize=2**16)
def tokenize_13a(line: str) -> str:
    """The 13a tokenizer: unescape four HTML entities, split punctuation; tokens joined by " "."""
    line = line.replace("<skipped>", "").replace("-\n", "").replace("\n", " ")
    if "&" in line:
        line = (line.replace("&quot;", '"').replace("&amp;", "&").replace("&lt;", "<")
                .replace("&gt;", ">"))
    line = f" {line} ".translate(_PAD)
    if "." in line or "," in line:
        line = _PERIOD_BEFORE.sub(r" \1 \2", _PERIOD_AFTER.sub(r"\1 \2 ", line))
    if "-" in line:
        line = _DASH.sub(r"\1 \2 ", line)
    return " ".join(line.split())


def bleu_tokens(text: str, method: str = "13a", lowercase: bool = False) -> list[str]:
    """Tokens of ``text`` as BLEU sees them (``"none"``: split on whitespace only)."""
    if method not in TOKENIZERS:
        raise ValueError(f"tokenize must be one of {TOKENIZERS}, got {method!r}")
    if lowercase:
        text = text.lower()
    text = text.rstrip()
    return (tokenize_13a(text) if method == "13a" else text).split()


def ngrams(tokens: Sequence[str], n: int) -> list[tuple[str, ...]]:
    """The n-grams of ``tokens`` in order: ngrams(["a", "b", "c"], 2) -> [("a","b"), ("b","c")]."""
    integer("n", n, 1)
    if isinstance(tokens, str):
        raise TypeError("tokens must be a list of str, got a str; split it first")
    return list(zip(*(tokens[i:] for i in range(n))))


def _all_ngrams(tokens: Sequence[str], max_n: int) -> Counter:
    counts: Counter = Counter()
    for n in range(1, max_n + 1):
        counts.update(zip(*(tokens[i:] for i in range(n))))
    return counts


def modified_precision(hyp_tokens: Sequence[str], refs_tokens: Sequence[Sequence[str]],
                       n: int) -> tuple[int, int]:
    """(clipped matches, total) of the hypothesis n-grams: each n-gram counts at most as often
    as it occurs in the single reference where it occurs most."""
    hyp = Counter(ngrams(hyp_tokens, n))
    max_ref: Counter = Counter()
    for ref in refs_tokens:
        max_ref |= Counter(ngrams(ref, n))  # | keeps the maximum count
    return sum(min(c, max_ref[g]) for g, c in hyp.items()), sum(hyp.values())


def closest_ref_length(c: int, ref_lengths: Sequence[int]) -> int:
    """The reference length closest to the hypothesis length ``c``; on a tie, the shorter."""
    if not ref_lengths:
        raise ValueError("ref_lengths is empty: every hypothesis needs at least one reference")
    return min(ref_lengths, key=lambda r: (abs(c - r), r))


def brevity_penalty(c: int, r: int) -> float:
    """1 if the hypothesis is longer than the reference, else exp(1 - r/c); 0 when c = 0."""
    if c < 0 or r < 0:
        raise ValueError(f"lengths must be >= 0, got c={c}, r={r}")
    if c >= r:
        return 1.0
    return math.exp(1 - r / c) if c > 0 else 0.0


@dataclass(frozen=True)
class BLEUScore:
    """BLEU (0-100) with its parts: precisions in percent, brevity penalty, lengths, counts."""

    score: float
    precisions: list[float]
    bp: float
    sys_len: int
    ref_len: int
    counts: list
    totals: list

    def __str__(self) -> str:
        precisions = "/".join(f"{p:.1f}" for p in self.precisions)
        return (f"BLEU = {self.score:.2f} {precisions} (BP = {self.bp:.3f} ratio = "
                f"{self.sys_len / self.ref_len if self.ref_len else 0:.3f} hyp_len = "
                f"{self.sys_len} ref_len = {self.ref_len})")


def compute_bleu(counts: Sequence, totals: Sequence, sys_len: int, ref_len: int,
                 smooth: str = "exp", smooth_value: float | None = None,
                 use_effective_order: bool = False) -> BLEUScore:
    """BLEU from its sufficient statistics (summed over the corpus).

    Smoothing (Chen & Cherry 2014): ``"exp"`` gives the k-th order with no match precision
    100 / (2^k * total); ``"floor"`` gives it 100 * smooth_value / total; ``"add-k"`` adds
    smooth_value to the matches and totals of orders >= 2; ``"none"`` leaves it 0, so BLEU is 0.
    With ``use_effective_order``, orders with no n-gram at all are left out of the mean.
    """
    if smooth not in SMOOTHINGS:
        raise ValueError(f"smooth must be one of {tuple(SMOOTHINGS)}, got {smooth!r}")
    value = SMOOTHINGS[smooth] if smooth_value is None else smooth_value
    counts, totals = list(counts), list(totals)
    max_n = len(counts)
    bp = brevity_penalty(sys_len, ref_len)
    precisions = [0.0] * max_n
    if not any(counts):  # nothing matched at all
        return BLEUScore(0.0, precisions, bp, sys_len, ref_len, counts, totals)
    exp_factor, order = 1.0, max_n
    for n in range(max_n):
        if smooth == "add-k" and n > 0:
            counts[n] += value
            totals[n] += value
        if totals[n] == 0:
            break
        if use_effective_order:
            order = n + 1
        if counts[n] == 0:
            if smooth == "exp":
                exp_factor *= 2
                precisions[n] = 100.0 / (exp_factor * totals[n])
            elif smooth == "floor":
                precisions[n] = 100.0 * value / totals[n]
        else:
            precisions[n] = 100.0 * counts[n] / totals[n]
    # sacrebleu floors log(0) at -9999999999, which makes the score 0
    logs = [math.log(p) if p > 0 else -9999999999 for p in precisions[:order]]
    score = bp * math.exp(sum(logs) / order)
    return BLEUScore(score, precisions, bp, sys_len, ref_len, counts, totals)


def _check_inputs(hypotheses, references) -> None:
    if isinstance(hypotheses, str) or not isinstance(hypotheses, Sequence):
        raise TypeError(f"hypotheses must be a list of str, got {type(hypotheses).__name__}")
    if isinstance(references, str) or not isinstance(references, Sequence):
        raise TypeError(f"references must be a list (one list of str per hypothesis), got "
                        f"{type(references).__name__}")
    if len(hypotheses) != len(references):
        raise ValueError(f"got {len(hypotheses)} hypotheses but {len(references)} reference "
                         "lists; references[i] holds the references of hypothesis i")
    for i, (hyp, refs) in enumerate(zip(hypotheses, references)):
        if not isinstance(hyp, str):
            raise TypeError(f"hypotheses[{i}] must be a str, got {type(hyp).__name__}")
        if isinstance(refs, str):
            raise TypeError(
                f"references[{i}] must be a list of str, got the str {refs!r:.40}; wrap it: "
                "[reference]"
            )
        if not refs:
            raise ValueError(f"hypothesis {i} has no reference; every hypothesis needs one")
        if not all(isinstance(r, str) for r in refs):
            raise TypeError(f"references[{i}] must contain only str")


def corpus_bleu(hypotheses: Sequence[str], references: Sequence[Sequence[str]], *,
                max_n: int = 4, smooth: str = "exp", smooth_value: float | None = None,
                tokenize: str = "13a", lowercase: bool = False,
                use_effective_order: bool = False) -> BLEUScore:
    """Corpus BLEU. ``references[i]`` is the list of references of ``hypotheses[i]``; their
    number may differ from sentence to sentence (sacrebleu wants streams: see ``to_streams``)."""
    _check_inputs(hypotheses, references)
    if smooth not in SMOOTHINGS:
        raise ValueError(f"smooth must be one of {tuple(SMOOTHINGS)}, got {smooth!r}")
    if tokenize not in TOKENIZERS:
        raise ValueError(f"tokenize must be one of {TOKENIZERS}, got {tokenize!r}")
    integer("max_n", max_n, 1)
    counts, totals = [0] * max_n, [0] * max_n
    sys_len = ref_len = 0
    for hyp, refs in zip(hypotheses, references):
        ref_tokens = [bleu_tokens(r, tokenize, lowercase) for r in refs]
        max_ref = _all_ngrams(ref_tokens[0], max_n)
        for tokens in ref_tokens[1:]:
            for gram, c in _all_ngrams(tokens, max_n).items():
                if c > max_ref[gram]:
                    max_ref[gram] = c
        hyp_tokens = bleu_tokens(hyp, tokenize, lowercase)
        for gram, c in _all_ngrams(hyp_tokens, max_n).items():
            n = len(gram) - 1
            totals[n] += c
            if gram in max_ref:
                counts[n] += min(c, max_ref[gram])
        sys_len += len(hyp_tokens)
        ref_len += closest_ref_length(len(hyp_tokens), [len(t) for t in ref_tokens])
    return compute_bleu(counts, totals, sys_len, ref_len, smooth, smooth_value,
                        use_effective_order)


def sentence_bleu(hypothesis: str, references: Sequence[str], *, max_n: int = 4,
                  smooth: str = "exp", smooth_value: float | None = None, tokenize: str = "13a",
                  lowercase: bool = False, use_effective_order: bool = True) -> BLEUScore:
    """BLEU of one sentence (effective order on by default, as in sacrebleu)."""
    return corpus_bleu([hypothesis], [references], max_n=max_n, smooth=smooth,
                       smooth_value=smooth_value, tokenize=tokenize, lowercase=lowercase,
                       use_effective_order=use_effective_order)


def to_streams(references: Sequence[Sequence[str]]) -> list[list[str | None]]:
    """Per-sentence reference lists -> sacrebleu's streams (``streams[k][i]``: reference k of
    sentence i), padded with None where a sentence has fewer references."""
    width = max((len(refs) for refs in references), default=0)
    return [[refs[k] if k < len(refs) else None for refs in references] for k in range(width)]


def from_streams(streams: Sequence[Sequence[str | None]]) -> list[list[str]]:
    """sacrebleu's reference streams -> one list of references per sentence (None dropped)."""
    return [[r for r in refs if r is not None] for refs in zip(*streams)]
