"""Recurrent networks: hand-written backpropagation through time, cells from their equations,
and an LSTM/GRU language model for real training.

Notation (lecture 02): x_t = E[w_t], h_t = tanh(W x_t + U h_{t-1} + b), y_hat_t =
softmax(V h_t + c), and the loss J = (1/N) sum_t J_t with J_t = -log y_hat_t[w_{t+1}].

The hand-written parts use NumPy, so no autograd can be involved; the tests compare them with
torch's autograd in float64.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from . import config as _config
from . import decoding
from .data import pad_batch
from .data.vocab import BOS_ID, EOS_ID, PAD_ID
from .losses import TokenLoss, token_cross_entropy
from .tensors import evaluating
from .validate import integer, number

# ---------------------------------------------------------------------- softmax + cross-entropy


def softmax(z: np.ndarray) -> np.ndarray:
    """Softmax over the last axis, shifted by the max for numerical stability."""
    z = np.asarray(z, dtype=np.float64)
    e = np.exp(z - z.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def softmax_jacobian(y_hat: np.ndarray) -> np.ndarray:
    """d y_hat / d z for y_hat = softmax(z): diag(y_hat) - y_hat y_hat^T (one vector)."""
    y_hat = np.asarray(y_hat, dtype=np.float64)
    if y_hat.ndim != 1:
        raise ValueError(f"y_hat must be one probability vector, got shape {y_hat.shape}")
    return np.diag(y_hat) - np.outer(y_hat, y_hat)


def cross_entropy_grad(z: np.ndarray, target: int) -> np.ndarray:
    """dJ/dz for J = -log softmax(z)[target]: the shortcut y_hat - y (y one-hot)."""
    grad = softmax(z)
    grad[target] -= 1.0
    return grad


def cross_entropy_grad_via_jacobian(z: np.ndarray, target: int) -> np.ndarray:
    """The same gradient by the chain rule: J_softmax^T (dJ/dy_hat), with dJ/dy_hat = -y / y_hat.

    Longer and numerically worse; it is here to show that the shortcut is exact.
    """
    y_hat = softmax(z)
    d_y_hat = np.zeros_like(y_hat)
    d_y_hat[target] = -1.0 / y_hat[target]
    return softmax_jacobian(y_hat).T @ d_y_hat


def output_weight_grad(h: np.ndarray, z: np.ndarray, target: int) -> np.ndarray:
    """dJ/dV for z = V h: the outer product (y_hat - y) h^T."""
    return np.outer(cross_entropy_grad(z, target), h)


# ---------------------------------------------------------------------- hand-written RNN LM
class NumpyRNNLM:
    """A vanilla tanh RNN language model with hand-written forward and backward passes.

    Parameters: E [V, D] (embeddings), W [H, D], U [H, H], b [H], Vout [V, H], c [V].
    ``forward`` takes ids [B, T] and targets [B, T]; the loss is the mean over all B*T tokens.
    """

    PARAMS = ("E", "W", "U", "b", "Vout", "c")

    def __init__(self, vocab_size: int, embed_dim: int, hidden_dim: int, seed: int = 0):
        for name, value in [("vocab_size", vocab_size), ("embed_dim", embed_dim),
                            ("hidden_dim", hidden_dim)]:
            integer(name, value, 1)
        rng = np.random.default_rng(seed)
        s = 1 / math.sqrt(hidden_dim)
        self.params = {
            "E": rng.normal(0, 1, (vocab_size, embed_dim)),
            "W": rng.uniform(-s, s, (hidden_dim, embed_dim)),
            "U": rng.uniform(-s, s, (hidden_dim, hidden_dim)),
            "b": np.zeros(hidden_dim),
            "Vout": rng.uniform(-s, s, (vocab_size, hidden_dim)),
            "c": np.zeros(vocab_size),
        }

    def _check(self, ids, targets, h0):
        ids, targets = np.asarray(ids), np.asarray(targets)
        if ids.ndim != 2 or ids.shape != targets.shape:
            raise ValueError(
                f"ids and targets must both have shape [batch, time], got {ids.shape} and "
                f"{targets.shape}"
            )
        vocab, hidden = self.params["E"].shape[0], self.params["U"].shape[0]
        for name, arr in (("ids", ids), ("targets", targets)):
            if arr.size and (arr.min() < 0 or arr.max() >= vocab):
                raise ValueError(f"{name} must be token ids in [0, {vocab}), got {arr.min()}.."
                                 f"{arr.max()}")
        h0 = np.zeros((ids.shape[0], hidden)) if h0 is None else np.asarray(h0, np.float64)
        if h0.shape != (ids.shape[0], hidden):
            raise ValueError(f"h0 must have shape {(ids.shape[0], hidden)}, got {h0.shape}")
        return ids, targets, h0

    def forward(self, ids, targets, h0=None):
        """Return (mean loss, cache). h_t = tanh(W x_t + U h_{t-1} + b)."""
        ids, targets, h0 = self._check(ids, targets, h0)
        p = self.params
        batch, steps = ids.shape
        hs, probs = [h0], []
        loss = 0.0
        for t in range(steps):
            x = p["E"][ids[:, t]]
            h = np.tanh(x @ p["W"].T + hs[-1] @ p["U"].T + p["b"])
            y_hat = softmax(h @ p["Vout"].T + p["c"])
            loss -= np.log(y_hat[np.arange(batch), targets[:, t]]).sum()
            hs.append(h)
            probs.append(y_hat)
        n = batch * steps
        return loss / n, {"ids": ids, "targets": targets, "hs": hs, "probs": probs, "n": n}

    def backward(self, cache, truncate: int | None = None) -> dict[str, np.ndarray]:
        """Backpropagation through time, by hand. Returns gradients of the mean loss.

        ``truncate=k`` cuts the recurrent gradient at every k-th step boundary (steps k, 2k, ...),
        exactly like detaching the hidden state there: the usual truncated BPTT.
        """
        if truncate is not None and (not isinstance(truncate, int) or truncate < 1):
            raise ValueError(f"truncate must be None or an int >= 1, got {truncate!r}")
        p = self.params
        ids, targets, hs, probs, n = (cache[k] for k in ("ids", "targets", "hs", "probs", "n"))
        batch, steps = ids.shape
        grads = {k: np.zeros_like(v) for k, v in p.items()}
        dh_next = np.zeros_like(hs[0])  # dJ/dh_t arriving from step t+1
        for t in reversed(range(steps)):
            dz = probs[t].copy()
            dz[np.arange(batch), targets[:, t]] -= 1.0  # y_hat - y
            dz /= n
            grads["Vout"] += dz.T @ hs[t + 1]
            grads["c"] += dz.sum(0)
            dh = dz @ p["Vout"] + dh_next
            da = dh * (1.0 - hs[t + 1] ** 2)  # through tanh
            grads["W"] += da.T @ p["E"][ids[:, t]]
            grads["U"] += da.T @ hs[t]
            grads["b"] += da.sum(0)
            np.add.at(grads["E"], ids[:, t], da @ p["W"])
            dh_next = da @ p["U"]
            if truncate is not None and t % truncate == 0 and t > 0:
                dh_next = np.zeros_like(dh_next)
        grads["h0"] = dh_next
        return grads

    def step(self, grads: dict, lr: float, clip: float | None = None) -> float:
        """One SGD step (after optional global-norm clipping); returns the gradient norm."""
        norm = clip_grad_norm(grads, clip) if clip is not None else global_norm(grads)
        for k in self.PARAMS:
            self.params[k] -= lr * grads[k]
        return norm


def global_norm(grads: dict) -> float:
    return math.sqrt(sum(float((g**2).sum()) for k, g in grads.items() if k != "h0"))


def clip_grad_norm(grads: dict, max_norm: float) -> float:
    """Scale all gradients in place so their global norm is at most ``max_norm``; return the
    norm before clipping. Same rule as ``torch.nn.utils.clip_grad_norm_`` (including its 1e-6)."""
    if not max_norm > 0:
        raise ValueError(f"max_norm must be > 0, got {max_norm!r}")
    norm = global_norm(grads)
    scale = max_norm / (norm + 1e-6)
    if scale < 1:
        for k in grads:
            grads[k] *= scale
    return norm


# ---------------------------------------------------------------------- cells from the equations
def _init_uniform(module: nn.Module, hidden_size: int) -> None:
    """torch's default for its RNN cells: every parameter ~ U(-1/sqrt(H), 1/sqrt(H))."""
    bound = 1 / math.sqrt(hidden_size)
    for param in module.parameters():
        nn.init.uniform_(param, -bound, bound)


