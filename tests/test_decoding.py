"""The decoding protocol: one greedy, one sampler, one scorer for every model that generates."""

import math

import pytest
import torch

from seqlab import decoding, seed_everything
from seqlab.data import Vocab
from seqlab.lm import FeedForwardLM, NGramLM, feedforward_logprobs, ngram_windows
from seqlab.rnn import RNNLanguageModel, lm_batch, rnn_lm_logprobs
from seqlab.seq2seq import build_model, seq2seq_batch

CORPUS = [s.split() for s in ["the cat sat", "the dog sat", "a cat ran", "the cat ran down",
                              "a dog sat down"]]


def rnn_lm(cell="lstm"):
    seed_everything(0)
    return RNNLanguageModel(12, embed_dim=8, hidden_dim=16, num_layers=2, cell=cell)


def toy_seq2seq(attention=True, cell="gru", score="additive"):
    seed_everything(1)
    return build_model(15, 13, bos_id=2, eos_id=3, attention=attention, score=score,
                       embed_dim=8, hidden_dim=16, cell=cell)


def sources():
    src = torch.tensor([[5, 6, 7, 8], [9, 10, 0, 0], [11, 5, 6, 0]])
    return src, torch.tensor([4, 2, 3])


def test_select_repeats_rows_of_an_lstm_state():
    model = rnn_lm("lstm").eval()
    prompt = torch.tensor([[2, 5, 6, 7], [2, 8, 9, 4]])
    state = model.start(prompt)
    h, c = state["hidden"]
    assert h.shape == (2, 2, 16) and c.shape == (2, 2, 16)  # batch first: [B, layers, H]
    chosen = model.select(state, torch.tensor([0, 0, 1, 1]))
    log_probs, _ = model.step(chosen, torch.tensor([7, 7, 4, 4]))
    alone, _ = model.step(state, torch.tensor([7, 4]))
    torch.testing.assert_close(log_probs, alone[[0, 0, 1, 1]])
    # select keeps every entry of a state, including ones a model adds (a cache, say)
    extra = decoding.select_state({**state, "cache": [torch.arange(2), "tag"]},
                                  torch.tensor([1, 1, 0]))
    assert extra["cache"][0].tolist() == [1, 1, 0] and extra["cache"][1] == "tag"


def test_one_tree_walk_moves_batches_and_selects_states():
    """``to_device`` and ``select_state`` are the same walk (``tensors.map_tensors``), so a
    batch or a state of any nesting (a namedtuple too) is handled alike by both."""
    from collections import namedtuple

    from seqlab.tensors import map_tensors
    from seqlab.train import to_device

    Pair = namedtuple("Pair", "keys values")
    tree = {"cache": [Pair(torch.arange(3), torch.arange(3) * 10)], "step": 4, "name": "x"}
    picked = decoding.select_state(tree, torch.tensor([2, 0]))
    assert isinstance(picked["cache"][0], Pair)
    assert picked["cache"][0].values.tolist() == [20, 0] and picked["step"] == 4
    moved = to_device(tree, torch.device("cpu"))
    assert moved["cache"][0].keys.tolist() == [0, 1, 2] and moved["name"] == "x"
    assert map_tensors(lambda t: t + 1, (torch.zeros(1), [torch.ones(1)]))[1][0].item() == 2


@pytest.mark.parametrize("attention,cell,score", [(False, "gru", "dot"),
                                                  (True, "lstm", "additive"),
                                                  (True, "gru", "bilinear")])
def test_greedy_is_the_argmax_of_the_teacher_forced_pass(attention, cell, score):
    """Greedy output y satisfies y_t = argmax P(. | y_<t, x) under the full forward pass."""
    model = toy_seq2seq(attention, cell, score).eval()
    src, lengths = sources()
    outputs = decoding.greedy(model, src, lengths, max_len=7)
    for i, ids in enumerate(outputs):
        finished = len(ids) < 7
        tgt_in = torch.tensor([[2, *ids]])
        logits = model(src[i : i + 1, : lengths[i]], lengths[i : i + 1], tgt_in)
        expected = logits.argmax(-1)[0].tolist()
        assert expected[: len(ids)] == ids
        if finished:
            assert expected[len(ids)] == model.eos_id


def test_greedy_of_an_ngram_lm_follows_its_distribution():
    lm = NGramLM(2, "kneser-ney").fit(CORPUS)
    words = decoding.greedy(lm, decoding.bos_prompt(lm.bos_id), max_len=10)[0]
    history = ["<bos>"]
    for w in [*(lm.vocab[i] for i in words), "<eos>"]:
        p = lm.distribution(history[-1:])
        assert lm.vocab[int(p.argmax())] == w
        history.append(w)


