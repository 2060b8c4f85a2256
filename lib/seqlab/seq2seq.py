"""Sequence-to-sequence models: an RNN encoder, a decoder with or without attention.

P(y | x) = prod_t P(y_t | y_<t, x): the decoder is a conditional language model. Training uses
teacher forcing (the decoder reads the gold previous word); the loss is the mean over real
target tokens, J = (1/T) sum_t J_t, padding excluded.

Every model exposes the decoding interface of the course: ``start(src, src_lengths) -> state``,
``step(state, last_tokens) -> (log_probs [B, V], state)``, ``select(state, indices) -> state``;
greedy decoding here and beam search later are written once against it.
"""

from __future__ import annotations

import random

import torch
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

from .attention import make_score, masked_softmax
from .bleu import corpus_bleu
from .data import pad_batch

_RNNS = {"gru": nn.GRU, "lstm": nn.LSTM}


def _rnn(cell: str, *args, **kwargs) -> nn.RNNBase:
    if cell not in _RNNS:
        raise ValueError(f"cell must be one of {sorted(_RNNS)}, got {cell!r}")
    return _RNNS[cell](*args, batch_first=True, **kwargs)


class Encoder(nn.Module):
    """Embedding + GRU/LSTM over padded batches (packed, so padding never enters the RNN).

    Returns outputs [B, S, hidden * directions] and the decoder's initial state: the final
    states of the last layer, both directions joined by a linear layer when bidirectional.
    """

    def __init__(self, vocab_size: int, embed_dim: int = 64, hidden_dim: int = 128,
                 num_layers: int = 1, cell: str = "gru", bidirectional: bool = False,
                 dropout: float = 0.0, pad_id: int = 0):
        super().__init__()
        self.cell, self.num_layers = cell, num_layers
        self.dirs = 2 if bidirectional else 1
        self.embed = nn.Embedding(vocab_size, embed_dim, padding_idx=pad_id)
        self.rnn = _rnn(cell, embed_dim, hidden_dim, num_layers, bidirectional=bidirectional,
                        dropout=dropout if num_layers > 1 else 0.0)
        self.bridge = nn.Linear(2 * hidden_dim, hidden_dim) if bidirectional else None
        self.output_dim = hidden_dim * self.dirs

    def _join(self, h: torch.Tensor) -> torch.Tensor:
        """[layers * dirs, B, H] -> the last layer's state [1, B, H]."""
        last = h.view(self.num_layers, self.dirs, h.shape[1], h.shape[2])[-1]
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
        if self.cell == "lstm":
            return outputs, (self._join(state[0]), self._join(state[1]))
        return outputs, self._join(state)


class Decoder(nn.Module):
    """A conditional RNN language model: its only view of the source is the initial state."""

    uses_attention = False

    def __init__(self, vocab_size: int, embed_dim: int = 64, hidden_dim: int = 128,
                 cell: str = "gru", pad_id: int = 0):
        super().__init__()
        self.embed = nn.Embedding(vocab_size, embed_dim, padding_idx=pad_id)
        self.rnn = _rnn(cell, embed_dim, hidden_dim)
        self.out = nn.Linear(hidden_dim, vocab_size)

    def forward(self, tgt_in, state, enc_outputs=None, src_mask=None):
        """Teacher-forced pass over a whole target: logits [B, T, V], final state, None."""
        outputs, state = self.rnn(self.embed(tgt_in), state)
        return self.out(outputs), state, None


