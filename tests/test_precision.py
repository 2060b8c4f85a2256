"""Half precision, proven on the CPU: the paths a GPU takes (bfloat16 autocast on an A100/L4/H100,
float16 autocast with a gradient scaler on a T4) run here under ``SEQLAB_PRECISION=bf16/fp16``.

Every model kind trains with finite losses that track float32's; every decoder gives float32's
outputs on a trained model; masks, softmaxes and log-probabilities stay finite.
"""

import math

import pytest
import torch

from seqlab import decoding, seed_everything
from seqlab.attention import masked_softmax, scaled_dot_product_attention, scaled_dot_score
from seqlab.data import Vocab
from seqlab.data.toy import ToyLanguage, reverse_task
from seqlab.device import autocast, autocast_dtype, grad_scaler, precision
from seqlab.lm import FeedForwardLM, feedforward_loss, ngram_windows
from seqlab.mlm import BertModel, mask_tokens, pretrain_loss
from seqlab.rnn import RNNLanguageModel, lm_batch, rnn_lm_loss
from seqlab.seq2seq import build_model, seq2seq_batch, seq2seq_loss
from seqlab.train import fit
from seqlab.transformer import TransformerLM, TransformerSeq2Seq, lm_loss

HALF = ["bf16", "fp16"]
DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}


# ---------------------------------------------------------------------- the setting
def test_the_setting_is_read_from_the_environment_and_checked(monkeypatch):
    monkeypatch.delenv("SEQLAB_PRECISION", raising=False)
    assert precision() == "auto" and autocast_dtype("cpu") is None
    for value, dtype in [("fp32", None), (" BF16 ", torch.bfloat16), ("fp16", torch.float16)]:
        monkeypatch.setenv("SEQLAB_PRECISION", value)
        assert autocast_dtype("cpu") == dtype
        assert grad_scaler("cpu").is_enabled() == (dtype == torch.float16)
    monkeypatch.setenv("SEQLAB_PRECISION", "half")
    with pytest.raises(ValueError, match=r"SEQLAB_PRECISION must be one of auto, fp32, bf16, "
                                         r"fp16, got 'half'"):
        autocast_dtype("cpu")
    with pytest.raises(ValueError, match="precision must be one of"):
        precision("float16")
    with pytest.raises(TypeError, match="precision must be a str"):
        precision(16)


def test_a_forced_type_applies_on_every_device_and_auto_only_on_cuda(monkeypatch):
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (7, 5))
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: False)
    assert autocast_dtype("cuda", "auto") == torch.float16  # a T4
    assert autocast_dtype("cuda", "fp32") is None
    assert autocast_dtype("mps", "bf16") == torch.bfloat16 and autocast_dtype("mps") is None
    a = torch.randn(4, 4)
    with autocast("cpu", setting="bf16"):
        assert (a @ a).dtype == torch.bfloat16
    with autocast("cpu", setting="fp16"):
        assert (a @ a).dtype == torch.float16
    with autocast("cpu", setting="fp32"):
        assert (a @ a).dtype == torch.float32


# ---------------------------------------------------------------------- training, every kind
def _feedforward():
    lang = ToyLanguage()
    sentences = [s.split() for s in lang.sample(400, seed=1)]
    vocab = Vocab.build(sentences)
    contexts, targets = ngram_windows([vocab.encode(s) for s in sentences], 2, vocab.bos_id,
                                      vocab.eos_id)
    assert len(targets) >= 64 * 30
    batches = [(contexts[i : i + 64], targets[i : i + 64]) for i in range(0, 64 * 30, 64)]
    return FeedForwardLM(len(vocab), 2, embed_dim=16, hidden_dim=32), batches, feedforward_loss


def _lm_sentences():
    sentences = [s.split() for s in ToyLanguage().sample(300, seed=2)]
    vocab = Vocab.build(sentences)
    ids = [vocab.encode(s) for s in sentences]
    return vocab, [lm_batch(ids[i : i + 10], vocab.bos_id, vocab.eos_id) for i in range(0, 300, 10)]


