"""BERT-style masked language modelling (Devlin et al. 2019): masking, sentence pairs, a small
BERT built from the encoder layers of ``seqlab.transformer``, fill-in-the-blank, and its uses:
a classifier and a tagger on top, fine-tuned or on frozen features.

A left-to-right LM cannot use the right context; an encoder that sees both sides would see the
word it must predict. Masking is the way out: hide 15% of the tokens and predict only those.
Of the hidden ones 80% become ``<mask>``, 10% a random token and 10% stay, so the model
cannot assume that only ``<mask>`` positions matter, which fine-tuning never shows it.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Sequence

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from . import config as _config
from .data.batching import pad_batch
from .data.vocab import CLS, MASK, PAD, PAD_ID, SEP, SPECIALS, Vocab
from .losses import TokenLoss, token_cross_entropy
from .tensors import evaluating
from .transformer import Embedding, EncoderLayer, TransformerConfig, final_norm, padding_key_mask
from .validate import integer, number

IGNORE = -100  # the label of unselected positions: cross_entropy(ignore_index=-100) skips it


# ---------------------------------------------------------------------- masking
def _check_rate(name: str, value, low_open: bool = False) -> float:
    return float(number(name, value, 0, 1, low_open=low_open, high_open=low_open))


def _special_ids(vocab) -> torch.Tensor:
    if not isinstance(vocab, Vocab):
        raise TypeError(f"vocab must be a seqlab.data.Vocab, got {type(vocab).__name__}")
    missing = [t for t in (PAD, MASK, CLS, SEP) if t not in vocab]
    if missing:
        raise ValueError(f"vocab lacks the special token(s) {missing}; build it with "
                         "seqlab.data.Vocab, which always has them")
    return torch.tensor([vocab.stoi[t] for t in SPECIALS if t in vocab])


def mask_tokens(ids: torch.Tensor, vocab: Vocab, *, p: float = 0.15, mask_rate: float = 0.8,
                random_rate: float = 0.1, generator: torch.Generator | None = None,
                exact: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """Choose positions to predict and corrupt them: (inputs, labels), both LongTensor [B, T].

    Positions are chosen among the non-special tokens only (never <pad>, <cls>, <sep>, <bos>,
    <eos>, <mask>, <unk>). ``exact=False`` draws each with probability ``p`` (as HuggingFace's
    collator does); ``exact=True`` picks exactly max(1, round(p * n)) per sequence, n its length
    without padding, specials counted (as BERT's data script does), or all its candidates if
    fewer. Of the chosen, ``mask_rate`` become <mask>, ``random_rate`` a random token, the rest
    stay. ``labels`` hold the original id at chosen positions and -100 elsewhere.

    Random replacements are drawn from the ordinary tokens only, a choice of the course: the
    reference implementations (BERT's script, HF's ``DataCollatorForLanguageModeling``, which
    draws from ``len(tokenizer)``) draw from the whole vocabulary, specials included, which can
    put a <sep> or <pad> in the middle of a sentence: a corruption no input ever shows again.
    With few ordinary tokens the difference is large (7 specials in a vocabulary of 20: over a
    third of HF's random replacements are specials, as the course's tests measure).
    """
    if not isinstance(ids, torch.Tensor) or ids.dim() != 2 or ids.dtype != torch.long:
        raise ValueError(f"ids must be a LongTensor [batch, length], got "
                         f"{tuple(ids.shape) if isinstance(ids, torch.Tensor) else type(ids)}")
    p = _check_rate("p", p, low_open=True)
    mask_rate, random_rate = _check_rate("mask_rate", mask_rate), \
        _check_rate("random_rate", random_rate)
    if mask_rate + random_rate > 1:
        raise ValueError(f"mask_rate + random_rate must be at most 1, got {mask_rate} + "
                         f"{random_rate}")
    specials = _special_ids(vocab).to(ids.device)
    if len(vocab) <= len(specials):
        raise ValueError("vocab has no ordinary token to choose or to draw at random")
    candidates = ~torch.isin(ids, specials)

    def uniform():
        return torch.rand(ids.shape, generator=generator).to(ids.device)

    if exact:
        lengths = (ids != vocab.pad_id).sum(1)
        want = torch.clamp((p * lengths.double()).round().long(), min=1)
        score = uniform().masked_fill(~candidates, -1.0)  # candidates rank first
        rank = score.argsort(dim=1, descending=True).argsort(dim=1)
        selected = (rank < want[:, None]) & candidates
    else:
        selected = (uniform() < p) & candidates
    action = uniform()
    to_mask = selected & (action < mask_rate)
    to_random = selected & (action >= mask_rate) & (action < mask_rate + random_rate)
    random_ids = torch.randint(len(specials), len(vocab), ids.shape, generator=generator)
    inputs = ids.masked_fill(to_mask, vocab.mask_id)
    inputs = torch.where(to_random, random_ids.to(ids.device), inputs)
    labels = ids.masked_fill(~selected, IGNORE)
    return inputs, labels


# ---------------------------------------------------------------------- sentence pairs
def pack_pair(a: Sequence[int], b: Sequence[int] | None, vocab: Vocab, max_len: int
              ) -> tuple[list[int], list[int]]:
    """``<cls> A <sep> B <sep>`` (or ``<cls> A <sep>``) and its segment ids (0 for <cls>, A
    and the first <sep>; 1 for B and the last <sep>), at most ``max_len`` tokens: the longer
    side loses its last token until the pair fits (BERT's script also trims the front at
    random)."""
    a, b = list(a), None if b is None else list(b)
    specials = 3 if b is not None else 2
    integer("max_len", max_len, specials + 1)
    while len(a) + len(b or []) + specials > max_len:
        (a if b is None or len(a) >= len(b) else b).pop()
    ids = [vocab.cls_id, *a, vocab.sep_id]
    segments = [0] * len(ids)
    if b is not None:
        ids += [*b, vocab.sep_id]
        segments += [1] * (len(b) + 1)
    return ids, segments


def nsp_pairs(documents: Sequence[Sequence[Sequence[int]]], seed: int = 0
              ) -> list[tuple[list[int], list[int], int]]:
    """Next-sentence-prediction examples (A, B, label) from documents (lists of segments).

    For every segment A that has a successor: half the time B is that successor (label 1 =
    "is next"), half the time a segment of another document (label 0). d2l uses this
    convention; BERT's data script and Hugging Face use the opposite (0 = "is next"), so say
    which when you compare.
    """
    if sum(1 for d in documents if d) < 2:
        raise ValueError("nsp_pairs needs at least two non-empty documents")
    rng = random.Random(seed)
    out = []
    for i, doc in enumerate(documents):
        for j in range(len(doc) - 1):
            if rng.random() < 0.5:
                out.append((list(doc[j]), list(doc[j + 1]), 1))
            else:
                other = rng.choice([k for k, d in enumerate(documents) if k != i and d])
                out.append((list(doc[j]), list(rng.choice(documents[other])), 0))
    return out


def collate_pairs(packed: Sequence[tuple[list[int], list[int]]], pad_id: int = PAD_ID
                  ) -> tuple[torch.Tensor, torch.Tensor]:
    """Pad packed (ids, segments) to (ids [B, T], segments [B, T])."""
    width = max(len(ids) for ids, _ in packed)
    ids = torch.full((len(packed), width), pad_id, dtype=torch.long)
    segments = torch.zeros((len(packed), width), dtype=torch.long)
    for i, (x, s) in enumerate(packed):
        ids[i, : len(x)], segments[i, : len(s)] = torch.tensor(x), torch.tensor(s)
    return ids, segments


# ---------------------------------------------------------------------- the model
class BertModel(nn.Module):
    """An encoder-only Transformer with BERT's embeddings and heads.

    Input: token + learned position + segment embeddings, LayerNorm, dropout (the
    ``transformer.Embedding`` block); then ``num_layers`` encoder layers of
    ``seqlab.transformer`` (no causal mask: every token sees both sides; padding is never
    attended to). Heads: the MLM head (dense, GELU, LayerNorm, then the token embedding matrix
    transposed: the output weights ARE the input embeddings) and the NSP head on the pooled
    <cls> vector (dense + tanh, then 2 classes). Sized by a ``TransformerConfig``; without
    one, BERT's own defaults: learned positions, ``max_len=128``, ``dropout=0.1``.
    ``norm="pre"`` trains more easily at small scale; BERT itself is post-LN.
    """

    def __init__(self, vocab_size: int, config: TransformerConfig | None = None, *legacy,
                 pad_id: int = PAD_ID, **sizes):
        super().__init__()
        self.config = c = _config.resolve(
            TransformerConfig, "BertModel", config, legacy, sizes,
            defaults=TransformerConfig(max_len=128, dropout=0.1, positions="learned"),
            legacy_order=("d_model", "num_heads", "num_layers", "max_len", "dropout", "norm"))
        self.pad_id = pad_id
        self.embed = Embedding(vocab_size, c, pad_id, segments=2, layer_norm=True)
        self.layers = nn.ModuleList(EncoderLayer(c.d_model, c.num_heads, c.d_ff, c.dropout,
                                                 c.norm) for _ in range(c.num_layers))
        self.final_ln = final_norm(c)
        d = c.d_model
        self.mlm_dense, self.mlm_ln = nn.Linear(d, d), nn.LayerNorm(d)
        self.mlm_bias = nn.Parameter(torch.zeros(vocab_size))
        self.pooler, self.nsp = nn.Linear(d, d), nn.Linear(d, 2)
        # BERT draws its embeddings from N(0, 0.02^2). torch's default N(0, 1), read back
        # through the tied output matrix, starts the MLM with logits spread ~sqrt(d_model)
        # and a loss far above log V, which costs hundreds of steps to undo.
        with torch.no_grad():
            tables = [self.embed.tokens.weight, self.embed.segments.weight]
            if c.positions == "learned":
                tables.insert(1, self.embed.positions.table)
            for table in tables:
                table.normal_(0.0, 0.02)
            self.embed.tokens.weight[pad_id].zero_()

    @property
    def token_vectors(self) -> torch.Tensor:
        """The token embedding matrix [V, d], which the MLM head reuses as its output layer."""
        return self.embed.tokens.weight

    def encode(self, ids: torch.Tensor, segments: torch.Tensor | None = None) -> torch.Tensor:
        """Hidden states [B, T, d] of every position."""
        if not isinstance(ids, torch.Tensor) or ids.dim() != 2 or ids.dtype != torch.long:
            raise ValueError(f"ids must be a LongTensor [batch, length], got "
                             f"{tuple(ids.shape) if isinstance(ids, torch.Tensor) else ids!r}")
        if ids.shape[1] > self.config.max_len:
            raise ValueError(f"sequences of {ids.shape[1]} tokens exceed max_len="
                             f"{self.config.max_len}")
        x, mask = self.embed(ids, 0, segments), padding_key_mask(ids, self.pad_id)
        for layer in self.layers:
            x = layer(x, mask)[0]
        return self.final_ln(x)

    def mlm_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """Scores of every vocabulary token at every position, with the tied output matrix."""
        h = self.mlm_ln(F.gelu(self.mlm_dense(hidden)))
        return h @ self.token_vectors.T + self.mlm_bias

    def pooled(self, hidden: torch.Tensor) -> torch.Tensor:
        """The <cls> position's vector through the pooler: the whole input in one vector."""
        return torch.tanh(self.pooler(hidden[:, 0]))

    def forward(self, ids, segments=None):
        """(MLM logits [B, T, V], NSP logits [B, 2])."""
        hidden = self.encode(ids, segments)
        return self.mlm_logits(hidden), self.nsp(self.pooled(hidden))


def mlm_loss(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Mean cross-entropy over the labelled (chosen) positions only; -100 elsewhere is skipped."""
    return token_cross_entropy(logits, labels, IGNORE).mean


def pretrain_loss(model: BertModel, batch) -> TokenLoss:
    """For ``train.fit``: batch = (inputs, segments, labels) for MLM only, or with NSP labels
    as a fourth entry, whose cross-entropy is then added (BERT's two objectives). Counted per
    labelled position, the MLM loss's unit."""
    inputs, segments, labels, *nsp = batch
    mlm, nsp_logits = model(inputs, segments)
    loss, count = token_cross_entropy(mlm, labels, IGNORE)
    return TokenLoss(loss + F.cross_entropy(nsp_logits.float(), nsp[0]) if nsp else loss, count)


@torch.no_grad()
def fill_mask(model: BertModel, vocab: Vocab, tokens: Sequence[str], k: int = 5
              ) -> list[list[tuple[str, float]]]:
    """For each ``<mask>`` in ``tokens``, the k most probable fillers with their probabilities.

    ``tokens`` is one sentence without <cls>/<sep> (added here), e.g.
    ``"the dog <mask> today".split()``. Special tokens are never proposed.
    """
    if isinstance(tokens, str):
        raise TypeError("tokens must be a list of str, e.g. 'the <mask> runs'.split()")
    where = [i + 1 for i, t in enumerate(tokens) if t == MASK]
    if not where:
        raise ValueError(f"tokens must contain at least one {MASK}, got {list(tokens)}")
    ids = torch.tensor([[vocab.cls_id, *vocab.encode(list(tokens)), vocab.sep_id]],
                       device=model.token_vectors.device)
    with evaluating(model):
        logits = model.mlm_logits(model.encode(ids))[0].float()
    logits[:, _special_ids(vocab).to(logits.device)] = float("-inf")
    probs = logits.softmax(-1)
    out = []
    for i in where:
        top = probs[i].topk(k)
        out.append([(vocab.itos[j], float(q)) for q, j in zip(top.values, top.indices)])
    return out


@torch.no_grad()
def fill_mask_probs(model: BertModel, vocab: Vocab, sentences: Sequence[Sequence[str]]
                    ) -> torch.Tensor:
    """P(token | the rest) at the one ``<mask>`` of each sentence: [N, len(vocab)] on the CPU.

    The batched form of ``fill_mask`` for evaluation: each sentence (words, without
    <cls>/<sep>) holds exactly one ``<mask>``; special tokens get probability 0.
    """
    if isinstance(sentences, str) or not sentences or any(isinstance(s, str) for s in sentences):
        raise TypeError("sentences must be a non-empty list of token lists, e.g. "
                        "['the <mask> runs'.split()]")
    where = []
    for n, tokens in enumerate(sentences):
        found = [i for i, t in enumerate(tokens) if t == MASK]
        if len(found) != 1:
            raise ValueError(f"sentence {n} must hold exactly one {MASK}, got {list(tokens)}")
        where.append(found[0] + 1)  # +1: <cls> comes first
    ids, _ = pad_batch([[vocab.cls_id, *vocab.encode(list(t)), vocab.sep_id] for t in sentences],
                       vocab.pad_id)
    device = model.token_vectors.device
    with evaluating(model):
        hidden = model.encode(ids.to(device))
    rows = hidden[torch.arange(len(where), device=device), torch.tensor(where, device=device)]
    logits = model.mlm_logits(rows).float()
    logits[:, _special_ids(vocab).to(device)] = float("-inf")
    return logits.softmax(-1).cpu()


def exact_fill_posterior(logprob: Callable[[str], float], tokens: Sequence[str], position: int,
                         candidates: Sequence[str]) -> np.ndarray:
    """The exact answer to a fill-in-the-blank from a model of whole sentences:

        P(w | left, right) = P(left w right) / sum_v P(left v right),

    for every candidate w (a one-word blank at ``tokens[position]``; the word there now is
    ignored). ``logprob(sentence: str) -> float`` is a natural-log sentence probability, -inf
    for an impossible sentence, e.g. ``ToyLanguage.logprob``. Returns probabilities aligned
    with ``candidates``, float64, summing to 1.
    """
    if not callable(logprob):
        raise TypeError(f"logprob must be a function of a sentence, got {type(logprob).__name__}")
    tokens = list(tokens)
    integer("position", position, 0, below=len(tokens))
    if isinstance(candidates, str) or not candidates:
        raise ValueError("candidates must be a non-empty list of words")
    scores = np.array([logprob(" ".join([*tokens[:position], w, *tokens[position + 1:]]))
                       for w in candidates], dtype=np.float64)
    top = scores.max()
    if top == -math.inf:
        raise ValueError(f"no candidate makes {' '.join(tokens)!r} possible at position "
                         f"{position}: the context itself is impossible")
    weights = np.exp(scores - top)
    return weights / weights.sum()


def _check_freeze(freeze) -> bool:
    if not isinstance(freeze, bool):
        raise TypeError(f"freeze must be True (feature-based) or False (fine-tuning), got "
                        f"{freeze!r}")
    return freeze


def _freeze_encoder(bert: BertModel) -> None:
    """Keep every pretrained weight as it is; only the pooler (which only NSP would have
    trained) stays trainable, with the new layer on top."""
    for name, weight in bert.named_parameters():
        weight.requires_grad_(name.startswith("pooler."))


def _hidden(bert: BertModel, ids, segments, frozen: bool) -> torch.Tensor:
    """The encoder's hidden states [B, T, d]; fixed features (no gradient, evaluation mode)
    when ``frozen``."""
    if not frozen:
        return bert.encode(ids, segments)
    with torch.no_grad(), evaluating(bert):
        return bert.encode(ids, segments)


class BertClassifier(nn.Module):
    """A pretrained ``BertModel`` with a new linear layer on its pooled <cls> vector.

    ``freeze=False`` fine-tunes: the encoder's weights are a starting point and train with the
    new layer. ``freeze=True`` is the feature-based use (as with ELMo): the encoder stays as
    pretrained, in evaluation mode, and only the pooler and the new layer learn, reading the
    encoder's hidden states as fixed features, which can be computed once and stored.
    """

    def __init__(self, bert: BertModel, n_classes: int, dropout: float = 0.1,
                 freeze: bool = False):
        super().__init__()
        if not isinstance(bert, BertModel):
            raise TypeError(f"bert must be a BertModel, got {type(bert).__name__}")
        self.bert, self.drop = bert, nn.Dropout(dropout)
        self.head = nn.Linear(bert.pooler.out_features, n_classes)
        self.freeze = _check_freeze(freeze)
        if freeze:
            _freeze_encoder(bert)

    def forward(self, ids, segments=None):
        hidden = _hidden(self.bert, ids, segments, self.freeze)
        return self.head(self.drop(self.bert.pooled(hidden)))


def classifier_loss(model: BertClassifier, batch) -> TokenLoss:
    """For ``train.fit``: batch = (ids, segments, class labels); mean over the examples."""
    ids, segments, labels = batch
    return token_cross_entropy(model(ids, segments), labels)


# ---------------------------------------------------------------------- token-level tasks
class BertTagger(nn.Module):
    """A tag for every token: a new linear layer on each position's hidden state, BERT's recipe
    for token-level tasks such as named entities (Devlin et al. 2019, Fig. 4d).

    ``forward(ids, segments)`` -> tag scores [B, T, n_tags] (those at <cls>, <sep> and padding
    are never trained or read). ``freeze`` as in ``BertClassifier``: the paper's feature-based
    tagger fed the frozen hidden states to a BiLSTM; here the linear layer reads them directly.
    """

    def __init__(self, bert: BertModel, n_tags: int, dropout: float = 0.1,
                 freeze: bool = False):
        super().__init__()
        if not isinstance(bert, BertModel):
            raise TypeError(f"bert must be a BertModel, got {type(bert).__name__}")
        integer("n_tags", n_tags, 2)
        self.bert, self.drop = bert, nn.Dropout(dropout)
        self.head = nn.Linear(bert.config.d_model, n_tags)
        self.freeze = _check_freeze(freeze)
        if freeze:
            _freeze_encoder(bert)

    def forward(self, ids, segments=None):
        return self.head(self.drop(_hidden(self.bert, ids, segments, self.freeze)))


def tagging_batch(sentences: Sequence[Sequence[int]], tags: Sequence[Sequence[int]],
                  vocab: Vocab) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Tagged sentences as BERT reads them: (ids, segments, tags), each LongTensor [B, T].

    ``ids`` is ``<cls> w_1 ... w_n <sep>`` padded on the right, ``segments`` all 0, ``tags``
    the tag ids aligned with the words and -100 (skipped by the loss) at <cls>, <sep> and
    padding.
    """
    if isinstance(sentences, torch.Tensor) or not sentences or len(sentences) != len(tags):
        raise ValueError(f"sentences and tags must be non-empty lists of equal length, got "
                         f"{len(sentences)} and {len(tags)}")
    for n, (words, labels) in enumerate(zip(sentences, tags)):
        if len(words) != len(labels):
            raise ValueError(f"sentence {n} has {len(words)} tokens but {len(labels)} tags")
    ids, _ = pad_batch([[vocab.cls_id, *words, vocab.sep_id] for words in sentences],
                       vocab.pad_id)
    padded = torch.full_like(ids, IGNORE)
    for n, labels in enumerate(tags):
        padded[n, 1:len(labels) + 1] = torch.tensor(list(labels), dtype=torch.long)
    return ids, torch.zeros_like(ids), padded


def tagger_loss(model: BertTagger, batch) -> TokenLoss:
    """For ``train.fit``: mean cross-entropy over the tagged tokens of a ``tagging_batch``, and
    their count."""
    ids, segments, tags = batch
    return token_cross_entropy(model(ids, segments), tags, IGNORE)
