"""Sequence-to-sequence models: an RNN encoder, a decoder with or without attention.

P(y | x) = prod_t P(y_t | y_<t, x): the decoder is a conditional language model. Training uses
teacher forcing (the decoder reads the gold previous word); the loss is the mean over real
target tokens, J = (1/T) sum_t J_t, padding excluded.

``Seq2Seq`` implements the decoding protocol of ``seqlab.decoding``: ``start(src, src_lengths)``
encodes the sources once, ``step`` runs one decoder step; greedy decoding, beam search and
sampling are written once, there, for every model.
"""

from __future__ import annotations

import random

import torch
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

from . import config as _config
from . import decoding
from .attention import make_score, masked_softmax
from .compat import moved
from .data import pad_batch
from .data.vocab import BOS_ID, EOS_ID, PAD_ID
from .losses import TokenLoss, token_cross_entropy
from .rnn import LSTM, RNNConfig, batch_first_state, layer_first_state
from .tensors import evaluating
from .validate import number

_RNNS = {"gru": nn.GRU, "lstm": LSTM}
DEFAULTS = RNNConfig(cell="gru")  # the encoder-decoders of lectures 03 and 04


def _sizes(owner: str, config, legacy: tuple, sizes: dict, legacy_order: tuple[str, ...],
           one_layer: bool = False) -> RNNConfig:
    c = _config.resolve(RNNConfig, owner, config, legacy, sizes, defaults=DEFAULTS,
                        legacy_order=legacy_order, stacklevel=4)
    if c.cell not in _RNNS:
        raise ValueError(f"cell must be one of {sorted(_RNNS)} in an encoder-decoder, got "
                         f"{c.cell!r}")
    if one_layer and (c.num_layers, c.dropout) != (1, 0.0):
        raise ValueError(f"{owner} is one RNN layer without dropout; got num_layers="
                         f"{c.num_layers} and dropout={c.dropout}")
    return c


class Encoder(nn.Module):
    """Embedding + GRU/LSTM over padded batches (packed, so padding never enters the RNN).

    Returns outputs [B, S, hidden * directions] and the decoder's initial state: the final
    states of the last layer, both directions joined by a linear layer when bidirectional.
    """

    def __init__(self, vocab_size: int, config: RNNConfig | None = None, *legacy,
                 bidirectional: bool = False, pad_id: int = PAD_ID, **sizes):
        super().__init__()
        self.config = c = _sizes("Encoder", config, legacy, sizes,
                                 ("embed_dim", "hidden_dim", "num_layers", "cell"))
        self.dirs = 2 if bidirectional else 1
        self.embed = nn.Embedding(vocab_size, c.embed_dim, padding_idx=pad_id)
        self.rnn = _RNNS[c.cell](c.embed_dim, c.hidden_dim, c.num_layers, batch_first=True,
                                 bidirectional=bidirectional,
                                 dropout=c.dropout if c.num_layers > 1 else 0.0)
        self.bridge = nn.Linear(2 * c.hidden_dim, c.hidden_dim) if bidirectional else None
        self.output_dim = c.hidden_dim * self.dirs

    def _join(self, h: torch.Tensor) -> torch.Tensor:
        """[layers * dirs, B, H] -> the last layer's state [1, B, H]."""
        last = h.view(self.config.num_layers, self.dirs, h.shape[1], h.shape[2])[-1]
        if self.bridge is None:
            return last
        return torch.tanh(self.bridge(torch.cat([last[0], last[1]], dim=-1)))[None]

    def forward(self, src: torch.Tensor, src_lengths: torch.Tensor):
        if src.dim() != 2 or src_lengths.shape != (src.shape[0],):
            raise ValueError(f"src must be [batch, length] and src_lengths [batch], got "
                             f"{tuple(src.shape)} and {tuple(src_lengths.shape)}")
        if bool((src_lengths == src.shape[1]).all()):  # no padding: packing would only cost
            outputs, state = self.rnn(self.embed(src))
        else:
            packed = pack_padded_sequence(self.embed(src), src_lengths.cpu(), batch_first=True,
                                          enforce_sorted=False)
            outputs, state = self.rnn(packed)
            outputs, _ = pad_packed_sequence(outputs, batch_first=True,
                                             total_length=src.shape[1])
        if self.config.cell == "lstm":
            return outputs, (self._join(state[0]), self._join(state[1]))
        return outputs, self._join(state)


