"""``seqlab.mlm.mask_tokens`` against Hugging Face's ``DataCollatorForLanguageModeling``.

Both pick positions among ordinary tokens only, each with probability p; they differ, by
design, in what a "random token" is: HF draws from the whole vocabulary (``len(tokenizer)``),
specials included, seqlab from the ordinary tokens only (see ``mask_tokens``).
"""

import torch
from tokenizers import Tokenizer
from tokenizers.models import WordLevel
from transformers import DataCollatorForLanguageModeling, PreTrainedTokenizerFast

from seqlab.data import Vocab
from seqlab.data.vocab import SPECIALS
from seqlab.mlm import IGNORE, mask_tokens


def setup(rows=400, length=12):
    vocab = Vocab.build([[f"w{i}" for i in range(13)]])
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=Tokenizer(WordLevel(vocab.stoi, unk_token="<unk>")),
        pad_token="<pad>", mask_token="<mask>", cls_token="<cls>", sep_token="<sep>",
        unk_token="<unk>")
    g = torch.Generator().manual_seed(0)
    words = torch.randint(len(SPECIALS), len(vocab), (rows, length - 2), generator=g)
    ids = torch.cat([torch.full((rows, 1), vocab.stoi["<cls>"]), words,
                     torch.full((rows, 1), vocab.stoi["<sep>"])], dim=1)
    ids[::3, -3:] = vocab.pad_id  # some padding, specials of another kind
    return vocab, tokenizer, ids


def test_both_choose_only_ordinary_positions_but_only_hf_draws_specials_at_random():
    vocab, tokenizer, ids = setup()
    special = ids < len(SPECIALS)
    collator = DataCollatorForLanguageModeling(tokenizer, mlm_probability=0.5,
                                               mask_replace_prob=0.0, random_replace_prob=1.0,
                                               return_tensors="pt")
    torch.manual_seed(0)
    batch = collator([{"input_ids": row, "special_tokens_mask": s.long().tolist()}
                      for row, s in zip(ids.tolist(), special)])
    ours_inputs, ours_labels = mask_tokens(ids, vocab, p=0.5, mask_rate=0.0, random_rate=1.0,
                                           generator=torch.Generator().manual_seed(1))
    for name, inputs, labels in [("HF", batch["input_ids"], batch["labels"]),
                                 ("seqlab", ours_inputs, ours_labels)]:
        chosen = labels != IGNORE
        assert not (chosen & special).any(), f"{name} chose a special position"
        assert torch.equal(labels[chosen], ids[chosen])
        rate = chosen.sum() / (~special).sum()
        assert abs(rate - 0.5) < 0.03, (name, float(rate))  # 4,000 draws: sd 0.008
        assert torch.equal(inputs[~chosen], ids[~chosen])
    hf_random = batch["input_ids"][batch["labels"] != IGNORE]
    ours_random = ours_inputs[ours_labels != IGNORE]
    # HF: a random replacement is special with probability 7/20; here never
    share = (hf_random < len(SPECIALS)).double().mean()
    assert abs(share - len(SPECIALS) / len(vocab)) < 0.05, float(share)
    assert not (ours_random < len(SPECIALS)).any()
    counts = torch.bincount(ours_random - len(SPECIALS), minlength=len(vocab) - len(SPECIALS))
    assert counts.min() > 0.7 * counts.float().mean()  # uniform over the ordinary tokens
