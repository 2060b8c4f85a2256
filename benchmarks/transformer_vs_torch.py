"""seqlab.transformer against torch's own modules, in the same process (printed, never asserted).

1. ``MultiHeadAttention`` against ``nn.MultiheadAttention(batch_first=True)``, causal
   self-attention, forward (inference: eval, no grad) and forward+backward (training), in both
   modes: need_weights=True (ours: the readable path that returns the weights) and
   need_weights=False (ours: torch's fused ``F.scaled_dot_product_attention``).
2. ``EncoderLayer`` (pre- and post-LN) against ``nn.TransformerEncoderLayer(dropout=0)``,
   causal mask, forward and forward+backward.
3. Training throughput (tokens/s, Adam, same batches, same initial weights) of ``TransformerLM``
   against the same model assembled from ``nn.TransformerEncoderLayer`` (torch's idiomatic
   causal call: the mask plus ``is_causal=True``). Goal: ours >= 0.9x torch's throughput.

Weights are copied from torch's modules into ours and the outputs (and input gradients) checked
equal before anything is timed. Timings alternate between the contenders (ABAB..., the order
rotated each round) and report medians, so a noisy shared machine hurts both alike.

On the CPU the default is one torch thread: on a small machine shared with other work,
several intra-op threads wait on each other whenever one is descheduled, which made both models
several times slower and the ratio swing from 0.6 to 1.2 between runs. ``--threads 0`` keeps
torch's own choice (all cores), right on a quiet machine.

    python benchmarks/transformer_vs_torch.py [--device cpu|cuda] [--threads 1]
        [--parts attention layer lm] [--shapes 32x128x256x8 8x16x64x4] [--seconds 3]
        [--lm-batch 16 --lm-length 128 --lm-d-model 128 --lm-heads 4 --lm-layers 2]
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
from torch import nn

from seqlab import get_device, seed_everything
from seqlab.attention import causal_mask
from seqlab.data.vocab import PAD_ID
from seqlab.losses import token_cross_entropy
from seqlab.transformer import (
    EncoderLayer,
    MultiHeadAttention,
    TransformerLM,
    lm_loss,
    sinusoidal_positions,
)

GOAL = 0.9  # ours / torch training throughput


# ---------------------------------------------------------------------- timing
def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    elif device.type == "mps":
        torch.mps.synchronize()


def interleaved(fns: dict, device: torch.device, seconds: float, min_rounds: int = 5):
    """Median seconds per call of each function. The functions take turns, the order rotating
    each round, until ``seconds`` have passed (and at least ``min_rounds`` rounds).

    On the CPU each call is timed alone: a short call is less often cut by the scheduler than a
    long block of them. A GPU runs asynchronously, so there each sample is a block of calls
    (>= ~10 ms) between two synchronisations.
    """
    for fn in fns.values():  # warm up: allocator, kernels, autograd graph
        fn()
    synchronize(device)
    start = time.perf_counter()
    for fn in fns.values():
        fn()
    synchronize(device)
    calls = 1
    if device.type != "cpu":
        calls = max(1, round(0.01 * len(fns) / (time.perf_counter() - start)))
    times = {name: [] for name in fns}
    names, begin, r = list(fns), time.perf_counter(), 0
    while r < min_rounds or time.perf_counter() - begin < seconds:
        for name in names[r % len(names):] + names[: r % len(names)]:
            synchronize(device)
            start = time.perf_counter()
            for _ in range(calls):
                fns[name]()
            synchronize(device)
            times[name].append((time.perf_counter() - start) / calls)
        r += 1
    return {name: statistics.median(t) for name, t in times.items()}


ROWS = []


def report(what: str, ours: float, theirs: float) -> None:
    """One table row: ours and torch's median time per call and the ratio ours / torch."""
    ROWS.append((what, ours, theirs))
    print(f"  {what:<62} ours {ours * 1e3:9.3f} ms  torch {theirs * 1e3:9.3f} ms  "
          f"ours/torch {ours / theirs:5.2f}")