class _Cell(nn.Module):
    gates = 1

    def __init__(self, input_size: int, hidden_size: int, bias: bool = True):
        super().__init__()
        for name, value in [("input_size", input_size), ("hidden_size", hidden_size)]:
            integer(name, value, 1)
        self.input_size, self.hidden_size = input_size, hidden_size
        g = self.gates * hidden_size
        self.weight_ih = nn.Parameter(torch.empty(g, input_size))
        self.weight_hh = nn.Parameter(torch.empty(g, hidden_size))
        self.bias_ih = nn.Parameter(torch.empty(g)) if bias else None
        self.bias_hh = nn.Parameter(torch.empty(g)) if bias else None
        _init_uniform(self, hidden_size)

    def _affine(self, x, h):
        """(W_ih x + b_ih, W_hh h + b_hh), both [B, gates*H]."""
        if x.dim() != 2 or x.shape[1] != self.input_size:
            raise ValueError(f"input must have shape [batch, {self.input_size}], "
                             f"got {tuple(x.shape)}")
        if h.shape != (x.shape[0], self.hidden_size):
            raise ValueError(f"hidden state must have shape {(x.shape[0], self.hidden_size)}, "
                             f"got {tuple(h.shape)}")
        gi, gh = x @ self.weight_ih.T, h @ self.weight_hh.T
        if self.bias_ih is not None:
            gi, gh = gi + self.bias_ih, gh + self.bias_hh
        return gi, gh

    def _zeros(self, x):
        return x.new_zeros(x.shape[0], self.hidden_size)