def test_sequence_logprob_of_an_ngram_lm_is_its_sentence_logprob():
    lm = NGramLM(3, "kneser-ney", discount="auto").fit(CORPUS)
    sentences = [["the", "cat", "sat"], [], ["a", "zebra", "ran", "down"]]
    prompts = torch.tensor([[lm.bos_id]] * 3)
    got = decoding.sequence_logprob(lm, prompts, targets=[lm.encode(s) for s in sentences])
    expected = torch.tensor([lm.sentence_logprob(s) for s in sentences], dtype=torch.float64)
    torch.testing.assert_close(got, expected)


def test_sequence_logprob_of_neural_lms_matches_their_scorers():
    vocab = Vocab.build(CORPUS)
    ids = [vocab.encode(s) for s in CORPUS]
    seed_everything(0)
    ffn = FeedForwardLM(len(vocab), 2, embed_dim=4, hidden_dim=8)
    contexts, targets = ngram_windows(ids, 2, vocab.bos_id, vocab.eos_id)
    per_token = feedforward_logprobs(ffn, contexts, targets).double()
    bounds = torch.tensor([0, *[len(s) + 1 for s in ids]]).cumsum(0)
    expected = torch.stack([per_token[a:b].sum() for a, b in zip(bounds[:-1], bounds[1:])])
    prompts = decoding.bos_prompt(vocab.bos_id, len(ids))
    got = decoding.sequence_logprob(ffn, prompts, targets=ids)
    torch.testing.assert_close(got, expected)

    rnn = RNNLanguageModel(len(vocab), embed_dim=8, hidden_dim=16, cell="gru")
    inputs, targets = lm_batch(ids, vocab.bos_id, vocab.eos_id)
    total = sum(rnn_lm_logprobs(rnn, inputs, targets).double())
    assert decoding.sequence_logprob(rnn, prompts, targets=ids).sum().item() == \
        pytest.approx(float(total), abs=1e-4)


def test_sequence_logprob_of_seq2seq_is_minus_the_summed_cross_entropy():
    model = toy_seq2seq(True, "gru", "additive").eval()
    src, lengths = sources()
    targets = [[4, 5, 6], [], [7, 8]]
    got = decoding.sequence_logprob(model, src, lengths, targets=targets)
    batch = seq2seq_batch([(s[:n].tolist(), t) for s, n, t in zip(src, lengths, targets)],
                          model.bos_id, model.eos_id)
    logits = model(*batch[:3])
    nll = torch.nn.functional.cross_entropy(logits.transpose(1, 2), batch[3], reduction="none",
                                            ignore_index=0)
    torch.testing.assert_close(got, -nll.sum(1).double(), atol=1e-5, rtol=1e-5)
    # and it is the sum of the step log-probs taken by hand
    state = model.start(src[:1, :4], lengths[:1])
    total, token = 0.0, torch.tensor([model.bos_id])
    for nxt in [4, 5, 6, model.eos_id]:
        lp, state = model.step(state, token)
        total += lp[0, nxt].item()
        token = torch.tensor([nxt])
    assert got[0].item() == pytest.approx(total, abs=1e-5)


def test_a_prompt_is_read_once_and_its_last_token_starts_decoding():
    model = rnn_lm("gru").eval()
    prompt = torch.tensor([[2, 5, 6, 7]])
    with torch.no_grad():
        full = model(prompt)[0][0, -1].log_softmax(-1)
        state = model.start(prompt)
        first, _ = model.step(state, state["next_token"])
    torch.testing.assert_close(first[0], full)


def test_prefix_adapter_and_sampling():
    # a model written in a few lines: the next token is always (last + 1) mod 6, <eos> = 5
    def next_logprobs(prefix):
        out = torch.full((prefix.shape[0], 6), -1e9)
        out[torch.arange(prefix.shape[0]), (prefix[:, -1] + 1) % 6] = 0.0
        return out.log_softmax(-1)

    counter = decoding.PrefixLM(next_logprobs, bos_id=0, eos_id=5)
    assert isinstance(counter, decoding.Generator)
    assert decoding.greedy(counter, torch.tensor([[0], [0]]), max_len=9) == [[1, 2, 3, 4]] * 2
    assert decoding.greedy(counter, torch.tensor([[0, 2]]), max_len=9) == [[3, 4]]
    lp = decoding.sequence_logprob(counter, torch.tensor([[0]]), targets=[[1, 2, 3, 4]])
    assert lp.item() == pytest.approx(0.0, abs=1e-6)
    draws = decoding.sample(counter, torch.tensor([[0]]), max_len=9,
                            generator=torch.Generator().manual_seed(0))
    assert draws == [[1, 2, 3, 4]]


def test_sampling_is_repeatable_and_ngram_generate_uses_it():
    lm = NGramLM(2, "add-k", k=0.5).fit(CORPUS)
    assert lm.generate(seed=3) == lm.generate(seed=3)
    assert all(w in lm.vocab and w != "<eos>" for w in lm.generate(seed=3, max_len=5))
    seen = {tuple(lm.generate(seed=s, max_len=4)) for s in range(20)}
    assert len(seen) > 5  # really sampling