def shape_name(shape) -> str:
    return "x".join(map(str, shape))


def max_diff(a: torch.Tensor, b: torch.Tensor, tol: float = 1e-4) -> float:
    """max |a - b|; a difference above ``tol`` stops the run: timing unequal models is moot."""
    diff = (a - b).abs().max().item()
    if not diff <= tol:
        raise SystemExit(f"ours and torch differ by {diff:.2e} (> {tol}); nothing timed")
    return diff


def parse_shape(text: str) -> tuple[int, int, int, int]:
    try:
        b, t, d, h = (int(x) for x in text.lower().split("x"))
    except ValueError as err:
        raise argparse.ArgumentTypeError(f"shape must be BxTxDxH, e.g. 32x128x256x8, got {text!r}"
                                         ) from err
    if d % h:
        raise argparse.ArgumentTypeError(f"d ({d}) must be divisible by h ({h}) in {text!r}")
    return b, t, d, h


def perturb_(module: nn.Module) -> nn.Module:
    """torch zero-initialises its biases and ones its LayerNorms; make every parameter count."""
    with torch.no_grad():
        for p in module.parameters():
            p.add_(torch.randn_like(p) * 0.05)
    return module


# ---------------------------------------------------------------------- 1. attention
def bench_attention(shape, device, seconds):
    b, t, d, h = shape
    seed_everything(0)
    theirs = perturb_(nn.MultiheadAttention(d, h, batch_first=True)).to(device)
    ours = MultiHeadAttention.from_torch(theirs).to(device)
    x = torch.randn(b, t, d, device=device)
    grad_out = torch.randn(b, t, d, device=device)
    allowed = causal_mask(t, device)  # ours: True = may attend
    blocked = ~allowed  # torch: True = blocked

    def run_ours(weights, inp):
        return ours(inp, inp, inp, allowed, need_weights=weights)

    def run_theirs(weights, inp):
        return theirs(inp, inp, inp, attn_mask=blocked, need_weights=weights)

    print(f"\nMultiHeadAttention, causal self-attention, B={b} T={t} d={d} h={h}")
    for weights in (True, False):  # equal outputs, weights and input gradients first
        xs = [x.clone().requires_grad_(True) for _ in range(2)]
        (out_a, w_a), (out_b, w_b) = run_ours(weights, xs[0]), run_theirs(weights, xs[1])
        out_a.backward(grad_out)
        out_b.backward(grad_out)
        extra = f", weights {max_diff(w_a, w_b):.1e}" if weights else ""
        print(f"  need_weights={weights!s:<5}: max |ours - torch| output "
              f"{max_diff(out_a, out_b):.1e}{extra}, input grad "
              f"{max_diff(xs[0].grad, xs[1].grad):.1e}")

    for mod in (ours, theirs):
        mod.eval()
    with torch.no_grad():
        fwd = interleaved({
            "ours_w": lambda: run_ours(True, x), "torch_w": lambda: run_theirs(True, x),
            "ours_f": lambda: run_ours(False, x), "torch_f": lambda: run_theirs(False, x),
        }, device, seconds)
    for mod in (ours, theirs):
        mod.train()
    xg = x.clone().requires_grad_(True)

    def step(run, weights):
        def fn():
            xg.grad = None
            run(weights, xg)[0].backward(grad_out)
        return fn

    bwd = interleaved({
        "ours_w": step(run_ours, True), "torch_w": step(run_theirs, True),
        "ours_f": step(run_ours, False), "torch_f": step(run_theirs, False),
    }, device, seconds)
    for label, res in (("forward (no grad)", fwd), ("forward+backward", bwd)):
        report(f"MHA {shape_name(shape)} {label}, need_weights=True", res["ours_w"],
               res["torch_w"])
        report(f"MHA {shape_name(shape)} {label}, need_weights=False", res["ours_f"],
               res["torch_f"])