class RNNCell(_Cell):
    """h' = tanh(W_ih x + b_ih + W_hh h + b_hh), parameters named as in torch.nn.RNNCell."""

    def forward(self, x, h=None):
        gi, gh = self._affine(x, self._zeros(x) if h is None else h)
        return torch.tanh(gi + gh)


class LSTMCell(_Cell):
    """The LSTM of torch.nn.LSTMCell, gate order (i, f, g, o):

    i = sigma(.), f = sigma(.), g = tanh(.), o = sigma(.) of W_ih x + b_ih + W_hh h + b_hh;
    c' = f * c + i * g;  h' = o * tanh(c').
    """

    gates = 4

    def forward(self, x, state=None):
        h, c = (self._zeros(x), self._zeros(x)) if state is None else state
        gi, gh = self._affine(x, h)
        i, f, g, o = (gi + gh).chunk(4, dim=1)
        c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
        return torch.sigmoid(o) * torch.tanh(c), c


class GRUCell(_Cell):
    """The GRU of torch.nn.GRUCell, gate order (r, z, n):

    r = sigma(W_ir x + b_ir + W_hr h + b_hr), z = sigma(... same with z ...),
    n = tanh(W_in x + b_in + r * (W_hn h + b_hn)), h' = (1 - z) * n + z * h.
    """

    gates = 3

    def forward(self, x, h=None):
        h = self._zeros(x) if h is None else h
        gi, gh = self._affine(x, h)
        i_r, i_z, i_n = gi.chunk(3, dim=1)
        h_r, h_z, h_n = gh.chunk(3, dim=1)
        r, z = torch.sigmoid(i_r + h_r), torch.sigmoid(i_z + h_z)
        n = torch.tanh(i_n + r * h_n)
        return (1 - z) * n + z * h