def test_temperature_keeps_the_ranking():
    lp = torch.tensor([[0.0, -1.0, -3.0]]).log_softmax(-1)
    for t in (0.1, 1.0, 10.0):
        scaled = decoding.temperature_scale(lp, t)
        assert scaled.exp().sum().item() == pytest.approx(1.0)
        assert scaled.argsort().tolist() == lp.argsort().tolist()
    with pytest.raises(ValueError, match="greedy"):
        decoding.temperature_scale(lp, 0)


def test_bad_inputs_say_what_is_wrong():
    with pytest.raises(TypeError, match="decoding protocol"):
        decoding.greedy(object(), torch.tensor([[0]]))
    model = rnn_lm("gru")
    with pytest.raises(ValueError, match="begin with <bos>"):
        decoding.greedy(model, torch.tensor([[5, 6]]))
    with pytest.raises(ValueError, match="max_len"):
        decoding.greedy(model, decoding.bos_prompt(2), max_len=0)
    with pytest.raises(ValueError, match="rows"):
        decoding.sequence_logprob(model, decoding.bos_prompt(2, 2), targets=[[1]])


def test_decoding_leaves_the_model_in_training_mode():
    model = rnn_lm("gru").train()
    decoding.greedy(model, decoding.bos_prompt(2), max_len=3)
    assert model.training


def test_scheduled_sampling_flips_a_coin_per_token():
    model = toy_seq2seq(True, "gru", "dot").eval()
    src, lengths = sources()
    tgt_in = torch.tensor([[2, 4, 5, 6, 7], [2, 8, 9, 0, 0], [2, 7, 8, 9, 10]])
    with torch.no_grad():
        forced = model(src, lengths, tgt_in).log_softmax(-1)
        torch.testing.assert_close(model(src, lengths, tgt_in, teacher_forcing=1.0)
                                   .log_softmax(-1), forced)
        free = model(src, lengths, tgt_in, teacher_forcing=0.0)
        # free running reads the model's own argmax: its first step equals the forced one
        torch.testing.assert_close(free[:, 0], forced[:, 0], atol=1e-5, rtol=1e-5)
        greedy_ids = decoding.greedy(model, src, lengths, max_len=5)
    for i, ids in enumerate(greedy_ids):
        assert free[i].argmax(-1).tolist()[: len(ids)] == ids
    assert math.isfinite(free.sum().item())


def test_scheduled_sampling_mixes_gold_and_predicted_tokens_within_a_step(monkeypatch):
    model = toy_seq2seq(False, "gru", "dot").eval()
    seed_everything(3)
    src = torch.randint(4, 15, (200, 5))
    tgt_in = torch.cat([torch.full((200, 1), 2), torch.randint(4, 13, (200, 3))], dim=1)
    read = []
    step = model.step

    def spy(state, tokens):
        read.append(tokens)
        return step(state, tokens)

    monkeypatch.setattr(model, "step", spy)
    with torch.no_grad():
        model(src, torch.full((200,), 5), tgt_in, teacher_forcing=0.5)
    gold = (read[1] == tgt_in[:, 1]).float().mean().item()
    assert 0.35 < gold < 0.8  # about half the rows read the gold word at the same step


def test_a_float64_transformer_decodes_in_float64():
    """Cached steps equal the full forward pass to 1e-12: the step keeps the model's dtype."""
    from seqlab.transformer import TransformerLM, TransformerSeq2Seq

    seed_everything(0)
    lm = TransformerLM(11, d_model=16, num_heads=2, num_layers=2, max_len=16).double().eval()
    ids = torch.tensor([[2, 5, 6, 7, 8, 4], [2, 9, 4, 5, 6, 7]])
    with torch.no_grad():
        full = lm(ids)
        full = (full[0] if isinstance(full, tuple) else full).log_softmax(-1)
        state = lm.start(ids[:, :1])
        for t in range(ids.shape[1]):
            lp, state = lm.step(state, ids[:, t])
            assert lp.dtype == torch.float64
            torch.testing.assert_close(lp, full[:, t], atol=1e-12, rtol=0)
    s2s = TransformerSeq2Seq(9, 8, d_model=8, num_heads=2, num_layers=1, max_len=12).double().eval()
    src, lengths = torch.tensor([[5, 6, 7], [8, 5, 0]]), torch.tensor([3, 2])
    tgt_in = torch.tensor([[2, 4, 5, 6], [2, 7, 4, 4]])
    with torch.no_grad():
        full = s2s(src, lengths, tgt_in).log_softmax(-1)
        state = s2s.start(src, lengths)
        for t in range(tgt_in.shape[1]):
            lp, state = s2s.step(state, tgt_in[:, t])
            assert lp.dtype == torch.float64
            torch.testing.assert_close(lp, full[:, t], atol=1e-12, rtol=0)