class AttentionDecoder(Decoder):
    """Decoder with attention (the lecture's formulation, Luong et al. 2015):

    s_t = RNN(y_{t-1}, s_{t-1}); e^t_i = score(s_t, h_i); alpha^t = softmax(e^t);
    a_t = sum_i alpha^t_i h_i; P(y_t | ...) = softmax(W_o tanh(W_c [a_t; s_t])).
    """

    uses_attention = True

    def __init__(self, vocab_size: int, enc_dim: int, embed_dim: int = 64,
                 hidden_dim: int = 128, cell: str = "gru", score: str = "additive",
                 pad_id: int = 0):
        super().__init__(vocab_size, embed_dim, hidden_dim, cell, pad_id)
        self.score = make_score(score, hidden_dim, enc_dim)  # a Module registers itself
        self.combine = nn.Linear(enc_dim + hidden_dim, hidden_dim)

    def attention(self, states, enc_outputs, src_mask):
        """states [B, T, H] -> (contexts [B, T, enc_dim], weights [B, T, S]), all steps at once."""
        weights = masked_softmax(self.score(states, enc_outputs), src_mask[:, None, :])
        return weights @ enc_outputs, weights

    def forward(self, tgt_in, state, enc_outputs, src_mask):
        states, state = self.rnn(self.embed(tgt_in), state)
        contexts, weights = self.attention(states, enc_outputs, src_mask)
        hidden = torch.tanh(self.combine(torch.cat([contexts, states], dim=-1)))
        return self.out(hidden), state, weights


class Seq2Seq(nn.Module):
    """Encoder + decoder, trained with teacher forcing, decoded greedily or with ``decoding``."""

    def __init__(self, encoder: Encoder, decoder: Decoder, bos_id: int, eos_id: int,
                 pad_id: int = 0):
        super().__init__()
        self.encoder, self.decoder = encoder, decoder
        self.bos_id, self.eos_id, self.pad_id = bos_id, eos_id, pad_id

    def forward(self, src, src_lengths, tgt_in, teacher_forcing: float = 1.0):
        """Logits [B, T, V] for every target position.

        With ``teacher_forcing`` < 1, each step reads the gold previous word with that
        probability and the model's own greedy prediction otherwise (scheduled sampling).
        """
        if not 0.0 <= teacher_forcing <= 1.0:
            raise ValueError(f"teacher_forcing must be in [0, 1], got {teacher_forcing}")
        enc_outputs, state = self.encoder(src, src_lengths)
        src_mask = src != self.pad_id
        if teacher_forcing == 1.0:
            return self.decoder(tgt_in, state, enc_outputs, src_mask)[0]
        logits, token = [], tgt_in[:, 0]
        for t in range(tgt_in.shape[1]):
            step_logits, state, _ = self.decoder(token[:, None], state, enc_outputs, src_mask)
            logits.append(step_logits[:, 0])
            if t + 1 < tgt_in.shape[1]:
                gold = random.random() < teacher_forcing
                token = tgt_in[:, t + 1] if gold else step_logits[:, 0].argmax(-1)
        return torch.stack(logits, dim=1)

    # -- the decoding interface
    def start(self, src: torch.Tensor, src_lengths: torch.Tensor) -> dict:
        enc_outputs, state = self.encoder(src, src_lengths)
        return {"enc_outputs": enc_outputs, "src_mask": src != self.pad_id, "hidden": state,
                "attention": None}

    def step(self, state: dict, last_tokens: torch.Tensor):
        logits, hidden, weights = self.decoder(last_tokens[:, None], state["hidden"],
                                               state["enc_outputs"], state["src_mask"])
        new = {**state, "hidden": hidden,
               "attention": None if weights is None else weights[:, 0]}
        return logits[:, 0].float().log_softmax(-1), new

    def select(self, state: dict, indices: torch.Tensor) -> dict:
        """Reorder or repeat the batch rows of ``state`` (beam search keeps the best rows)."""
        hidden = state["hidden"]  # [layers, B, H], or a (h, c) pair for the LSTM
        hidden = (tuple(h[:, indices] for h in hidden) if isinstance(hidden, tuple)
                  else hidden[:, indices])
        attention = state["attention"]
        return {"enc_outputs": state["enc_outputs"][indices],
                "src_mask": state["src_mask"][indices], "hidden": hidden,
                "attention": None if attention is None else attention[indices]}

    @torch.no_grad()
    def greedy(self, src, src_lengths, max_len: int = 60):
        """Batched greedy decoding; each sentence stops at <eos> or ``max_len`` tokens.

        Returns (token id lists without <eos>, attention weights [B, steps, S] or None).
        """
        self.eval()
        state = self.start(src, src_lengths)
        batch = src.shape[0]
        tokens = torch.full((batch,), self.bos_id, dtype=torch.long, device=src.device)
        done = torch.zeros(batch, dtype=torch.bool, device=src.device)
        out, attention = [], []
        for _ in range(max_len):
            log_probs, state = self.step(state, tokens)
            tokens = log_probs.argmax(-1)
            out.append(tokens)
            if state["attention"] is not None:
                attention.append(state["attention"])
            done |= tokens == self.eos_id
            if done.all():
                break
        steps = torch.stack(out, dim=1).tolist()
        results = [ids[: ids.index(self.eos_id)] if self.eos_id in ids else ids for ids in steps]
        return results, (torch.stack(attention, dim=1) if attention else None)