_CELLS = {"rnn": RNNCell, "lstm": LSTMCell, "gru": GRUCell}


class StackedRNN(nn.Module):
    """Cells unrolled over time, stacked in layers, optionally bidirectional (batch first).

    Input [B, T, I] -> (outputs [B, T, dirs*H], final hidden [layers*dirs, B, H]; for the LSTM
    also the final cell state). Layer l > 0 reads the concatenated outputs of layer l-1.
    ``load_torch`` copies the weights of the equivalent ``nn.RNN``/``nn.LSTM``/``nn.GRU``.
    """

    def __init__(self, cell: str, input_size: int, hidden_size: int, num_layers: int = 1,
                 bidirectional: bool = False):
        super().__init__()
        if cell not in _CELLS:
            raise ValueError(f"cell must be one of {sorted(_CELLS)}, got {cell!r}")
        integer("num_layers", num_layers, 1)
        self.cell_type, self.num_layers = cell, num_layers
        self.dirs = 2 if bidirectional else 1
        self.cells = nn.ModuleList(
            _CELLS[cell](input_size if layer == 0 else self.dirs * hidden_size, hidden_size)
            for layer in range(num_layers) for _ in range(self.dirs)
        )

    def forward(self, x):
        if x.dim() != 3:
            raise ValueError(f"input must have shape [batch, time, features], got {tuple(x.shape)}")
        finals_h, finals_c = [], []
        layer_input = x
        for layer in range(self.num_layers):
            outputs = []
            for d in range(self.dirs):
                cell = self.cells[layer * self.dirs + d]
                steps = range(x.shape[1]) if d == 0 else reversed(range(x.shape[1]))
                state, out = None, [None] * x.shape[1]
                for t in steps:
                    state = cell(layer_input[:, t], state)
                    out[t] = state[0] if isinstance(state, tuple) else state
                outputs.append(torch.stack(out, dim=1))
                finals_h.append(out[-1] if d == 0 else out[0])
                if isinstance(state, tuple):
                    finals_c.append(state[1])
            layer_input = torch.cat(outputs, dim=2)
        h = torch.stack(finals_h)
        return (layer_input, (h, torch.stack(finals_c))) if finals_c else (layer_input, h)

    @torch.no_grad()
    def load_torch(self, module: nn.RNNBase) -> None:
        """Copy weights from ``nn.RNN``/``nn.LSTM``/``nn.GRU`` (same sizes, batch_first)."""
        for layer in range(self.num_layers):
            for d in range(self.dirs):
                suffix = f"_l{layer}" + ("_reverse" if d else "")
                cell = self.cells[layer * self.dirs + d]
                for name in ("weight_ih", "weight_hh", "bias_ih", "bias_hh"):
                    getattr(cell, name).copy_(getattr(module, name + suffix))


# ---------------------------------------------------------------------- RNN LM for training
class LSTM(nn.LSTM):
    """torch's LSTM, computed in float32 under CPU float16 autocast, where torch's CPU LSTM
    (oneDNN) has no float16 kernel; bfloat16, and float16 on a GPU, run as torch decides."""

    def forward(self, input, hx=None):
        if torch.is_autocast_enabled("cpu") and torch.get_autocast_dtype("cpu") == torch.float16:
            with torch.autocast("cpu", enabled=False):
                return super().forward(input.float(),
                                       None if hx is None else tuple(h.float() for h in hx))
        return super().forward(input, hx)


_TORCH_RNNS = {"rnn": nn.RNN, "lstm": LSTM, "gru": nn.GRU}