class Decoder(nn.Module):
    """A conditional RNN language model: its only view of the source is the initial state."""

    uses_attention = False

    def __init__(self, vocab_size: int, config: RNNConfig | None = None, *legacy,
                 pad_id: int = PAD_ID, **sizes):
        super().__init__()
        self.config = c = _sizes("Decoder", config, legacy, sizes,
                                 ("embed_dim", "hidden_dim", "cell"), one_layer=True)
        self.embed = nn.Embedding(vocab_size, c.embed_dim, padding_idx=pad_id)
        self.rnn = _RNNS[c.cell](c.embed_dim, c.hidden_dim, batch_first=True)
        self.out = nn.Linear(c.hidden_dim, vocab_size)

    def prepare(self, enc_outputs):
        """Per-source work done once before decoding (nothing without attention)."""
        return enc_outputs

    def forward(self, tgt_in, state, enc_outputs=None, src_mask=None, keys=None):
        """Teacher-forced pass over a whole target: logits [B, T, V], final state, None."""
        outputs, state = self.rnn(self.embed(tgt_in), state)
        return self.out(outputs), state, None


class AttentionDecoder(Decoder):
    """Decoder with attention (the lecture's formulation, Luong et al. 2015):

    s_t = RNN(y_{t-1}, s_{t-1}); e^t_i = score(s_t, h_i); alpha^t = softmax(e^t);
    a_t = sum_i alpha^t_i h_i; P(y_t | ...) = softmax(W_o tanh(W_c [a_t; s_t])).
    """

    uses_attention = True

    def __init__(self, vocab_size: int, enc_dim: int, config: RNNConfig | None = None,
                 *legacy, score: str = "additive", pad_id: int = PAD_ID, **sizes):
        config = _sizes("AttentionDecoder", config, legacy, sizes,
                        ("embed_dim", "hidden_dim", "cell"), one_layer=True)
        super().__init__(vocab_size, config, pad_id=pad_id)
        hidden_dim = config.hidden_dim
        self.score = make_score(score, hidden_dim, enc_dim)  # a Module registers itself
        self.combine = nn.Linear(enc_dim + hidden_dim, hidden_dim)

    def prepare(self, enc_outputs):
        """The score's keys (U h_i for additive, W h_i for bilinear), computed once per source."""
        prepare = getattr(self.score, "prepare_keys", None)
        return prepare(enc_outputs) if prepare is not None else enc_outputs

    def attention(self, states, enc_outputs, src_mask, keys=None):
        """states [B, T, H] -> (contexts [B, T, enc_dim], weights [B, T, S]), all steps at once.

        ``keys`` are ``prepare(enc_outputs)`` when the caller has them already.
        """
        keys = self.prepare(enc_outputs) if keys is None else keys
        score = getattr(self.score, "score_prepared", self.score)
        weights = masked_softmax(score(states, keys), src_mask[:, None, :])
        return weights @ enc_outputs, weights

    def forward(self, tgt_in, state, enc_outputs, src_mask, keys=None):
        states, state = self.rnn(self.embed(tgt_in), state)
        contexts, weights = self.attention(states, enc_outputs, src_mask, keys)
        hidden = torch.tanh(self.combine(torch.cat([contexts, states], dim=-1)))
        return self.out(hidden), state, weights