def _rnn_lm():
    vocab, batches = _lm_sentences()
    return RNNLanguageModel(len(vocab), embed_dim=16, hidden_dim=32, cell="lstm"), batches, \
        rnn_lm_loss


def _transformer_lm():
    vocab, batches = _lm_sentences()
    return TransformerLM(len(vocab), d_model=32, num_heads=4, num_layers=2), batches, lm_loss


def _reverse_batches(n=30 * 16, batch=16, seed=0):
    pairs = reverse_task(n, seed=seed, min_len=2, max_len=8)
    vocab = Vocab.build([s.split() for s, _ in pairs])
    ids = [(vocab.encode(s.split()), vocab.encode(t.split())) for s, t in pairs]
    return vocab, [seq2seq_batch(ids[i : i + batch], vocab.bos_id, vocab.eos_id)
                   for i in range(0, n, batch)]


def _rnn_seq2seq(attention):
    def build():
        vocab, batches = _reverse_batches()
        return build_model(len(vocab), len(vocab), vocab.bos_id, vocab.eos_id, attention,
                           embed_dim=16, hidden_dim=32), batches, seq2seq_loss
    return build


def _transformer_seq2seq():
    vocab, batches = _reverse_batches()
    return TransformerSeq2Seq(len(vocab), len(vocab), d_model=32, num_heads=4, num_layers=1,
                              bos_id=vocab.bos_id, eos_id=vocab.eos_id), batches, seq2seq_loss


def _bert():
    vocab, batches = _lm_sentences()
    generator = torch.Generator().manual_seed(0)
    mlm = []
    for inputs, _ in batches:
        masked, labels = mask_tokens(inputs, vocab, p=0.3, generator=generator)
        mlm.append((masked, torch.zeros_like(masked), labels))
    return BertModel(len(vocab), d_model=32, num_heads=4, num_layers=2, dropout=0.0), mlm, \
        pretrain_loss


KINDS = {"feed-forward LM": _feedforward, "RNN LM": _rnn_lm,
         "seq2seq": _rnn_seq2seq(False), "seq2seq + attention": _rnn_seq2seq(True),
         "Transformer LM": _transformer_lm, "Transformer seq2seq": _transformer_seq2seq,
         "BERT": _bert}
_float32_losses: dict[str, list[float]] = {}


def _train(kind: str, setting: str, monkeypatch) -> list[float]:
    """30 steps of ``fit`` under ``setting``; the type its first linear layer computed in is
    checked, so a run that silently stayed in float32 cannot pass."""
    monkeypatch.setenv("SEQLAB_PRECISION", setting)
    seed_everything(0)
    model, batches, loss_fn = KINDS[kind]()
    seen = set()
    linear = next(m for m in model.modules() if isinstance(m, torch.nn.Linear))
    linear.register_forward_hook(lambda module, inputs, output: seen.add(output.dtype))
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    history = fit(model, optimizer, batches, loss_fn, clip=1.0, max_steps=30, progress=False,
                  device=torch.device("cpu"))
    assert seen == {DTYPES.get(setting, torch.float32)}
    assert len(history.step_loss) == 30
    return history.step_loss


@pytest.mark.parametrize("setting", HALF)
@pytest.mark.parametrize("kind", list(KINDS))
def test_every_model_kind_trains_in_half_precision_like_float32(kind, setting, monkeypatch):
    """30 steps from the same start on the same batches: every loss finite (``fit`` raises on
    the first that is not), each within 3% of float32's at the same step, and training
    under way (the last ten steps' mean at least 5% below the first loss)."""
    if kind not in _float32_losses:
        _float32_losses[kind] = _train(kind, "fp32", monkeypatch)
    full, half = _float32_losses[kind], _train(kind, setting, monkeypatch)
    assert all(math.isfinite(x) for x in half)
    worst = max(abs(h - f) / f for h, f in zip(half, full))
    assert worst < 0.03, f"{kind} under {setting} strays {worst:.1%} from float32's loss"
    for losses in (full, half):
        assert sum(losses[-10:]) / 10 < 0.95 * losses[0]