@dataclass(frozen=True)
class RNNConfig:
    """The sizes of an RNN model: the language model here, the encoder and decoders of
    ``seqlab.seq2seq``. Vocabulary sizes are the models' own arguments."""

    embed_dim: int = 64       # each token's vector
    hidden_dim: int = 128     # the state h_t (and an LSTM's cell c_t)
    num_layers: int = 1       # stacked RNNs
    cell: str = "lstm"        # "rnn" (tanh), "lstm" or "gru"
    dropout: float = 0.0      # on the embeddings and outputs, and between stacked layers

    def __post_init__(self):
        integer("embed_dim", self.embed_dim, 1)
        integer("hidden_dim", self.hidden_dim, 1)
        integer("num_layers", self.num_layers, 1)
        if self.cell not in _TORCH_RNNS:
            raise ValueError(f"cell must be one of {sorted(_TORCH_RNNS)}, got {self.cell!r}")
        number("dropout", self.dropout, 0, 1, high_open=True)


def batch_first_state(state):
    """torch's RNN state [layers, B, H] (or an LSTM's (h, c) pair of them) -> [B, layers, H]:
    the decoding protocol keeps the batch on dim 0 of everything in a state."""
    if state is None:
        return None
    if isinstance(state, tuple):
        return tuple(s.transpose(0, 1) for s in state)
    return state.transpose(0, 1)


def layer_first_state(state):
    """The inverse of ``batch_first_state``: back to what torch's RNN modules take."""
    if state is None:
        return None
    if isinstance(state, tuple):
        return tuple(s.transpose(0, 1).contiguous() for s in state)
    return state.transpose(0, 1).contiguous()


class RNNLanguageModel(nn.Module):
    """Embedding -> nn.RNN (tanh) / nn.LSTM / nn.GRU (cuDNN on a GPU) -> linear layer.

    Decoding protocol (``seqlab.decoding``): the state is the RNN's hidden state, batch-first.
    """

    def __init__(self, vocab_size: int, config: RNNConfig | None = None, *legacy,
                 pad_id: int = PAD_ID, bos_id: int = BOS_ID, eos_id: int = EOS_ID, **sizes):
        super().__init__()
        self.config = c = _config.resolve(
            RNNConfig, "RNNLanguageModel", config, legacy, sizes, defaults=RNNConfig(),
            legacy_order=("embed_dim", "hidden_dim", "num_layers", "cell", "dropout"))
        self.pad_id, self.bos_id, self.eos_id = pad_id, bos_id, eos_id
        self.embed = nn.Embedding(vocab_size, c.embed_dim, padding_idx=pad_id)
        self.rnn = _TORCH_RNNS[c.cell](c.embed_dim, c.hidden_dim, c.num_layers,
                                       batch_first=True,
                                       dropout=c.dropout if c.num_layers > 1 else 0.0)
        self.drop = nn.Dropout(c.dropout)
        self.out = nn.Linear(c.hidden_dim, vocab_size)

    def forward(self, ids: torch.Tensor, state=None):
        """ids [B, T] -> (logits [B, T, V], final state)."""
        if ids.dim() != 2:
            raise ValueError(f"ids must have shape [batch, time], got {tuple(ids.shape)}")
        outputs, state = self.rnn(self.drop(self.embed(ids)), state)
        return self.out(self.drop(outputs)), state

    def start(self, prompt: torch.Tensor) -> dict:
        prompt = decoding.check_prompt(prompt, self.bos_id)
        hidden = self(prompt[:, :-1])[1] if prompt.shape[1] > 1 else None
        return {"hidden": batch_first_state(hidden), "next_token": prompt[:, -1]}

    def step(self, state: dict, last_tokens: torch.Tensor):
        logits, hidden = self(last_tokens[:, None], layer_first_state(state["hidden"]))
        return logits[:, 0].float().log_softmax(-1), {"hidden": batch_first_state(hidden)}

    select = staticmethod(decoding.select_state)


