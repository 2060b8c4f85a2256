"""The Transformer from scratch (Vaswani et al. 2017): multi-head attention, positions, residual
blocks with LayerNorm before or after, a decoder-only language model and an encoder-decoder.

Shapes are batch-first: tokens [B, T], hidden states [B, T, d]. Masks follow the course (and
``F.scaled_dot_product_attention``): True where a query MAY attend. Heads live on dim 1,
[B, h, T, d_k], with d_k = d / h.

Two paths compute the same attention: the readable one (``attention.scaled_dot_product_attention``,
which also returns the weights, for plots) and torch's fused kernel, used for training when no
weights are asked for. The tests prove them equal. Both models implement the decoding protocol of
``seqlab.decoding`` with a key/value cache, so each generated token costs one position, not a
re-read of the whole prefix.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from . import config as _config
from . import decoding
from .attention import causal_mask, scaled_dot_product_attention
from .data.vocab import BOS_ID, EOS_ID, PAD_ID
from .losses import TokenLoss, token_cross_entropy
from .validate import integer, number

NORMS = ("pre", "post")
POSITIONS = ("sinusoidal", "learned")


# ---------------------------------------------------------------------- positions
def sinusoidal_positions(length: int, d_model: int, dtype=torch.float32) -> torch.Tensor:
    """PE [length, d_model]: PE[pos, 2j] = sin(pos w_j), PE[pos, 2j+1] = cos(pos w_j), with
    w_j = 10000^(-2j/d). Each pair of dimensions is a clock turning at its own speed: the
    smooth version of a binary counter, whose low bits flip fast and high bits slowly."""
    integer("length", length, 1)
    integer("d_model", d_model, 1)
    if d_model % 2:
        raise ValueError(f"d_model must be even (sin/cos pairs), got {d_model}")
    pos = torch.arange(length, dtype=torch.float64)[:, None]
    w = 10000.0 ** (-torch.arange(0, d_model, 2, dtype=torch.float64) / d_model)
    pe = torch.empty(length, d_model, dtype=torch.float64)
    pe[:, 0::2], pe[:, 1::2] = torch.sin(pos * w), torch.cos(pos * w)
    return pe.to(dtype)


def position_shift_matrix(k: int, d_model: int) -> torch.Tensor:
    """M_k [d_model, d_model] (float64) with M_k @ PE[pos + k] == PE[pos] for every pos.

    Block-diagonal: each (sin, cos) pair is rotated back by the angle k w_j, since
    sin(p w) = sin((p+k) w) cos(k w) - cos((p+k) w) sin(k w) and
    cos(p w) = cos((p+k) w) cos(k w) + sin((p+k) w) sin(k w). The same M_k works for every
    position, so "k steps back" is a linear map that attention can learn.
    """
    integer("k", k)
    integer("d_model", d_model, 1)
    if d_model % 2:
        raise ValueError(f"d_model must be even (sin/cos pairs), got {d_model}")
    angles = k * 10000.0 ** (-torch.arange(0, d_model, 2, dtype=torch.float64) / d_model)
    m = torch.zeros(d_model, d_model, dtype=torch.float64)
    idx = torch.arange(0, d_model, 2)
    m[idx, idx], m[idx, idx + 1] = torch.cos(angles), -torch.sin(angles)
    m[idx + 1, idx], m[idx + 1, idx + 1] = torch.sin(angles), torch.cos(angles)
    return m


class Positions(nn.Module):
    """Position vectors added to the token embeddings: fixed sinusoids or learned vectors."""

    def __init__(self, max_len: int, d_model: int, kind: str = "sinusoidal"):
        super().__init__()
        if kind not in POSITIONS:
            raise ValueError(f"positions must be 'sinusoidal' or 'learned', got {kind!r}")
        self.max_len, self.kind = max_len, kind
        if kind == "learned":
            self.table = nn.Parameter(torch.randn(max_len, d_model) * 0.02)
        else:
            self.register_buffer("table", sinusoidal_positions(max_len, d_model),
                                 persistent=False)

    def forward(self, start: int, length: int) -> torch.Tensor:
        """Vectors of positions start .. start + length - 1, [length, d_model]."""
        if start + length > self.max_len:
            raise ValueError(f"position {start + length - 1} is past max_len={self.max_len}; "
                             "build the model with a larger max_len or decode fewer tokens")
        return self.table[start : start + length]


# ---------------------------------------------------------------------- attention
class MultiHeadAttention(nn.Module):
    """h heads of scaled dot-product attention in parallel subspaces of size d_k = d / h:

    head_i = softmax(Q W_q^i (K W_k^i)^T / sqrt(d_k)) V W_v^i,  out = [head_1 ... head_h] W_o.

    ``forward(query [B, T, d], key [B, S, d], value [B, S, d], mask)`` returns (output [B, T, d],
    weights averaged over heads [B, T, S], or None with ``need_weights=False``, which takes
    torch's fused kernel). ``mask`` is bool (True = may attend), broadcastable to [B, h, T, S].
    """

    def __init__(self, d_model: int, num_heads: int | None = None, dropout: float = 0.0,
                 bias: bool = True, **renamed):
        super().__init__()
        if renamed:  # n_heads=, as lecture 05 saved before the rename passes it
            sizes = _config.renamed("MultiHeadAttention", renamed)
            if set(sizes) != {"num_heads"} or num_heads is not None:
                raise TypeError(f"MultiHeadAttention got unexpected keyword(s) {sorted(renamed)}")
            num_heads = sizes["num_heads"]
        integer("d_model", d_model, 1)
        integer("num_heads", num_heads, 1)
        if d_model % num_heads:
            raise ValueError(f"d_model must be divisible by num_heads, got d_model={d_model} "
                             f"and num_heads={num_heads}")
        number("dropout", dropout, 0, 1, high_open=True)
        self.d_model, self.num_heads, self.d_k = d_model, num_heads, d_model // num_heads
        self.dropout = dropout
        self.q_proj = nn.Linear(d_model, d_model, bias=bias)
        self.k_proj = nn.Linear(d_model, d_model, bias=bias)
        self.v_proj = nn.Linear(d_model, d_model, bias=bias)
        self.out_proj = nn.Linear(d_model, d_model, bias=bias)

    def split_heads(self, x: torch.Tensor) -> torch.Tensor:
        """[B, T, d] -> [B, h, T, d_k]: view the last axis as h blocks, then move heads forward."""
        return x.view(x.shape[0], x.shape[1], self.num_heads, self.d_k).transpose(1, 2)

    @staticmethod
    def merge_heads(x: torch.Tensor) -> torch.Tensor:
        """[B, h, T, d_k] -> [B, T, h * d_k]: the transpose must come before the reshape."""
        return x.transpose(1, 2).reshape(x.shape[0], x.shape[2], -1)

    def project_kv(self, key: torch.Tensor, value: torch.Tensor):
        """Keys and values of a source in heads layout; a decoder computes them once."""
        return self.split_heads(self.k_proj(key)), self.split_heads(self.v_proj(value))

    def attend(self, query: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask=None,
               need_weights: bool = True):
        """Attention of ``query`` [B, T, d] over projected ``k``, ``v`` [B, h, S, d_k]."""
        q = self.split_heads(self.q_proj(query))
        dropout = self.dropout if self.training else 0.0
        if need_weights:
            heads, weights = scaled_dot_product_attention(q, k, v, mask)
            if dropout:
                heads = F.dropout(weights, dropout) @ v
            return self.out_proj(self.merge_heads(heads)), weights.mean(dim=1)
        heads = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=dropout)
        return self.out_proj(self.merge_heads(heads)), None

    def forward(self, query, key, value, mask=None, need_weights: bool = True):
        for name, t in (("query", query), ("key", key), ("value", value)):
            if not isinstance(t, torch.Tensor) or t.dim() != 3 or t.shape[-1] != self.d_model:
                raise ValueError(f"{name} must be [batch, length, {self.d_model}], got "
                                 f"{tuple(t.shape) if isinstance(t, torch.Tensor) else t!r}")
        if key.shape[:2] != value.shape[:2] or query.shape[0] != key.shape[0]:
            raise ValueError(f"query {tuple(query.shape)}, key {tuple(key.shape)} and value "
                             f"{tuple(value.shape)} must share the batch, key and value the length")
        if mask is not None:
            _check_mask(mask, (query.shape[0], self.num_heads, query.shape[1], key.shape[1]))
        return self.attend(query, *self.project_kv(key, value), mask, need_weights)

    @classmethod
    def from_torch(cls, mha: nn.MultiheadAttention) -> MultiHeadAttention:
        """Ours with the weights of a ``torch.nn.MultiheadAttention``.

        torch stores W_q, W_k, W_v stacked in ``in_proj_weight`` [3d, d]; its boolean masks
        mean the opposite of ours (True = blocked) and it is sequence-first unless batch_first.
        """
        if not isinstance(mha, nn.MultiheadAttention):
            raise TypeError(f"mha must be a torch.nn.MultiheadAttention, got {type(mha).__name__}")
        if not mha._qkv_same_embed_dim or mha.bias_k is not None:
            raise ValueError("only the standard layout (kdim = vdim = embed_dim, no bias_k/v)")
        ours = cls(mha.embed_dim, mha.num_heads, mha.dropout, bias=mha.in_proj_bias is not None)
        ours.to(mha.in_proj_weight.dtype)
        with torch.no_grad():
            for proj, w in zip((ours.q_proj, ours.k_proj, ours.v_proj),
                               mha.in_proj_weight.chunk(3)):
                proj.weight.copy_(w)
            if mha.in_proj_bias is not None:
                for proj, b in zip((ours.q_proj, ours.k_proj, ours.v_proj),
                                   mha.in_proj_bias.chunk(3)):
                    proj.bias.copy_(b)
                ours.out_proj.bias.copy_(mha.out_proj.bias)
            ours.out_proj.weight.copy_(mha.out_proj.weight)
        return ours


def _check_mask(mask, shape: tuple[int, ...]) -> None:
    if not isinstance(mask, torch.Tensor) or mask.dtype != torch.bool:
        raise TypeError(f"mask must be a bool tensor (True = may attend), got "
                        f"{mask.dtype if isinstance(mask, torch.Tensor) else type(mask).__name__}")
    try:
        if torch.broadcast_shapes(mask.shape, shape) != torch.Size(shape):
            raise RuntimeError
    except RuntimeError as err:
        raise ValueError(f"mask of shape {tuple(mask.shape)} does not broadcast to "
                         f"[batch, heads, T, S] = {list(shape)}") from err


def padding_key_mask(src: torch.Tensor, pad_id: int = PAD_ID) -> torch.Tensor:
    """[B, 1, 1, S]: every query may attend to the real source tokens only."""
    return (src != pad_id)[:, None, None, :]


# ---------------------------------------------------------------------- blocks
class FeedForward(nn.Module):
    """FFN(x) = W_2 relu(W_1 x + b_1) + b_2, d -> d_ff (4d by default) -> d, at every position."""

    def __init__(self, d_model: int, d_ff: int | None = None, dropout: float = 0.0):
        super().__init__()
        d_ff = d_ff or 4 * d_model
        self.linear1, self.linear2 = nn.Linear(d_model, d_ff), nn.Linear(d_ff, d_model)
        self.drop = nn.Dropout(dropout)

    def forward(self, x):
        return self.linear2(self.drop(F.relu(self.linear1(x))))


class _Residual(nn.Module):
    """x + sublayer(x) with LayerNorm placed before ("pre": x + f(LN(x))) or after
    ("post": LN(x + f(x)), the original paper's)."""

    def __init__(self, d_model: int, norm: str, dropout: float):
        super().__init__()
        if norm not in NORMS:
            raise ValueError(f"norm must be 'pre' or 'post', got {norm!r}")
        self.norm, self.ln, self.drop = norm, nn.LayerNorm(d_model), nn.Dropout(dropout)

    def forward(self, x, sublayer):
        if self.norm == "pre":
            out, extra = sublayer(self.ln(x))
            return x + self.drop(out), extra
        out, extra = sublayer(x)
        return self.ln(x + self.drop(out)), extra


def _self_attention(mha: MultiHeadAttention, h, mask, cache, need_weights):
    """Self-attention of h over itself and, when decoding, the cached earlier positions.

    Returns (output, (weights, (k, v))): the keys and values including h's own, the next cache.
    """
    k, v = mha.project_kv(h, h)
    if cache is not None:
        k, v = torch.cat([cache[0], k], dim=2), torch.cat([cache[1], v], dim=2)
    out, weights = mha.attend(h, k, v, mask, need_weights)
    return out, (weights, (k, v))


class EncoderLayer(nn.Module):
    """Self-attention, then the feed-forward network, each in a residual block.

    With a causal mask this is also the block of a decoder-only language model.
    """

    def __init__(self, d_model: int, num_heads: int, d_ff: int | None = None,
                 dropout: float = 0.0, norm: str = "pre"):
        super().__init__()
        self.self_attn = MultiHeadAttention(d_model, num_heads, dropout)
        self.ffn = FeedForward(d_model, d_ff, dropout)
        self.attn_block = _Residual(d_model, norm, dropout)
        self.ffn_block = _Residual(d_model, norm, dropout)

    def forward(self, x, mask=None, need_weights: bool = False, cache=None):
        """x [B, T, d] -> (x, self-attention weights or None, (k, v) of every position so far).

        With ``cache`` (k, v) [B, h, t, d_k] of earlier positions, x holds the next positions
        only and attends to the cache as well (step-by-step decoding).
        """
        x, (weights, kv) = self.attn_block(
            x, lambda h: _self_attention(self.self_attn, h, mask, cache, need_weights))
        x, _ = self.ffn_block(x, lambda h: (self.ffn(h), None))
        return x, weights, kv


class DecoderLayer(nn.Module):
    """Causal self-attention, cross-attention over the encoder's output, the feed-forward
    network: three residual blocks."""

    def __init__(self, d_model: int, num_heads: int, d_ff: int | None = None,
                 dropout: float = 0.0, norm: str = "pre"):
        super().__init__()
        self.self_attn = MultiHeadAttention(d_model, num_heads, dropout)
        self.cross_attn = MultiHeadAttention(d_model, num_heads, dropout)
        self.ffn = FeedForward(d_model, d_ff, dropout)
        self.attn_block, self.cross_block, self.ffn_block = (
            _Residual(d_model, norm, dropout) for _ in range(3))

    def forward(self, x, memory_kv, self_mask=None, memory_mask=None,
                need_weights: bool = False, cache=None):
        """x [B, T, d]; ``memory_kv`` = ``cross_attn.project_kv(memory, memory)``, computed once
        per source. Returns (x, cross-attention weights or None, the self-attention (k, v))."""
        x, (_, kv) = self.attn_block(
            x, lambda h: _self_attention(self.self_attn, h, self_mask, cache, False))
        x, weights = self.cross_block(
            x, lambda h: self.cross_attn.attend(h, *memory_kv, memory_mask, need_weights))
        x, _ = self.ffn_block(x, lambda h: (self.ffn(h), None))
        return x, weights, kv


# ---------------------------------------------------------------------- models
@dataclass(frozen=True)
class TransformerConfig:
    """The sizes and choices of a Transformer; the LM, the encoder-decoder and BERT share them
    (as nanoGPT's ``GPTConfig``). Vocabulary sizes are the models' own arguments."""

    d_model: int = 128          # the width of every hidden state
    num_heads: int = 4          # d_model / num_heads = d_k, each head's width
    num_layers: int = 2         # blocks (per stack, in an encoder-decoder)
    d_ff: int | None = None     # the FFN's inner width; None = 4 * d_model
    max_len: int = 256          # positions there are vectors for
    dropout: float = 0.0
    norm: str = "pre"           # LayerNorm before each sublayer, or "post" (the 2017 paper)
    positions: str = "sinusoidal"  # or "learned" (GPT-2, BERT)

    def __post_init__(self):
        integer("d_model", self.d_model, 1)
        integer("num_heads", self.num_heads, 1)
        if self.d_model % self.num_heads:
            raise ValueError(f"d_model must be divisible by num_heads, got d_model="
                             f"{self.d_model} and num_heads={self.num_heads}")
        integer("num_layers", self.num_layers, 1)
        if self.d_ff is not None:
            integer("d_ff", self.d_ff, 1)
        integer("max_len", self.max_len, 1)
        number("dropout", self.dropout, 0, 1, high_open=True)
        if self.norm not in NORMS:
            raise ValueError(f"norm must be 'pre' or 'post', got {self.norm!r}")
        if self.positions not in POSITIONS:
            raise ValueError(f"positions must be 'sinusoidal' or 'learned', got "
                             f"{self.positions!r}")


# The order sizes came in by position before TransformerConfig (deprecated, still accepted).
_LEGACY_ORDER = ("d_model", "num_heads", "num_layers", "max_len", "norm", "dropout", "d_ff",
                 "positions")


class Embedding(nn.Module):
    """The input of every Transformer here: token vectors plus position vectors (plus, for
    BERT, segment vectors and a LayerNorm), then dropout."""

    def __init__(self, vocab_size: int, config: TransformerConfig, pad_id: int,
                 segments: int = 0, layer_norm: bool = False):
        super().__init__()
        integer("vocab_size", vocab_size, 1)
        d = config.d_model
        self.tokens = nn.Embedding(vocab_size, d, padding_idx=pad_id)
        self.positions = Positions(config.max_len, d, config.positions)
        self.segments = nn.Embedding(segments, d) if segments else None
        self.norm = nn.LayerNorm(d) if layer_norm else nn.Identity()
        self.drop = nn.Dropout(config.dropout)

    def forward(self, ids: torch.Tensor, start: int = 0, segments: torch.Tensor | None = None
                ) -> torch.Tensor:
        x = self.tokens(ids) + self.positions(start, ids.shape[1])
        if self.segments is not None:
            x = x + self.segments(torch.zeros_like(ids) if segments is None else segments)
        return self.drop(self.norm(x))


def final_norm(config: TransformerConfig) -> nn.Module:
    """A pre-LN stack ends in a LayerNorm (its residual stream is never normalised otherwise);
    a post-LN stack's last block already ends in one."""
    return nn.LayerNorm(config.d_model) if config.norm == "pre" else nn.Identity()


def _check_ids(name: str, ids) -> None:
    if not isinstance(ids, torch.Tensor) or ids.dim() != 2 or ids.dtype != torch.long:
        raise ValueError(f"{name} must be a LongTensor [batch, length], got "
                         f"{tuple(ids.shape) if isinstance(ids, torch.Tensor) else type(ids)}")


class TransformerLM(nn.Module):
    """Decoder-only Transformer language model (GPT-style): embeddings + positions,
    ``num_layers`` blocks of causal self-attention and FFN, a final LayerNorm (pre-LN only), a
    linear layer to the vocabulary. ``forward(tokens [B, T]) -> logits [B, T, V]``: position t
    sees tokens 1..t only. Decoding protocol with a key/value cache per layer.

    ``TransformerLM(V, TransformerConfig(...))`` or ``TransformerLM(V, num_layers=4, ...)``.
    """

    def __init__(self, vocab_size: int, config: TransformerConfig | None = None, *legacy,
                 pad_id: int = PAD_ID, bos_id: int = BOS_ID, eos_id: int = EOS_ID, **sizes):
        super().__init__()
        self.config = c = _config.resolve(TransformerConfig, "TransformerLM", config, legacy,
                                          sizes, defaults=TransformerConfig(),
                                          legacy_order=_LEGACY_ORDER)
        self.pad_id, self.bos_id, self.eos_id = pad_id, bos_id, eos_id
        self.embed = Embedding(vocab_size, c, self.pad_id)
        self.layers = nn.ModuleList(EncoderLayer(c.d_model, c.num_heads, c.d_ff, c.dropout,
                                                 c.norm) for _ in range(c.num_layers))
        self.final_ln = final_norm(c)
        self.out = nn.Linear(c.d_model, vocab_size)

    def _run(self, ids, start, caches, need_weights):
        x, mask = self.embed(ids, start), None
        if caches is None and ids.shape[1] > 1:
            mask = causal_mask(ids.shape[1], ids.device)
        weights, new_caches = [], []
        for i, layer in enumerate(self.layers):
            x, w, kv = layer(x, mask, need_weights, None if caches is None else caches[i])
            weights.append(w)
            new_caches.append(kv)
        return self.out(self.final_ln(x)), weights, new_caches

    def forward(self, tokens: torch.Tensor, return_attention: bool = False):
        """Logits [B, T, V] (and, if asked, each layer's head-averaged weights [B, T, T])."""
        _check_ids("tokens", tokens)
        logits, weights, _ = self._run(tokens, 0, None, return_attention)
        return (logits, weights) if return_attention else logits

    # -- the decoding protocol (seqlab.decoding)
    def start(self, prompt: torch.Tensor) -> dict:
        prompt = decoding.check_prompt(prompt, self.bos_id)
        read = prompt[:, :-1]
        if read.shape[1]:
            _, _, caches = self._run(read, 0, None, False)
        else:
            layer = self.layers[0].self_attn
            empty = prompt.new_zeros((prompt.shape[0], layer.num_heads, 0, layer.d_k),
                                     dtype=self.out.weight.dtype)
            caches = [(empty, empty) for _ in self.layers]
        return {"cache": caches, "next_token": prompt[:, -1]}

    def step(self, state: dict, last_tokens: torch.Tensor):
        position = state["cache"][0][0].shape[2]
        logits, _, caches = self._run(last_tokens[:, None], position, state["cache"], False)
        logits = logits[:, 0]  # half precision is read in float32; float64 stays float64
        return logits.to(torch.promote_types(logits.dtype, torch.float32)).log_softmax(-1), \
            {"cache": caches}

    select = staticmethod(decoding.select_state)


class TransformerSeq2Seq(nn.Module):
    """Encoder-decoder Transformer. ``forward(src [B, S], src_lengths [B], tgt_in [B, T])``
    -> logits [B, T, V] with teacher forcing, the signature of the RNN ``Seq2Seq``, so
    ``seq2seq.seq2seq_loss``, ``seq2seq_batch`` and ``translate`` serve both. ``num_layers``
    blocks in each stack; ``max_len`` defaults to 128."""

    def __init__(self, src_vocab_size: int, tgt_vocab_size: int,
                 config: TransformerConfig | None = None, *legacy, pad_id: int = PAD_ID,
                 bos_id: int = BOS_ID, eos_id: int = EOS_ID, **sizes):
        super().__init__()
        self.config = c = _config.resolve(TransformerConfig, "TransformerSeq2Seq", config,
                                          legacy, sizes, defaults=TransformerConfig(max_len=128),
                                          legacy_order=_LEGACY_ORDER)
        self.pad_id, self.bos_id, self.eos_id = pad_id, bos_id, eos_id
        self.src_embed = Embedding(src_vocab_size, c, self.pad_id)
        self.tgt_embed = Embedding(tgt_vocab_size, c, self.pad_id)
        self.encoder = nn.ModuleList(EncoderLayer(c.d_model, c.num_heads, c.d_ff, c.dropout,
                                                  c.norm) for _ in range(c.num_layers))
        self.decoder = nn.ModuleList(DecoderLayer(c.d_model, c.num_heads, c.d_ff, c.dropout,
                                                  c.norm) for _ in range(c.num_layers))
        self.enc_ln, self.dec_ln = final_norm(c), final_norm(c)
        self.out = nn.Linear(c.d_model, tgt_vocab_size)

    def encode(self, src: torch.Tensor, need_weights: bool = False):
        """Encoder output [B, S, d], the source mask [B, 1, 1, S] and each layer's weights."""
        _check_ids("src", src)
        mask, x, weights = padding_key_mask(src, self.pad_id), self.src_embed(src), []
        for layer in self.encoder:
            x, w, _ = layer(x, mask, need_weights)
            weights.append(w)
        return self.enc_ln(x), mask, weights

    def _decode(self, tgt, memory_kv, memory_mask, start, caches, need_weights):
        x, self_mask = self.tgt_embed(tgt, start), None
        if caches is None and tgt.shape[1] > 1:
            self_mask = causal_mask(tgt.shape[1], tgt.device)
        weights, new_caches = [], []
        for i, layer in enumerate(self.decoder):
            x, w, kv = layer(x, memory_kv[i], self_mask, memory_mask, need_weights,
                             None if caches is None else caches[i])
            weights.append(w)
            new_caches.append(kv)
        return self.out(self.dec_ln(x)), weights, new_caches

    def forward(self, src, src_lengths, tgt_in, teacher_forcing: float = 1.0,
                return_attention: bool = False):
        """Logits [B, T, V]; with ``return_attention`` also each decoder layer's
        cross-attention weights [B, T, S] (averaged over heads)."""
        if teacher_forcing != 1.0:
            raise ValueError("a Transformer trains with teacher forcing only (all positions in "
                             f"parallel); got teacher_forcing={teacher_forcing}")
        _check_ids("tgt_in", tgt_in)
        memory, mask, _ = self.encode(src)
        memory_kv = [layer.cross_attn.project_kv(memory, memory) for layer in self.decoder]
        logits, weights, _ = self._decode(tgt_in, memory_kv, mask, 0, None, return_attention)
        return (logits, weights) if return_attention else logits

    # -- the decoding protocol (seqlab.decoding)
    def start(self, src: torch.Tensor, src_lengths: torch.Tensor | None = None) -> dict:
        """Encode once; project every decoder layer's cross-attention keys and values once."""
        memory, mask, _ = self.encode(src)
        heads = self.decoder[0].self_attn
        empty = memory.new_zeros((src.shape[0], heads.num_heads, 0, heads.d_k))
        return {"memory_kv": [layer.cross_attn.project_kv(memory, memory)
                              for layer in self.decoder],
                "src_mask": mask, "cache": [(empty, empty) for _ in self.decoder],
                "attention": None}

    def step(self, state: dict, last_tokens: torch.Tensor):
        position = state["cache"][0][0].shape[2]
        logits, weights, caches = self._decode(last_tokens[:, None], state["memory_kv"],
                                               state["src_mask"], position, state["cache"],
                                               True)
        new = {**state, "cache": caches, "attention": weights[-1][:, 0]}
        logits = logits[:, 0]  # half precision is read in float32; float64 stays float64
        return logits.to(torch.promote_types(logits.dtype, torch.float32)).log_softmax(-1), new

    select = staticmethod(decoding.select_state)


def lm_loss(model: TransformerLM, batch) -> TokenLoss:
    """Mean cross-entropy per real target token of an (inputs, targets) batch (``lm_batch`` or
    ``char_lm_batches``), and their count; for ``train.fit``."""
    inputs, targets = batch
    return token_cross_entropy(model(inputs), targets, model.pad_id)