class Seq2Seq(nn.Module):
    """Encoder + decoder, trained with teacher forcing; decoded by ``seqlab.decoding``."""

    def __init__(self, encoder: Encoder, decoder: Decoder, bos_id: int = BOS_ID,
                 eos_id: int = EOS_ID, pad_id: int = PAD_ID):
        super().__init__()
        self.encoder, self.decoder = encoder, decoder
        self.bos_id, self.eos_id, self.pad_id = bos_id, eos_id, pad_id

    def forward(self, src, src_lengths, tgt_in, teacher_forcing: float = 1.0):
        """Logits [B, T, V] for every target position.

        With ``teacher_forcing`` < 1 (scheduled sampling, Bengio et al. 2015), each step reads,
        for every sentence on its own, the gold previous word with that probability and the
        model's own greedy prediction otherwise: one coin per token, as in the paper, so a batch
        mixes both within a step. The coins come from torch's generator (seeded by
        ``seed_everything``).
        """
        number("teacher_forcing", teacher_forcing, 0, 1)
        if teacher_forcing == 1.0:
            enc_outputs, state = self.encoder(src, src_lengths)
            return self.decoder(tgt_in, state, enc_outputs, src != self.pad_id)[0]
        state = self.start(src, src_lengths)
        log_probs, token = [], tgt_in[:, 0]
        for t in range(tgt_in.shape[1]):
            step_log_probs, state = self.step(state, token)
            log_probs.append(step_log_probs)
            if t + 1 < tgt_in.shape[1]:
                gold = torch.rand(token.shape[0], device=token.device) < teacher_forcing
                token = torch.where(gold, tgt_in[:, t + 1], step_log_probs.argmax(-1))
        return torch.stack(log_probs, dim=1)  # log-probs are logits: softmax gives them back

    # -- the decoding protocol (seqlab.decoding)
    def start(self, src: torch.Tensor, src_lengths: torch.Tensor) -> dict:
        enc_outputs, hidden = self.encoder(src, src_lengths)
        return {"enc_outputs": enc_outputs, "keys": self.decoder.prepare(enc_outputs),
                "src_mask": src != self.pad_id, "hidden": batch_first_state(hidden),
                "attention": None}

    def step(self, state: dict, last_tokens: torch.Tensor):
        logits, hidden, weights = self.decoder(
            last_tokens[:, None], layer_first_state(state["hidden"]), state["enc_outputs"],
            state["src_mask"], state["keys"])
        new = {**state, "hidden": batch_first_state(hidden),
               "attention": None if weights is None else weights[:, 0]}
        return logits[:, 0].float().log_softmax(-1), new

    select = staticmethod(decoding.select_state)

    def greedy(self, src, src_lengths, max_len: int = 60):
        """``decoding.greedy`` that also keeps the attention weights of every step.

        Returns (token id lists without <eos>, attention [B, steps, S] or None).
        """
        attention = []
        ids = decoding.greedy(self, src, src_lengths, max_len=max_len,
                              on_step=lambda state: attention.append(state["attention"]))
        weights = None if attention[0] is None else torch.stack(attention, dim=1)
        return ids, weights


def seq2seq_batch(pairs_ids, bos_id: int, eos_id: int, pad_id: int = PAD_ID):
    """(src [B, S], src_lengths [B], tgt_in [B, T], tgt_out [B, T]) from (source ids, target
    ids) pairs: tgt_in = <bos> y_1..y_n, tgt_out = y_1..y_n <eos> (teacher forcing)."""
    src, src_lengths = pad_batch([s for s, _ in pairs_ids], pad_id)
    tgt_in, _ = pad_batch([[bos_id, *t] for _, t in pairs_ids], pad_id)
    tgt_out, _ = pad_batch([[*t, eos_id] for _, t in pairs_ids], pad_id)
    return src, src_lengths, tgt_in, tgt_out


def seq2seq_loss(model: Seq2Seq, batch, teacher_forcing: float = 1.0) -> TokenLoss:
    """Mean cross-entropy over real target tokens (padding ignored), and their count; for
    ``train.fit``."""
    src, src_lengths, tgt_in, tgt_out = batch
    logits = model(src, src_lengths, tgt_in, teacher_forcing)
    return token_cross_entropy(logits, tgt_out, model.pad_id)


def one_mistake(model: Seq2Seq, batch, seed: int = 0) -> dict[str, float]:
    """Exposure bias, measured on words the gold sentence still gets right.

    In every sentence one target position k (not the last) is drawn, and the decoder reads,
    instead of the gold word y_k, the word it ranks highest at position k once y_k, <pad>, <bos>
    and <eos> are excluded: a mistake it would make itself, and one teacher forcing never showed
    it. The rest of the input stays gold, so the gold words after the mistake remain the right
    targets. Returns the mean loss (nats) of the next word (position k), and of the words after
    that one (positions > k, <eos> included), with the gold input (``clean``) and with the
    mistake; the difference is what one own mistake costs.
    """
    src, src_lengths, tgt_in, tgt_out = batch
    lengths = (tgt_out != model.pad_id).sum(1)  # words + <eos>
    if bool((lengths < 3).any()):
        raise ValueError("every target needs at least 2 words for one_mistake")
    g = torch.Generator().manual_seed(seed)
    k = (torch.rand(len(lengths), generator=g) * (lengths - 2).cpu()).long().to(lengths.device) + 1
    rows = torch.arange(len(lengths), device=lengths.device)
    with evaluating(model), torch.no_grad():
        clean = model(src, src_lengths, tgt_in).float().log_softmax(-1)
        guess = clean[rows, k - 1].clone()  # the prediction of y_k from the gold prefix
        guess[rows, tgt_in[rows, k]] = -torch.inf
        guess[:, [model.pad_id, model.bos_id, model.eos_id]] = -torch.inf  # words only
        mistaken = tgt_in.clone()
        mistaken[rows, k] = guess.argmax(-1)
        wrong = model(src, src_lengths, mistaken).float().log_softmax(-1)
    positions = torch.arange(tgt_out.shape[1], device=tgt_out.device)[None]
    later = (positions > k[:, None]) & (tgt_out != model.pad_id)
    out = {}
    for name, log_probs in (("clean", clean), ("mistake", wrong)):
        nll = -log_probs.gather(2, tgt_out[..., None])[..., 0]
        out[f"next word, {name}"] = nll[rows, k].mean().item()
        out[f"words after the next, {name}"] = nll[later].mean().item()
    return out


