import pytest
import torch

from seqlab.data import (
    SPECIALS,
    SubwordTokenizer,
    Vocab,
    bucket_batches,
    char_tokenize,
    lm_windows,
    load_corpus,
    pad_batch,
    padding_mask,
    word_tokenize,
)


def test_specials_come_first_and_pad_is_zero():
    vocab = Vocab.build([["b", "a", "b"]])
    assert vocab.itos[: len(SPECIALS)] == list(SPECIALS) and vocab.pad_id == 0
    ids = [vocab.pad_id, vocab.unk_id, vocab.bos_id, vocab.eos_id, vocab.mask_id]
    assert ids == [0, 1, 2, 3, 4]  # existing ids never move
    assert (vocab.cls_id, vocab.sep_id) == (5, 6)
    assert vocab.itos[len(SPECIALS) :] == ["b", "a"]  # by frequency


def test_build_min_freq_max_size_and_ties():
    sents = [["x", "y", "z", "z", "w"], ["y", "z"]]
    assert Vocab.build(sents).itos[len(SPECIALS) :] == ["z", "y", "w", "x"]  # ties alphabetical
    assert Vocab.build(sents, min_freq=2).itos[len(SPECIALS) :] == ["z", "y"]
    assert Vocab.build(sents, max_size=1).itos[len(SPECIALS) :] == ["z"]
    with pytest.raises(ValueError, match="min_freq"):
        Vocab.build(sents, min_freq=0)
    with pytest.raises(TypeError, match="tokenized sentences"):
        Vocab.build(["a sentence"])


def test_encode_decode_roundtrip_and_unknowns():
    vocab = Vocab.build([["the", "cat", "sat"]])
    ids = vocab.encode(["the", "dog", "sat"], bos=True, eos=True)
    assert ids[0] == vocab.bos_id and ids[-1] == vocab.eos_id and ids[2] == vocab.unk_id
    assert vocab.decode(ids) == ["the", "<unk>", "sat"]
    assert vocab.decode(ids + [vocab["cat"]]) == ["the", "<unk>", "sat"]  # stops at <eos>
    assert vocab.decode(ids, skip_specials=False)[0] == "<bos>"
    with pytest.raises(ValueError, match="outside the vocabulary"):
        vocab.decode([99])


@pytest.mark.parametrize("bad", ["the cat", [1, 2], None, ["ok", 3]])
def test_encode_rejects_non_string_tokens(bad):
    with pytest.raises(TypeError, match="encode expects"):
        Vocab.build([["ok"]]).encode(bad)


def test_word_and_char_tokenizers():
    assert word_tokenize("Hi, you! Don't stop.") == ["Hi", ",", "you", "!", "Don't", "stop", "."]
    assert word_tokenize("À l'aide !", lowercase=True) == ["à", "l'aide", "!"]
    assert char_tokenize("ab c") == ["a", "b", " ", "c"]
    with pytest.raises(TypeError, match="text must be a str"):
        word_tokenize(["a"])


def test_subword_tokenizer_roundtrip(tmp_path):
    texts = load_corpus("toy-lm")[:3000]
    tok = SubwordTokenizer.train(texts, vocab_size=120)
    assert tok.vocab_size <= 120
    pieces = tok.tokenize("the quiet teachers that a dog sees sing")
    assert len(pieces) >= 7 and tok.detokenize(pieces) == "the quiet teachers that a dog sees sing"
    tok.save(tmp_path / "bpe.json")
    loaded = SubwordTokenizer.load(tmp_path / "bpe.json")
    assert loaded.tokenize("the cat") == tok.tokenize("the cat")
    with pytest.raises(TypeError):
        SubwordTokenizer.train("one string")


def test_pad_batch_and_mask():
    ids, lengths = pad_batch([[5, 6, 7], [8], []], pad_id=0)
    assert ids.tolist() == [[5, 6, 7], [8, 0, 0], [0, 0, 0]] and lengths.tolist() == [3, 1, 0]
    mask = padding_mask(lengths)
    assert mask.tolist() == [[True] * 3, [True, False, False], [False] * 3]
    assert padding_mask(lengths, max_len=5).shape == (3, 5)
    with pytest.raises(ValueError, match="shorter than the longest"):
        padding_mask(lengths, max_len=2)
    with pytest.raises(ValueError, match="empty"):
        pad_batch([])
    with pytest.raises(TypeError):
        pad_batch(torch.zeros(2, 2))


def test_buckets_cover_everything_once_with_similar_lengths():
    lengths = [(i * 37) % 50 + 1 for i in range(1000)]
    batches = bucket_batches(lengths, batch_size=32, seed=1)
    flat = sorted(i for b in batches for i in b)
    assert flat == list(range(1000))
    spread = max(max(lengths[i] for i in b) - min(lengths[i] for i in b) for b in batches)
    assert spread <= 2
    assert batches == bucket_batches(lengths, batch_size=32, seed=1)
    with pytest.raises(ValueError, match="batch_size"):
        bucket_batches(lengths, batch_size=0)


def test_lm_windows_shift_targets_by_one_and_are_repeatable():
    ids = list(range(10, 110))  # token i is followed by i + 1
    batches = lm_windows(ids, block_size=8, batch_size=4, n_batches=5, seed=3)
    assert len(batches) == 5
    for inputs, targets in batches:
        assert inputs.shape == targets.shape == (4, 8) and inputs.dtype == torch.long
        assert torch.equal(targets, inputs + 1)
        assert torch.equal(inputs[:, 1:], inputs[:, :-1] + 1)  # contiguous windows
    again = lm_windows(ids, block_size=8, batch_size=4, n_batches=5, seed=3)
    assert all(torch.equal(a[0], b[0]) for a, b in zip(batches, again))
    assert not torch.equal(batches[0][0], lm_windows(ids, 8, 4, 5, seed=4)[0][0])
    assert max(int(x.max()) for _, x in batches) <= 109  # never reads past the end


def test_lm_windows_in_order_cover_the_stream_once():
    ids = list(range(5, 31))  # 26 tokens: windows of 5 start at 0, 5, 10, 15, 20
    batches = lm_windows(ids, block_size=5, batch_size=2)
    starts = [int(row[0]) - 5 for inputs, _ in batches for row in inputs]
    assert starts == [0, 5, 10, 15, 20] and [len(b[0]) for b in batches] == [2, 2, 1]
    with pytest.raises(ValueError, match="block_size"):
        lm_windows(ids, block_size=0, batch_size=2)
    with pytest.raises(ValueError, match="at least block_size"):
        lm_windows(ids[:5], block_size=5, batch_size=2)
    with pytest.raises(TypeError, match="sequence of token ids"):
        lm_windows("hello world", block_size=2, batch_size=2)