# ---------------------------------------------------------------------- 2. encoder layer
def copy_encoder_layer(ours: EncoderLayer, ref: nn.TransformerEncoderLayer) -> None:
    """Load torch's layer into ours: attention through from_torch, then FFN and LayerNorms."""
    ours.self_attn.load_state_dict(MultiHeadAttention.from_torch(ref.self_attn).state_dict())
    with torch.no_grad():
        for a, b in [(ours.ffn.linear1, ref.linear1), (ours.ffn.linear2, ref.linear2),
                     (ours.attn_block.ln, ref.norm1), (ours.ffn_block.ln, ref.norm2)]:
            a.weight.copy_(b.weight)
            a.bias.copy_(b.bias)


def bench_encoder_layer(shape, norm, device, seconds):
    b, t, d, h = shape
    seed_everything(1)
    theirs = perturb_(nn.TransformerEncoderLayer(d, h, 4 * d, dropout=0.0, batch_first=True,
                                                 norm_first=norm == "pre")).to(device)
    ours = EncoderLayer(d, h, 4 * d, norm=norm).to(device)
    copy_encoder_layer(ours, theirs)
    x = torch.randn(b, t, d, device=device)
    grad_out = torch.randn(b, t, d, device=device)
    allowed = causal_mask(t, device)

    def run_ours(inp):
        return ours(inp, allowed)[0]

    def run_theirs(inp):
        return theirs(inp, src_mask=~allowed)

    xs = [x.clone().requires_grad_(True) for _ in range(2)]
    out_a, out_b = run_ours(xs[0]), run_theirs(xs[1])
    out_a.backward(grad_out)
    out_b.backward(grad_out)
    print(f"\nEncoderLayer norm={norm}, causal, B={b} T={t} d={d} h={h} d_ff={4 * d}: max |ours - "
          f"torch| output {max_diff(out_a, out_b):.1e}, input grad "
          f"{max_diff(xs[0].grad, xs[1].grad):.1e}")

    for mod in (ours, theirs):
        mod.eval()
    with torch.no_grad():
        fwd = interleaved({"ours": lambda: run_ours(x), "torch": lambda: run_theirs(x)},
                          device, seconds)
    for mod in (ours, theirs):
        mod.train()
    xg = x.clone().requires_grad_(True)

    def step(run):
        def fn():
            xg.grad = None
            run(xg).backward(grad_out)
        return fn

    bwd = interleaved({"ours": step(run_ours), "torch": step(run_theirs)}, device, seconds)
    report(f"EncoderLayer {norm}-LN {shape_name(shape)} forward (no grad)", fwd["ours"],
           fwd["torch"])
    report(f"EncoderLayer {norm}-LN {shape_name(shape)} forward+backward", bwd["ours"],
           bwd["torch"])


