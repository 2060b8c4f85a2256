"""Masked language modelling: masking statistics on a million tokens, packing, a small BERT."""

import pytest
import torch

from seqlab import seed_everything
from seqlab.data import SPECIALS, Vocab
from seqlab.mlm import (
    IGNORE,
    BertClassifier,
    BertModel,
    BertTagger,
    classifier_loss,
    collate_pairs,
    fill_mask,
    mask_tokens,
    mlm_loss,
    nsp_pairs,
    pack_pair,
    pretrain_loss,
    tagger_loss,
    tagging_batch,
)

VOCAB = Vocab([f"w{i}" for i in range(5000)])


def corpus(rows=2000, length=500, seed=0):
    """Ordinary tokens framed by <cls> ... <sep>, padded on the right: 10^6 positions."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(len(SPECIALS), len(VOCAB), (rows, length), generator=g)
    lengths = torch.randint(length // 2, length + 1, (rows,), generator=g)
    ids[:, 0] = VOCAB.cls_id
    ids[torch.arange(rows), lengths - 1] = VOCAB.sep_id
    ids[torch.arange(length)[None] >= lengths[:, None]] = VOCAB.pad_id
    ids[:, 7] = VOCAB.bos_id  # a few more specials that must never be chosen
    ids[:, 9] = VOCAB.mask_id
    return ids


def test_masking_statistics_over_a_million_tokens():
    ids = corpus()
    assert ids.numel() == 10**6
    inputs, labels = mask_tokens(ids, VOCAB, generator=torch.Generator().manual_seed(1))
    special = torch.isin(ids, torch.arange(len(SPECIALS)))
    chosen = labels != IGNORE
    assert not (chosen & special).any()  # never a special token
    assert torch.equal(labels[chosen], ids[chosen])
    assert torch.equal(inputs[~chosen], ids[~chosen])  # nothing else changes
    share = chosen.sum().item() / (~special).sum().item()
    assert abs(share - 0.15) < 0.002
    n = chosen.sum().item()
    masked = (inputs[chosen] == VOCAB.mask_id).sum().item() / n
    kept = (inputs[chosen] == ids[chosen]).sum().item() / n
    randomised = 1 - masked - kept
    assert abs(masked - 0.8) < 0.005 and abs(kept - 0.1) < 0.005
    assert abs(randomised - 0.1) < 0.005
    replaced = inputs[chosen & (inputs != ids) & (inputs != VOCAB.mask_id)]
    assert (replaced >= len(SPECIALS)).all()  # random tokens are never specials


def test_exact_counts_and_determinism():
    ids = corpus(rows=50, length=40, seed=2)
    _, labels = mask_tokens(ids, VOCAB, exact=True, generator=torch.Generator().manual_seed(3))
    n = (ids != VOCAB.pad_id).sum(1)
    candidates = (~torch.isin(ids, torch.arange(len(SPECIALS)))).sum(1)
    want = torch.minimum(torch.clamp((0.15 * n.double()).round().long(), min=1), candidates)
    assert torch.equal((labels != IGNORE).sum(1), want)
    a = mask_tokens(ids, VOCAB, generator=torch.Generator().manual_seed(4))
    b = mask_tokens(ids, VOCAB, generator=torch.Generator().manual_seed(4))
    c = mask_tokens(ids, VOCAB, generator=torch.Generator().manual_seed(5))
    assert all(torch.equal(x, y) for x, y in zip(a, b))
    assert not torch.equal(a[1], c[1])


def test_bad_masking_arguments():
    ids = corpus(rows=2, length=10)
    for kwargs, match in [({"p": 0.0}, "p must"), ({"p": 1.0}, "p must"),
                          ({"mask_rate": 0.8, "random_rate": 0.3}, "at most 1"),
                          ({"mask_rate": -0.1}, "mask_rate")]:
        with pytest.raises(ValueError, match=match):
            mask_tokens(ids, VOCAB, **kwargs)
    with pytest.raises(TypeError, match="Vocab"):
        mask_tokens(ids, {"<pad>": 0})
    with pytest.raises(ValueError, match="LongTensor"):
        mask_tokens(ids.float(), VOCAB)


def test_packing_segments_and_truncation():
    vocab = Vocab(["a", "b", "c", "d"])
    a, b = vocab.encode(["a", "b", "c", "d", "a"]), vocab.encode(["c", "d"])
    ids, seg = pack_pair(a, b, vocab, max_len=8)
    assert ids == [vocab.cls_id, *a[:3], vocab.sep_id, *b, vocab.sep_id]  # the longer side lost 2
    assert seg == [0, 0, 0, 0, 0, 1, 1, 1]
    single, seg1 = pack_pair(a, None, vocab, max_len=4)
    assert single == [vocab.cls_id, *a[:2], vocab.sep_id] and seg1 == [0] * 4
    with pytest.raises(ValueError, match="max_len"):
        pack_pair(a, b, vocab, max_len=3)
    docs = [[[1, 1], [2, 2], [3, 3]] * 100, [[9, 9], [8, 8]] * 100]
    pairs = nsp_pairs(docs, seed=0)
    assert abs(sum(label for *_, label in pairs) / len(pairs) - 0.5) < 0.05
    successor = {1: 2, 2: 3, 3: 1, 9: 8, 8: 9}
    for a, b, label in pairs:
        if label == 1:  # 1 = "is next"
            assert b[0] == successor[a[0]]
        else:
            assert (a[0] < 8) != (b[0] < 8)  # from the other document
    ids, segs = collate_pairs([pack_pair(x, y, vocab, 16) for x, y, _ in pairs[:3]])
    assert ids.shape == segs.shape and ids.dtype == torch.long


def small_bert(vocab_size=30):
    seed_everything(0)
    return BertModel(vocab_size, d_model=16, num_heads=2, num_layers=2, max_len=20).eval()


def test_the_mlm_head_is_the_embedding_matrix():
    model = small_bert()
    big = [n for n, p in model.named_parameters() if p.shape == (30, 16)]
    assert big == ["embed.tokens.weight"]  # no second [V, d] matrix: the head reuses the embeddings
    hidden = model.encode(torch.tensor([[5, 8, 9, 6]]))
    with torch.no_grad():
        model.token_vectors[12] += torch.linspace(-1, 1, 16)  # a constant would cancel
    assert not torch.allclose(model.mlm_logits(hidden)[..., 12],
                              small_bert().mlm_logits(hidden)[..., 12])


def test_the_loss_ignores_unlabelled_positions():
    logits = torch.randn(2, 5, 7, requires_grad=True)
    labels = torch.full((2, 5), IGNORE)
    labels[0, 1], labels[1, 3] = 4, 2
    loss = mlm_loss(logits, labels)
    changed = logits.detach().clone()
    changed[0, 0] += 100.0
    changed[1, 4] -= 50.0
    assert mlm_loss(changed, labels).item() == pytest.approx(loss.item())
    loss.backward()
    assert logits.grad[0, 0].abs().sum() == 0 and logits.grad[0, 1].abs().sum() > 0


def test_padding_changes_nothing_for_real_tokens():
    model = small_bert()
    ids = torch.tensor([[5, 8, 9, 10, 6]])
    padded = torch.tensor([[5, 8, 9, 10, 6, 0, 0, 0]])
    a, nsp_a = model(ids)
    b, nsp_b = model(padded)
    torch.testing.assert_close(a, b[:, :5], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(nsp_a, nsp_b, atol=1e-5, rtol=1e-5)


def test_pretraining_learns_and_fill_mask_and_fine_tuning_run():
    from seqlab.train import fit

    vocab = Vocab(["a", "b", "c", "d", "e", "f"])
    # the sentence is always "a b c d e f": MLM must learn to fill any blank
    ids = torch.tensor([[vocab.cls_id, *vocab.encode(list("abcdef")), vocab.sep_id]] * 64)
    model = BertModel(len(vocab), d_model=32, num_heads=2, num_layers=1, max_len=10, dropout=0.0)
    g = torch.Generator().manual_seed(0)
    batches = []
    for _ in range(150):
        inputs, labels = mask_tokens(ids, vocab, p=0.3, generator=g)
        batches.append((inputs, torch.zeros_like(ids), labels))
    fit(model, torch.optim.Adam(model.parameters(), lr=3e-3), batches, pretrain_loss,
        device=torch.device("cpu"), progress=False)
    top = fill_mask(model, vocab, ["a", "b", "<mask>", "d", "e", "f"], k=3)
    assert top[0][0][0] == "c" and top[0][0][1] > 0.5
    assert [p for _, p in top[0]] == sorted((p for _, p in top[0]), reverse=True)
    assert all(t not in SPECIALS for t, _ in top[0])
    classifier = BertClassifier(model, n_classes=2)
    assert classifier.bert is model  # starts from the pretrained weights
    assert classifier(ids[:3]).shape == (3, 2)
    with pytest.raises(ValueError, match="<mask>"):
        fill_mask(model, vocab, ["a", "b"])


def test_exact_fill_posterior_is_bayes_rule_on_the_toy_language():
    import math

    import numpy as np

    from seqlab.data import ToyLanguage
    from seqlab.mlm import exact_fill_posterior

    toy = ToyLanguage()
    words = toy.vocab
    # main verb across a relative clause: only singular intransitive verbs fit, equally likely
    tokens = "the dog that the cats see <mask>".split()
    post = exact_fill_posterior(toy.logprob, tokens, 6, words)
    assert post.dtype == np.float64 and math.isclose(post.sum(), 1.0)
    support = {w for w, p in zip(words, post) if p > 0}
    assert support == {"sleeps", "runs", "sings", "waits"}
    assert np.allclose(post[post > 0], 0.25)
    # by hand: P(w | left, right) = P(left w right) / sum_v P(left v right)
    tokens = "some birds <mask> today".split()
    post = exact_fill_posterior(toy.logprob, tokens, 2, words)
    joint = np.exp([toy.logprob(f"some birds {w} today") for w in words])
    assert np.allclose(post, joint / joint.sum())
    # a determiner slot: the noun fixes the number, the adjective's presence the rest
    post = dict(zip(words, exact_fill_posterior(toy.logprob, "<mask> cat runs".split(), 0,
                                                 words)))
    assert {w for w, p in post.items() if p > 0} == {"the", "a", "this"}
    assert math.isclose(post["the"], 1 / 3)
    with pytest.raises(ValueError, match="impossible"):
        exact_fill_posterior(toy.logprob, "runs runs <mask>".split(), 2, words)
    with pytest.raises(ValueError, match="position"):
        exact_fill_posterior(toy.logprob, tokens, 4, words)


def test_fill_mask_probs_matches_fill_mask_and_batches():
    from seqlab.mlm import fill_mask_probs

    vocab = Vocab(["a", "b", "c", "d"])
    model = BertModel(len(vocab), d_model=16, num_heads=2, num_layers=1, max_len=10)
    model.train()  # fill_mask_probs must evaluate without dropout and restore the mode
    sentences = [["a", "<mask>", "c"], ["<mask>", "b"], ["d", "d", "d", "<mask>"]]
    probs = fill_mask_probs(model, vocab, sentences)
    assert probs.shape == (3, len(vocab)) and model.training
    assert torch.allclose(probs.sum(1), torch.ones(3))
    assert (probs[:, : len(SPECIALS)] == 0).all()
    for row, tokens in zip(probs, sentences):  # padding in the batch changes nothing
        top = fill_mask(model, vocab, tokens, k=4)[0]
        for token, p in top:
            assert row[vocab.stoi[token]].item() == pytest.approx(p, abs=1e-5)
    with pytest.raises(ValueError, match="exactly one"):
        fill_mask_probs(model, vocab, [["a", "<mask>", "<mask>"]])
    with pytest.raises(TypeError, match="token lists"):
        fill_mask_probs(model, vocab, "a <mask>")


def test_an_untrained_bert_starts_near_the_uniform_loss():
    """Embeddings start small (BERT's N(0, 0.02^2)): through the tied output matrix, torch's
    default N(0, 1) gave logits spread ~sqrt(d) and a first loss near 20 nats, not log V."""
    import math

    seed_everything(0)
    vocab_size = 51
    model = BertModel(vocab_size, d_model=64, num_heads=4, num_layers=2, max_len=24, dropout=0.0)
    ids = torch.randint(len(SPECIALS), vocab_size, (64, 10))
    loss = mlm_loss(model(ids)[0], ids).item()
    assert abs(loss - math.log(vocab_size)) < 0.3, loss
    assert model.token_vectors.std().item() == pytest.approx(0.02, rel=0.2)
    assert (model.token_vectors[model.pad_id] == 0).all()


def _small_bert(vocab_size=12, seed=0):
    seed_everything(seed)
    return BertModel(vocab_size, d_model=16, num_heads=2, num_layers=1, max_len=12, dropout=0.0)


def test_tagging_batch_aligns_tags_with_words_and_skips_specials():
    vocab = Vocab(["a", "b", "c"])
    ids, segments, tags = tagging_batch([vocab.encode(["a", "b"]), vocab.encode(["c"])],
                                        [[1, 0], [2]], vocab)
    assert ids.tolist() == [[vocab.cls_id, vocab["a"], vocab["b"], vocab.sep_id],
                            [vocab.cls_id, vocab["c"], vocab.sep_id, vocab.pad_id]]
    assert tags.tolist() == [[IGNORE, 1, 0, IGNORE], [IGNORE, 2, IGNORE, IGNORE]]
    assert torch.equal(segments, torch.zeros_like(ids))
    with pytest.raises(ValueError, match="sentence 1 has 1 tokens but 2 tags"):
        tagging_batch([[5, 6], [7]], [[0, 1], [0, 1]], vocab)
    with pytest.raises(ValueError, match="equal length"):
        tagging_batch([[5]], [[0], [1]], vocab)


def test_tagger_loss_is_the_mean_over_tagged_words_only():
    vocab = Vocab(["a", "b", "c"])
    tagger = BertTagger(_small_bert(len(vocab)), n_tags=3, dropout=0.0)
    batch = tagging_batch([vocab.encode(["a", "b", "c"]), vocab.encode(["b"])],
                          [[0, 1, 2], [1]], vocab)
    logits = tagger(batch[0])
    assert logits.shape == (2, 5, 3)
    picked = torch.cat([logits[0, 1:4], logits[1, 1:2]])
    expected = torch.nn.functional.cross_entropy(picked, torch.tensor([0, 1, 2, 1]))
    loss, count = tagger_loss(tagger, batch)
    torch.testing.assert_close(loss, expected)
    assert count == 4


def test_a_tagger_learns_a_tag_that_depends_on_the_context():
    """Tag 1 for a word right after "b", else 0: the word alone does not decide it."""
    from seqlab.train import fit

    vocab = Vocab(["a", "b", "c"])
    g = torch.Generator().manual_seed(0)
    words = torch.randint(len(SPECIALS), len(vocab), (64, 6), generator=g).tolist()
    tags = [[int(i > 0 and s[i - 1] == vocab["b"]) for i in range(len(s))] for s in words]
    batch = tagging_batch(words, tags, vocab)
    tagger = BertTagger(_small_bert(len(vocab)), n_tags=2, dropout=0.0)
    fit(tagger, torch.optim.Adam(tagger.parameters(), lr=1e-2), [batch] * 150, tagger_loss,
        device=torch.device("cpu"), progress=False)
    with torch.no_grad():
        right = (tagger(batch[0]).argmax(-1) == batch[2])[batch[2] != IGNORE]
    assert right.float().mean() > 0.98


@pytest.mark.parametrize("head", ["classifier", "tagger"])
def test_feature_based_training_moves_only_the_new_layers(head):
    from seqlab.train import fit

    vocab = Vocab(["a", "b", "c"])
    bert = _small_bert(len(vocab))
    before = {name: w.clone() for name, w in bert.named_parameters()}
    ids = torch.tensor([[vocab.cls_id, *vocab.encode(["a", "b", "c"]), vocab.sep_id]] * 4)
    if head == "classifier":
        model, loss = BertClassifier(bert, 2, freeze=True), classifier_loss
        batch = (ids, torch.zeros_like(ids), torch.tensor([0, 1, 0, 1]))
    else:
        model, loss = BertTagger(bert, 2, freeze=True), tagger_loss
        batch = tagging_batch([ids[0, 1:4].tolist()] * 4, [[0, 1, 0]] * 4, vocab)
    trainable = [w for w in model.parameters() if w.requires_grad]
    head_weights = [w.clone() for w in model.head.parameters()]
    fit(model, torch.optim.Adam(trainable, lr=1e-2), [batch] * 3, loss,
        device=torch.device("cpu"), progress=False)
    moved = {name for name, w in bert.named_parameters() if not torch.equal(w, before[name])}
    assert moved == ({"pooler.weight", "pooler.bias"} if head == "classifier" else set())
    assert all(not torch.equal(a, b) for a, b in zip(head_weights, model.head.parameters()))
    assert model.training and bert.training  # evaluation mode only while reading features


def test_fine_tuning_trains_the_encoder_and_freeze_must_be_a_bool():
    vocab = Vocab(["a", "b"])
    bert = _small_bert(len(vocab))
    tagger = BertTagger(bert, 2)
    assert all(w.requires_grad for w in bert.parameters())
    assert not tagger.freeze and tagger.bert is bert
    with pytest.raises(TypeError, match="freeze must be True .* got 'yes'"):
        BertTagger(bert, 2, freeze="yes")
    with pytest.raises(TypeError, match="freeze must be True .* got 1"):
        BertClassifier(bert, 2, freeze=1)
    with pytest.raises(ValueError, match="n_tags must be an int >= 2, got 1"):
        BertTagger(bert, 1)
    with pytest.raises(TypeError, match="bert must be a BertModel, got Linear"):
        BertTagger(torch.nn.Linear(2, 2), 2)
