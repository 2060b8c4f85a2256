import numpy as np
import pytest
import torch
from torch import nn

from seqlab.rnn import (
    GRUCell,
    LSTMCell,
    NumpyRNNLM,
    RNNCell,
    RNNLanguageModel,
    StackedRNN,
    clip_grad_norm,
    cross_entropy_grad,
    cross_entropy_grad_via_jacobian,
    lm_batch,
    output_weight_grad,
    rnn_lm_logprobs,
    rnn_lm_loss,
    softmax,
    softmax_jacobian,
)


# ------------------------------------------------------------------ softmax + cross-entropy
def test_shortcut_equals_jacobian_route_and_autograd():
    rng = np.random.default_rng(0)
    for _ in range(20):
        z, target = rng.normal(size=7) * 3, int(rng.integers(7))
        short = cross_entropy_grad(z, target)
        np.testing.assert_allclose(cross_entropy_grad_via_jacobian(z, target), short, atol=1e-12)
        zt = torch.tensor(z, requires_grad=True)
        nn.functional.cross_entropy(zt[None], torch.tensor([target])).backward()
        np.testing.assert_allclose(short, zt.grad.numpy(), atol=1e-12)


def test_softmax_jacobian_by_finite_differences():
    z = np.array([0.3, -1.2, 2.0, 0.1])
    eps, numeric = 1e-6, np.zeros((4, 4))
    for j in range(4):
        dz = np.zeros(4)
        dz[j] = eps
        numeric[:, j] = (softmax(z + dz) - softmax(z - dz)) / (2 * eps)
    np.testing.assert_allclose(softmax_jacobian(softmax(z)), numeric, atol=1e-9)
    with pytest.raises(ValueError, match="one probability vector"):
        softmax_jacobian(np.ones((2, 2)))


def test_output_weight_grad_is_an_outer_product():
    rng = np.random.default_rng(1)
    h, V = rng.normal(size=5), rng.normal(size=(6, 5))
    Vt = torch.tensor(V, requires_grad=True)
    nn.functional.cross_entropy((Vt @ torch.tensor(h))[None], torch.tensor([2])).backward()
    np.testing.assert_allclose(output_weight_grad(h, V @ h, 2), Vt.grad.numpy(), atol=1e-12)


# ------------------------------------------------------------------ BPTT by hand vs autograd
def autograd_reference(model: NumpyRNNLM, ids, targets, h0, truncate=None):
    p = {k: torch.tensor(v, requires_grad=True) for k, v in model.params.items()}
    h0t = torch.tensor(h0, requires_grad=True)
    ids_t, tg = torch.tensor(ids), torch.tensor(targets)
    h, loss = h0t, 0.0
    for t in range(ids.shape[1]):
        if truncate is not None and t > 0 and t % truncate == 0:
            h = h.detach()
        h = torch.tanh(p["E"][ids_t[:, t]] @ p["W"].T + h @ p["U"].T + p["b"])
        logits = h @ p["Vout"].T + p["c"]
        loss = loss + nn.functional.cross_entropy(logits, tg[:, t], reduction="sum")
    loss = loss / ids.size
    loss.backward()
    return loss.item(), {**{k: v.grad.numpy() for k, v in p.items()}, "h0": h0t.grad.numpy()}


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("truncate", [None, 1, 3])
def test_bptt_equals_autograd(seed, truncate):
    rng = np.random.default_rng(seed)
    V, D, H = (int(v) for v in rng.integers(2, 9, size=3))
    B, T = int(rng.integers(1, 4)), int(rng.integers(1, 9))
    model = NumpyRNNLM(V, D, H, seed=seed)
    ids, targets = rng.integers(0, V, (B, T)), rng.integers(0, V, (B, T))
    h0 = rng.normal(size=(B, H)) * 0.5
    loss, cache = model.forward(ids, targets, h0)
    grads = model.backward(cache, truncate=truncate)
    ref_loss, ref = autograd_reference(model, ids, targets, h0, truncate)
    assert loss == pytest.approx(ref_loss, rel=1e-12)
    for name, g in ref.items():
        np.testing.assert_allclose(grads[name], g, rtol=1e-6, atol=1e-12, err_msg=name)


def test_length_one_and_zero_state():
    model = NumpyRNNLM(5, 3, 4)
    loss, cache = model.forward([[2]], [[4]])
    assert np.all(cache["hs"][0] == 0)
    grads = model.backward(cache)
    ref_loss, ref = autograd_reference(model, np.array([[2]]), np.array([[4]]), np.zeros((1, 4)))
    np.testing.assert_allclose(grads["U"], ref["U"], atol=1e-12)  # zero: h0 = 0
    assert np.all(grads["U"] == 0)