# ---------------------------------------------------------------------- 3. language model
class TorchLM(nn.Module):
    """TransformerLM's architecture from torch's blocks: token embedding + sinusoidal positions,
    num_layers x nn.TransformerEncoderLayer with a causal mask, final LayerNorm (pre-LN only),
    a linear layer to the vocabulary."""

    def __init__(self, vocab_size, d_model, num_heads, num_layers, max_len, norm):
        super().__init__()
        self.tokens = nn.Embedding(vocab_size, d_model, padding_idx=PAD_ID)
        self.register_buffer("positions", sinusoidal_positions(max_len, d_model),
                             persistent=False)
        self.layers = nn.ModuleList(
            nn.TransformerEncoderLayer(d_model, num_heads, 4 * d_model, dropout=0.0,
                                       batch_first=True, norm_first=norm == "pre")
            for _ in range(num_layers))
        self.final_ln = nn.LayerNorm(d_model) if norm == "pre" else nn.Identity()
        self.out = nn.Linear(d_model, vocab_size)

    def forward(self, tokens):
        t = tokens.shape[1]
        x = self.tokens(tokens) + self.positions[:t]
        mask = nn.Transformer.generate_square_subsequent_mask(t, device=tokens.device)
        for layer in self.layers:
            x = layer(x, src_mask=mask, is_causal=True)
        return self.out(self.final_ln(x))

    def load_from(self, ours: TransformerLM) -> TorchLM:
        """Copy ours in: torch stacks W_q, W_k, W_v (and their biases) in in_proj."""
        pairs = [(self.out, ours.out)]
        if isinstance(self.final_ln, nn.LayerNorm):
            pairs.append((self.final_ln, ours.final_ln))
        with torch.no_grad():
            self.tokens.weight.copy_(ours.embed.tokens.weight)
            for mine, theirs in zip(self.layers, ours.layers):
                attn = theirs.self_attn
                mine.self_attn.in_proj_weight.copy_(
                    torch.cat([attn.q_proj.weight, attn.k_proj.weight, attn.v_proj.weight]))
                mine.self_attn.in_proj_bias.copy_(
                    torch.cat([attn.q_proj.bias, attn.k_proj.bias, attn.v_proj.bias]))
                pairs += [(mine.self_attn.out_proj, attn.out_proj),
                          (mine.linear1, theirs.ffn.linear1), (mine.linear2, theirs.ffn.linear2),
                          (mine.norm1, theirs.attn_block.ln), (mine.norm2, theirs.ffn_block.ln)]
            for a, b in pairs:
                a.weight.copy_(b.weight)
                a.bias.copy_(b.bias)
        return self


def torch_lm_loss(model, batch):
    inputs, targets = batch
    return token_cross_entropy(model(inputs), targets, PAD_ID)