def lm_batch(sentences_ids, bos_id: int, eos_id: int, pad_id: int = PAD_ID):
    """(inputs [B, T], targets [B, T]) with teacher forcing: inputs <bos> w1..wn, targets
    w1..wn <eos>; padding in the targets is ``pad_id`` and is ignored by ``rnn_lm_loss``."""
    inputs, _ = pad_batch([[bos_id, *s] for s in sentences_ids], pad_id)
    targets, _ = pad_batch([[*s, eos_id] for s in sentences_ids], pad_id)
    return inputs, targets


def rnn_lm_loss(model: RNNLanguageModel, batch) -> TokenLoss:
    """Mean cross-entropy over the real (non-padding) target tokens, and their count; for
    ``train.fit``."""
    inputs, targets = batch
    logits, _ = model(inputs)
    return token_cross_entropy(logits, targets, model.pad_id)


@torch.no_grad()
def rnn_lm_logprobs(model: RNNLanguageModel, inputs: torch.Tensor,
                    targets: torch.Tensor) -> torch.Tensor:
    """log P of every real target token (padding dropped), 1-D, for ``lm.perplexity``."""
    device = next(model.parameters()).device
    with evaluating(model):
        logits, _ = model(inputs.to(device))
    lp = logits.float().log_softmax(-1).gather(2, targets.to(device)[..., None]).squeeze(2)
    return lp[targets.to(device) != model.pad_id].cpu()


@torch.no_grad()
def rnn_next_word_probs(model: RNNLanguageModel, vocab, prefixes: list[list[str]],
                        words: list[str]) -> np.ndarray:
    """P(word | prefix) [len(prefixes), len(words)]: the model reads <bos> + prefix."""
    device = next(model.parameters()).device
    inputs, lengths = pad_batch([[vocab.bos_id, *vocab.encode(p)] for p in prefixes],
                                model.pad_id)
    with evaluating(model):
        logits, _ = model(inputs.to(device))
    last = logits[torch.arange(len(prefixes)), (lengths - 1).to(device)].float().softmax(-1)
    return last[:, [vocab[w] for w in words]].cpu().numpy()


def hidden_gradient_norms(model: RNNLanguageModel, ids: list[int]) -> np.ndarray:
    """||dJ_T / dh_t|| for t = 1..T: how strongly the loss at the last step reaches back to
    each earlier hidden state. Entry t is at distance T - t from the loss.

    The trained weights are copied into our step-by-step cells so every h_t can be kept. The
    computation runs in float64. Over the lecture's 80 steps float32 would do (its smallest
    values, about 1e-31, sit far above float32's 1e-38), but a vanishing gradient over a few
    hundred steps would underflow to exactly 0.
    """
    if model.rnn.num_layers != 1:
        raise ValueError("hidden_gradient_norms needs a one-layer model")
    if len(ids) < 2:
        raise ValueError(f"ids must hold at least 2 tokens, got {len(ids)}")
    device = next(model.parameters()).device
    unrolled = StackedRNN(model.config.cell, model.rnn.input_size, model.rnn.hidden_size)
    unrolled.to(device=device, dtype=torch.float64)
    unrolled.load_torch(model.rnn)
    cell = unrolled.cells[0]
    x = model.embed(torch.tensor([ids[:-1]], device=device)).detach().double()
    state, hidden = None, []
    for t in range(x.shape[1]):
        state = cell(x[:, t], state)
        h = state[0] if isinstance(state, tuple) else state
        h.retain_grad()
        hidden.append(h)
    logits = nn.functional.linear(hidden[-1], model.out.weight.double(), model.out.bias.double())
    loss = nn.functional.cross_entropy(logits, torch.tensor([ids[-1]], device=device))
    loss.backward()
    return np.array([h.grad.norm().item() for h in hidden])