def test_bad_shapes_are_named():
    model = NumpyRNNLM(5, 3, 4)
    with pytest.raises(ValueError, match=r"shape \[batch, time\]"):
        model.forward([1, 2], [2, 3])
    with pytest.raises(ValueError, match="token ids in"):
        model.forward([[1, 9]], [[2, 3]])
    with pytest.raises(ValueError, match="h0 must have shape"):
        model.forward([[1]], [[2]], h0=np.zeros((2, 4)))
    with pytest.raises(ValueError, match="truncate"):
        model.backward(model.forward([[1]], [[2]])[1], truncate=0)


def test_clipping_matches_torch():
    rng = np.random.default_rng(3)
    grads = {"a": rng.normal(size=(3, 4)) * 10, "b": rng.normal(size=5)}
    tensors = [torch.tensor(g, requires_grad=True) for g in grads.values()]
    for t, g in zip(tensors, grads.values()):
        t.grad = torch.tensor(g.copy())
    ref_norm = torch.nn.utils.clip_grad_norm_(tensors, 1.0)
    norm = clip_grad_norm(grads, 1.0)
    assert norm == pytest.approx(ref_norm.item())
    for t, g in zip(tensors, grads.values()):
        np.testing.assert_allclose(g, t.grad.numpy(), rtol=1e-12)


def test_sgd_with_hand_gradients_learns():
    rng = np.random.default_rng(0)
    model = NumpyRNNLM(4, 4, 16)
    ids = rng.integers(0, 4, (8, 10))
    targets = np.roll(ids, -1, axis=1)  # predict the next input: learnable
    first = model.forward(ids, targets)[0]
    for _ in range(200):
        loss, cache = model.forward(ids, targets)
        model.step(model.backward(cache), lr=0.5, clip=5.0)
    assert loss < 0.5 * first


# ------------------------------------------------------------------ cells vs torch
@pytest.mark.parametrize("ours, theirs", [(RNNCell, nn.RNNCell), (LSTMCell, nn.LSTMCell),
                                          (GRUCell, nn.GRUCell)])
def test_cells_equal_torch(ours, theirs):
    torch.manual_seed(0)
    for _ in range(5):
        n_in, H, B = (int(v) for v in torch.randint(1, 8, (3,)))
        ref = theirs(n_in, H).double()
        cell = ours(n_in, H).double()
        assert [n for n, _ in cell.named_parameters()] == [n for n, _ in ref.named_parameters()]
        cell.load_state_dict(ref.state_dict())
        x = torch.randn(B, n_in, dtype=torch.float64)
        state = torch.randn(B, H, dtype=torch.float64)
        if ours is LSTMCell:
            state = (state, torch.randn(B, H, dtype=torch.float64))
            for a, b in zip(cell(x, state), ref(x, state)):
                torch.testing.assert_close(a, b, rtol=0, atol=1e-10)
        else:
            torch.testing.assert_close(cell(x, state), ref(x, state), rtol=0, atol=1e-10)
        out = cell(x)  # zero initial state by default
        out_ref = ref(x)
        torch.testing.assert_close(out[0] if isinstance(out, tuple) else out,
                                   out_ref[0] if isinstance(out_ref, tuple) else out_ref,
                                   rtol=0, atol=1e-10)


@pytest.mark.parametrize("cell, module", [("rnn", nn.RNN), ("lstm", nn.LSTM), ("gru", nn.GRU)])
@pytest.mark.parametrize("layers, bidirectional", [(1, False), (2, True), (3, False)])
def test_stacked_and_bidirectional_equal_torch(cell, module, layers, bidirectional):
    torch.manual_seed(1)
    ref = module(3, 5, layers, batch_first=True, bidirectional=bidirectional).double()
    ours = StackedRNN(cell, 3, 5, layers, bidirectional).double()
    ours.load_torch(ref)
    x = torch.randn(2, 6, 3, dtype=torch.float64)
    out, state = ours(x)
    out_ref, state_ref = ref(x)
    torch.testing.assert_close(out, out_ref, rtol=0, atol=1e-10)
    if cell == "lstm":
        torch.testing.assert_close(state[0], state_ref[0], rtol=0, atol=1e-10)
        torch.testing.assert_close(state[1], state_ref[1], rtol=0, atol=1e-10)
    else:
        torch.testing.assert_close(state, state_ref, rtol=0, atol=1e-10)


def test_cell_errors():
    with pytest.raises(ValueError, match=r"input must have shape \[batch, 3\]"):
        LSTMCell(3, 4)(torch.zeros(2, 5))
    with pytest.raises(ValueError, match="hidden state must have shape"):
        GRUCell(3, 4)(torch.zeros(2, 3), torch.zeros(3, 4))
    with pytest.raises(ValueError, match="cell must be one of"):
        StackedRNN("transformer", 3, 4)
    with pytest.raises(ValueError, match="hidden_size"):
        RNNCell(3, 0)