def curriculum_batches(pairs_ids, batch_size: int, steps: int, start_len: int, end_len: int,
                       bos_id: int, eos_id: int, pad_id: int = PAD_ID, warmup: float = 0.3,
                       seed: int = 0):
    """``steps`` batches of same-length sources (no padding), the allowed source length rising
    linearly from ``start_len`` to ``end_len`` over the first ``warmup`` fraction of training.

    Short sentences first lets attention learn to align before long ones make it hard.
    """
    rng = random.Random(seed)
    by_length: dict[int, list[int]] = {}
    for i, (src, _) in enumerate(pairs_ids):
        by_length.setdefault(len(src), []).append(i)
    lengths = sorted(by_length)
    batches = []
    for step in range(steps):
        progress = min(1.0, step / max(1.0, warmup * steps))
        limit = start_len + (end_len - start_len) * progress
        allowed = [n for n in lengths if n <= limit] or lengths[:1]
        n = rng.choice(allowed)
        chosen = rng.sample(by_length[n], min(batch_size, len(by_length[n])))
        batches.append(seq2seq_batch([pairs_ids[i] for i in chosen], bos_id, eos_id, pad_id))
    return batches


def translate(model, sentences: list[str], src_vocab, tgt_vocab, max_len: int = 60,
              batch_size: int = 256, decode=decoding.greedy) -> list[str]:
    """Translations of whitespace-tokenized ``sentences``, as strings.

    ``model`` is any seq2seq model of the decoding protocol whose ``start`` takes (src [B, S],
    src_lengths [B]): the RNN models here and ``transformer.TransformerSeq2Seq``. ``decode`` is
    any decoder of ``seqlab.decoding`` with the signature of ``greedy``.
    """
    decoding.check_generator(model)
    device = next(model.parameters()).device
    out = []
    for i in range(0, len(sentences), batch_size):
        chunk = [src_vocab.encode(s.split()) for s in sentences[i : i + batch_size]]
        src, lengths = pad_batch(chunk, src_vocab.pad_id)
        ids = decode(model, src.to(device), lengths.to(device), max_len=max_len)
        out += [" ".join(tgt_vocab.decode(x)) for x in ids]
    return out


def build_model(src_vocab_size: int, tgt_vocab_size: int, bos_id: int, eos_id: int,
                attention: bool, score: str = "additive", config: RNNConfig | None = None, *,
                pad_id: int = PAD_ID, **sizes) -> Seq2Seq:
    """The encoder-decoder of lectures 03 and 04, with or without attention: a one-layer GRU
    encoder and decoder by default, both sized by ``config`` and ``sizes``."""
    config = _sizes("build_model", config, (), sizes, ())
    encoder = Encoder(src_vocab_size, config, pad_id=pad_id)
    decoder = (AttentionDecoder(tgt_vocab_size, encoder.output_dim, config, score=score,
                                pad_id=pad_id) if attention
               else Decoder(tgt_vocab_size, config, pad_id=pad_id))
    return Seq2Seq(encoder, decoder, bos_id, eos_id, pad_id)


def alignment_agreement(attention: list[torch.Tensor], alignments: list[list[tuple[int, int]]]
                        ) -> float:
    """Share of target words whose most-attended source word is their gold alignment.

    ``attention[k]`` is [target length, source length] for sentence k; ``alignments[k]`` lists
    (source position, target position) pairs, as ``ToyTranslation`` gives them.
    """
    hits = total = 0
    for weights, gold in zip(attention, alignments):
        for src_pos, tgt_pos in gold:
            if tgt_pos < weights.shape[0]:
                hits += int(weights[tgt_pos].argmax().item() == src_pos)
                total += 1
    if total == 0:
        raise ValueError("no aligned target word to score")
    return hits / total


# lecture 04's experiment and BLEU by length moved out of this model module (saved copies of
# lectures 03 and 04 still name them here)
__getattr__ = moved(__name__, {"bleu_by_length": "metrics", "LENGTH_BUCKETS": "experiments",
                               "LENGTH_SETUPS": "experiments",
                               "LengthExperiment": "experiments",
                               "length_experiment": "experiments"})