def seq2seq_batch(pairs_ids, bos_id: int, eos_id: int, pad_id: int = 0):
    """(src [B, S], src_lengths [B], tgt_in [B, T], tgt_out [B, T]) from (source ids, target
    ids) pairs: tgt_in = <bos> y_1..y_n, tgt_out = y_1..y_n <eos> (teacher forcing)."""
    src, src_lengths = pad_batch([s for s, _ in pairs_ids], pad_id)
    tgt_in, _ = pad_batch([[bos_id, *t] for _, t in pairs_ids], pad_id)
    tgt_out, _ = pad_batch([[*t, eos_id] for _, t in pairs_ids], pad_id)
    return src, src_lengths, tgt_in, tgt_out


def seq2seq_loss(model: Seq2Seq, batch, teacher_forcing: float = 1.0) -> torch.Tensor:
    """Mean cross-entropy over real target tokens (padding ignored); for ``train.fit``."""
    src, src_lengths, tgt_in, tgt_out = batch
    logits = model(src, src_lengths, tgt_in, teacher_forcing)
    return nn.functional.cross_entropy(logits.flatten(0, 1).float(), tgt_out.flatten(),
                                       ignore_index=model.pad_id)


def curriculum_batches(pairs_ids, batch_size: int, steps: int, start_len: int, end_len: int,
                       bos_id: int, eos_id: int, pad_id: int = 0, warmup: float = 0.3,
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


def translate(model: Seq2Seq, sentences: list[str], src_vocab, tgt_vocab, max_len: int = 60,
              batch_size: int = 256) -> list[str]:
    """Greedy translations of whitespace-tokenized ``sentences``, as strings."""
    device = next(model.parameters()).device
    out = []
    for i in range(0, len(sentences), batch_size):
        chunk = [src_vocab.encode(s.split()) for s in sentences[i : i + batch_size]]
        src, lengths = pad_batch(chunk, src_vocab.pad_id)
        ids, _ = model.greedy(src.to(device), lengths.to(device), max_len)
        out += [" ".join(tgt_vocab.decode(x)) for x in ids]
    return out


def build_model(src_vocab_size: int, tgt_vocab_size: int, bos_id: int, eos_id: int,
                attention: bool, score: str = "additive", embed_dim: int = 64,
                hidden_dim: int = 128, cell: str = "gru", pad_id: int = 0) -> Seq2Seq:
    """The encoder-decoder of lectures 03 and 04, with or without attention."""
    encoder = Encoder(src_vocab_size, embed_dim, hidden_dim, cell=cell, pad_id=pad_id)
    decoder = (AttentionDecoder(tgt_vocab_size, encoder.output_dim, embed_dim, hidden_dim, cell,
                                score, pad_id) if attention
               else Decoder(tgt_vocab_size, embed_dim, hidden_dim, cell, pad_id))
    return Seq2Seq(encoder, decoder, bos_id, eos_id, pad_id)


def bleu_by_length(sources: list[str], outputs: list[str], references: list[list[str]],
                   buckets: dict[str, tuple[int, int]]) -> dict[str, float]:
    """Corpus BLEU of the sentences whose source length (in words) falls in each bucket."""
    scores = {}
    for label, (low, high) in buckets.items():
        idx = [i for i, s in enumerate(sources) if low <= len(s.split()) <= high]
        if idx:
            scores[label] = corpus_bleu([outputs[i] for i in idx],
                                        [references[i] for i in idx]).score
    return scores


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