# ------------------------------------------------------------------ RNN LM
def test_rnn_lm_batch_loss_ignores_padding():
    inputs, targets = lm_batch([[5, 6, 7], [8]], bos_id=2, eos_id=3)
    assert inputs.tolist() == [[2, 5, 6, 7], [2, 8, 0, 0]]
    assert targets.tolist() == [[5, 6, 7, 3], [8, 3, 0, 0]]
    torch.manual_seed(0)
    model = RNNLanguageModel(10, embed_dim=8, hidden_dim=16, cell="gru")
    loss, count = rnn_lm_loss(model, (inputs, targets))
    lps = rnn_lm_logprobs(model, inputs, targets)
    assert lps.shape == (6,) and count == 6
    assert loss.item() == pytest.approx(-lps.mean().item(), rel=1e-5)
    with pytest.raises(ValueError, match="cell must be"):
        RNNLanguageModel(10, cell="transformer")


def test_next_word_probs_and_agreement_scoring():
    from seqlab.data import Vocab, load_corpus
    from seqlab.data.toy import ToyLanguage
    from seqlab.rnn import rnn_next_word_probs

    lang = ToyLanguage()
    sentences = load_corpus("toy-lm", "test")[:200]
    vocab = Vocab.build([s.split() for s in sentences])
    torch.manual_seed(0)
    model = RNNLanguageModel(len(vocab), embed_dim=8, hidden_dim=16)
    prefixes = [["the", "cat"], ["some", "dogs", "that"]]
    probs = rnn_next_word_probs(model, vocab, prefixes, ["sleeps", "sleep"])
    ids = torch.tensor([[vocab.bos_id, vocab["some"], vocab["dogs"], vocab["that"]]])
    full = model(ids)[0][0, -1].softmax(-1)
    np.testing.assert_allclose(probs[1], full[[vocab["sleeps"], vocab["sleep"]]].detach().numpy(),
                               rtol=1e-5)

    gold = {}
    for sentence in sentences:
        i, number = lang.main_verb(sentence)
        gold[tuple(sentence.split()[:i])] = number

    def oracle(prefixes, words):  # knows the subject's number: always right
        return np.array([[float(w in lang.verbs(gold[tuple(p)])) for w in words]
                         for p in prefixes])

    def always_singular(prefixes, words):
        return np.array([[1.0 if w in lang.verbs("sg") else 0.0 for w in words] for _ in prefixes])

    acc, n = lang.agreement_accuracy(sentences, always_singular)
    numbers = [lang.main_verb(s)[1] for s in sentences
               if "that" in s.split()[: lang.main_verb(s)[0]]]
    assert n == len(numbers) and acc == pytest.approx(numbers.count("sg") / n)
    assert lang.agreement_accuracy(sentences, oracle)[0] == 1.0


def test_gradient_norms_through_time_match_autograd_on_torch_modules():
    from seqlab.rnn import hidden_gradient_norms

    torch.manual_seed(0)
    model = RNNLanguageModel(7, embed_dim=4, hidden_dim=6, cell="lstm").double()
    ids = [1, 2, 3, 4, 5, 6]
    norms = hidden_gradient_norms(model, ids)
    assert norms.shape == (5,) and (norms > 0).all()
    # the last hidden state's gradient is V^T (y_hat - y): check it directly
    logits, _ = model(torch.tensor([ids[:-1]]))
    out, (h, _) = model.rnn(model.embed(torch.tensor([ids[:-1]])))
    y = torch.softmax(model.out(out[0, -1]), -1).detach()
    y[ids[-1]] -= 1
    assert norms[-1] == pytest.approx((model.out.weight.T @ y).norm().item(), rel=1e-9)
    with pytest.raises(ValueError, match="at least 2"):
        hidden_gradient_norms(model, [1])


def test_gradient_norms_that_vanish_below_float32s_range_are_still_measured():
    """A float32 model whose gradient shrinks past 1e-45 (float32's smallest number): the norms
    are computed in float64, so the far end reads as tiny, not as exactly 0."""
    from seqlab.rnn import hidden_gradient_norms

    torch.manual_seed(0)
    model = RNNLanguageModel(7, embed_dim=4, hidden_dim=6, cell="rnn")
    with torch.no_grad():
        model.rnn.weight_hh_l0.mul_(0.3)
    norms = hidden_gradient_norms(model, [1 + t % 6 for t in range(80)])
    assert (norms > 0).all() and norms[0] < 1e-60 < norms[-1]