# ---------------------------------------------------------------------- decoders
@pytest.fixture(scope="module")
def trained():
    """A Transformer seq2seq that reverses strings of 2-6 letters (float32 training), a
    weaker copy for contrastive decoding, and test sources."""
    seed_everything(0)
    vocab, batches = _reverse_batches(n=400 * 32, batch=32, seed=3)
    model = TransformerSeq2Seq(len(vocab), len(vocab), d_model=32, num_heads=4, num_layers=1,
                               bos_id=vocab.bos_id, eos_id=vocab.eos_id)
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    amateur = None

    def keep_amateur(step, loss):
        nonlocal amateur
        if step == 60:
            amateur = TransformerSeq2Seq(len(vocab), len(vocab), d_model=32, num_heads=4,
                                         num_layers=1, bos_id=vocab.bos_id, eos_id=vocab.eos_id)
            amateur.load_state_dict(model.state_dict())

    fit(model, optimizer, batches, seq2seq_loss, clip=1.0, progress=False, on_step=keep_amateur,
        device=torch.device("cpu"))
    pairs = reverse_task(24, seed=99, min_len=2, max_len=6)
    src, lengths, _, _ = seq2seq_batch(
        [(vocab.encode(s.split()), vocab.encode(t.split())) for s, t in pairs],
        vocab.bos_id, vocab.eos_id)
    return model.eval(), amateur.eval(), src, lengths, pairs, vocab


def _decoders(model, amateur, src, lengths):
    """Every decoder's outputs as token lists (hypotheses reduced to their tokens)."""
    def best(hyps):
        return [h[0].tokens for h in hyps]
    generator = torch.Generator().manual_seed(5)
    return {
        "greedy": decoding.greedy(model, src, lengths, max_len=10),
        "beam": best(decoding.beam_search(model, src, lengths, beam_size=4, max_len=10)),
        "beam, length-normalised": best(decoding.beam_search(
            model, src, lengths, beam_size=4, max_len=10, length_penalty=1.0)),
        "contrastive": best(decoding.contrastive_decoding(model, amateur, src, lengths,
                                                          max_len=10)),
        "exact": [h.tokens for h in decoding.exact_search(model, src[:6], lengths[:6],
                                                          max_len=8)],
        "sampling": decoding.sample(model, src, lengths, max_len=10, top_k=3,
                                    generator=generator),
    }


TIE = 0.1  # nats: two choices nearer than this under float32 may swap under half precision


@torch.no_grad()
def _parting_gap(model, amateur, name, src, lengths, a, b) -> float:
    """How far apart float32 puts outputs ``a`` and ``b`` of one source where they part: the
    score gap of their tokens at the first step they differ (greedy and contrastive decoding
    choose step by step), or of their whole log-probabilities (beam and exact search)."""
    if name in ("beam", "exact"):
        scores = decoding.sequence_logprob(model, src.expand(2, -1), lengths.expand(2),
                                           targets=[a, b])
        return abs(float(scores[0] - scores[1]))
    a, b = a + [model.eos_id], b + [model.eos_id]
    t = next(i for i, (x, y) in enumerate(zip(a, b)) if x != y)
    states = [m.start(src, lengths) for m in (model, amateur)]
    tokens = torch.tensor([model.bos_id])
    for i in range(t + 1):
        lp_e, states[0] = model.step(states[0], tokens)
        lp_a, states[1] = amateur.step(states[1], tokens)
        tokens = torch.tensor([a[i]])
    score = lp_e[0] if name == "greedy" else decoding.contrastive_scores(lp_e, lp_a)[0]
    return abs(float(score[a[t]] - score[b[t]]))