def bench_lm(args, norm, device):
    seed_everything(0)
    sizes = dict(vocab_size=args.lm_vocab, d_model=args.lm_d_model, num_heads=args.lm_heads,
                 num_layers=args.lm_layers, max_len=args.lm_length, norm=norm)
    ours = TransformerLM(**sizes).to(device).train()
    theirs = TorchLM(**sizes).to(device).load_from(ours).train()
    g = torch.Generator().manual_seed(0)
    n_batches = args.warmup + args.steps
    data = torch.randint(4, args.lm_vocab, (n_batches, args.lm_batch, args.lm_length + 1),
                         generator=g).to(device)
    batches = [(seq[:, :-1], seq[:, 1:]) for seq in data]
    with torch.no_grad():
        diff = max_diff(ours(batches[0][0]), theirs(batches[0][0]))
    tokens = args.lm_batch * args.lm_length
    print(f"\nTransformerLM norm={norm}, B={args.lm_batch} T={args.lm_length} "
          f"d={args.lm_d_model} h={args.lm_heads} layers={args.lm_layers} V={args.lm_vocab}: "
          f"max |ours - torch| logits {diff:.1e}")

    runs = {name: (model, torch.optim.Adam(model.parameters(), lr=1e-3), loss_fn, [])
            for name, model, loss_fn in (("ours", ours, lm_loss),
                                         ("torch", theirs, torch_lm_loss))}

    def train(name, chunk, times=None):
        """Adam steps on ``chunk``; on the CPU each step is timed alone (see interleaved),
        on a GPU the whole chunk between two synchronisations."""
        model, optimizer, loss_fn, losses = runs[name]
        synchronize(device)
        start = time.perf_counter()
        for batch in chunk:
            optimizer.zero_grad(set_to_none=True)
            loss, _ = loss_fn(model, batch)
            loss.backward()
            optimizer.step()
            losses.append(loss.detach())
            if times is not None and device.type == "cpu":
                times.append(time.perf_counter() - start)
                start = time.perf_counter()
        synchronize(device)
        if times is not None and device.type != "cpu":
            times.append((time.perf_counter() - start) / len(chunk))

    for name in runs:
        train(name, batches[: args.warmup])
    rounds = max(1, args.steps // args.steps_per_round)
    per_round = args.steps // rounds
    step_times = {name: [] for name in runs}  # seconds per step
    for r in range(rounds):
        chunk = batches[args.warmup + r * per_round :][:per_round]
        for name in (("ours", "torch") if r % 2 == 0 else ("torch", "ours")):
            train(name, chunk, step_times[name])
    speed = {name: tokens / statistics.median(t) for name, t in step_times.items()}
    loss_diff = max_diff(torch.stack(runs["ours"][3]), torch.stack(runs["torch"][3]), tol=1e-3)
    ratio = speed["ours"] / speed["torch"]
    print(f"  {rounds * per_round} timed steps each after {args.warmup} warm-up, same batches; "
          f"max |loss ours - torch| over the run {loss_diff:.1e}")
    print(f"  tokens/s: ours {speed['ours']:,.0f}, torch {speed['torch']:,.0f} -> throughput "
          f"ours/torch {ratio:.2f} (time ours/torch {1 / ratio:.2f}); goal >= {GOAL}: "
          f"{'met' if ratio >= GOAL else 'NOT met'}")
    return ratio


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default=None,
                        help="cpu, cuda, mps (default: seqlab.get_device(), CUDA when present)")
    parser.add_argument("--parts", nargs="+", choices=("attention", "layer", "lm"),
                        default=["attention", "layer", "lm"], help="which comparisons to run")
    parser.add_argument("--shapes", type=parse_shape, nargs="+",
                        default=[(32, 128, 256, 8), (8, 16, 64, 4)],
                        help="BxTxDxH shapes for the attention and layer comparisons")
    parser.add_argument("--seconds", type=float, default=3.0,
                        help="timing budget of each attention/layer comparison (median of rounds)")
    parser.add_argument("--threads", type=int, default=1,
                        help="CPU threads for torch; 0: torch's own choice (see the docstring)")
    parser.add_argument("--lm-batch", type=int, default=16)
    parser.add_argument("--lm-length", type=int, default=128)
    parser.add_argument("--lm-d-model", type=int, default=128)
    parser.add_argument("--lm-heads", type=int, default=4)
    parser.add_argument("--lm-layers", type=int, default=2)
    parser.add_argument("--lm-vocab", type=int, default=1000)
    parser.add_argument("--lm-norms", nargs="+", choices=("pre", "post"), default=["pre", "post"])
    parser.add_argument("--warmup", type=int, default=4, help="untimed Adam steps per model")
    parser.add_argument("--steps", type=int, default=24, help="timed Adam steps per model")
    parser.add_argument("--steps-per-round", type=int, default=4,
                        help="steps per timed block; blocks alternate between the models")
    args = parser.parse_args()
    device = get_device(args.device)
    if device.type == "cpu" and args.threads > 0:
        torch.set_num_threads(args.threads)
    print(f"device {device}, torch {torch.__version__}, {torch.get_num_threads()} CPU threads; "
          "times are medians, ours/torch < 1 means ours is faster")

    if "attention" in args.parts:
        for shape in args.shapes:
            bench_attention(shape, device, args.seconds)
    if "layer" in args.parts:
        for shape in args.shapes:
            for norm in ("pre", "post"):
                bench_encoder_layer(shape, norm, device, args.seconds)
    ratios = {}
    if "lm" in args.parts:
        ratios = {norm: bench_lm(args, norm, device) for norm in args.lm_norms}

    print("\nSummary (time ours/torch; throughput torch/ours = the same number, < 1: ours faster)")
    for what, ours, theirs in ROWS:
        print(f"  {what:<62} {ours / theirs:5.2f}")
    for norm, ratio in ratios.items():
        print(f"  TransformerLM {norm}-LN training: throughput ours/torch {ratio:.2f}, "
              f"goal >= {GOAL} {'met' if ratio >= GOAL else 'NOT met'}")


if __name__ == "__main__":
    main()