@pytest.mark.parametrize("setting", HALF)
def test_every_decoder_gives_float32_outputs_in_half_precision(trained, setting):
    """Decoding under autocast gives float32's outputs, except where half precision may
    legitimately differ: where float32 itself finds two choices within ``TIE`` of each other
    (its rounding of a logit is about 0.4% in bfloat16, 0.05% in float16). Contrastive
    decoding's scores, differences of two models' log-probs, have such near-ties; the sampler
    draws with the same seed and must agree everywhere on this confident model."""
    model, amateur, src, lengths, pairs, vocab = trained
    full = _decoders(model, amateur, src, lengths)
    right = sum(out == vocab.encode(t.split()) for out, (_, t) in zip(full["greedy"], pairs))
    assert right >= 0.8 * len(pairs)  # it learned the task: its outputs mean something
    with autocast("cpu", setting=setting):
        half = _decoders(model, amateur, src, lengths)
    for name in full:
        differ = [i for i, (h, f) in enumerate(zip(half[name], full[name])) if h != f]
        assert len(differ) <= 2, f"{name} under {setting} differs on rows {differ}"
        for i in differ:
            assert name not in ("sampling", "beam, length-normalised"), (name, i)
            gap = _parting_gap(model, amateur, name, src[i : i + 1], lengths[i : i + 1],
                               full[name][i], half[name][i])
            assert gap < TIE, f"{name} under {setting}, row {i}: float32's gap {gap:.3f}"


@pytest.mark.parametrize("setting", HALF)
def test_log_probs_of_a_decoding_step_are_float32_and_close(trained, setting):
    """A step's log-probs come back in float32 under autocast (the decoders sum and compare
    them there) and differ from float32's by about the half type's rounding of the logits."""
    model, _, src, lengths, _, _ = trained
    with torch.no_grad():
        state = model.start(src, lengths)
        first = torch.full((len(src),), model.bos_id)
        full, _ = model.step(state, first)
        with autocast("cpu", setting=setting):
            half, _ = model.step(model.start(src, lengths), first)
    assert half.dtype == torch.float32 and torch.isfinite(half).all()
    assert (half.exp() - full.exp()).abs().max() < 0.02


# ---------------------------------------------------------------------- masks and scores
@pytest.mark.parametrize("setting", HALF)
def test_masked_and_fully_masked_rows_stay_finite(setting):
    scores = torch.randn(2, 3, 5)
    mask = torch.tensor([[True] * 5, [True, True, False, False, False]])[:, None, :].expand(2, 3, 5)
    mask = mask.clone()
    mask[1, 2] = False  # a query that may attend nowhere
    with autocast("cpu", setting=setting):
        weights = masked_softmax(scores.to(DTYPES[setting]), mask)
    assert torch.isfinite(weights).all()
    assert torch.equal(weights[1, 2], torch.zeros(5, dtype=weights.dtype))
    assert (weights[1, :2, 2:] == 0).all()
    torch.testing.assert_close(weights[:, :2].float().sum(-1), torch.ones(2, 2), atol=1e-2,
                               rtol=0)


@pytest.mark.parametrize("setting", HALF)
def test_attention_scores_of_large_vectors_do_not_overflow(setting):
    """q . k of two 64-wide vectors of entries 40 is 102,400, past float16's largest number
    (65,504); scaled by 1/sqrt(64) first it is 12,800. The product is taken on the scaled
    query, as torch's fused attention does."""
    q = torch.full((1, 1, 2, 64), 40.0)
    k = torch.full((1, 1, 3, 64), 40.0)
    k[..., 0, :] = -40.0
    v = torch.arange(3.0)[None, None, :, None].expand(1, 1, 3, 64)
    mask = torch.tensor([True, True, False])
    with autocast("cpu", setting=setting):
        out, weights = scaled_dot_product_attention(q, k, v, mask)
        score = scaled_dot_score(q[0], k[0])
    assert torch.isfinite(out).all() and torch.isfinite(weights).all()
    assert torch.isfinite(score).all()
    torch.testing.assert_close(weights[0, 0, 0].float(), torch.tensor([0.0, 1.0, 0.0]))
