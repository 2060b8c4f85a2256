"""Token <-> id mapping with the special tokens every model in the course shares."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence

from ..validate import integer

PAD, UNK, BOS, EOS, MASK = "<pad>", "<unk>", "<bos>", "<eos>", "<mask>"
CLS, SEP = "<cls>", "<sep>"  # BERT's sentence-pair markers (lecture 08), after the first five
SPECIALS = (PAD, UNK, BOS, EOS, MASK, CLS, SEP)
# Every Vocab puts the specials first, so their ids are the same in every vocabulary.
PAD_ID, BOS_ID, EOS_ID = SPECIALS.index(PAD), SPECIALS.index(BOS), SPECIALS.index(EOS)


class Vocab:
    """Specials first (``<pad>`` = 0, so zero-padding is padding), then tokens by frequency.

    Ties in frequency are broken alphabetically, so the same corpus always gives the same ids.
    """

    def __init__(self, tokens: Sequence[str] = ()):
        self.itos: list[str] = list(SPECIALS)
        for token in tokens:
            if not isinstance(token, str):
                raise TypeError(f"vocabulary tokens must be str, got {type(token).__name__}")
            if token not in SPECIALS and token not in self.itos:
                self.itos.append(token)
        self.stoi = {t: i for i, t in enumerate(self.itos)}

    @classmethod
    def build(
        cls, sentences: Iterable[Sequence[str]], min_freq: int = 1, max_size: int | None = None
    ) -> Vocab:
        """Count tokens in tokenized ``sentences``; keep those seen ``min_freq`` times or more,
        at most ``max_size`` of them (specials not counted)."""
        integer("min_freq", min_freq, 1)
        if max_size is not None:
            integer("max_size", max_size, 0)
        counts: Counter = Counter()
        for sentence in sentences:
            if isinstance(sentence, str):
                raise TypeError(
                    "Vocab.build expects tokenized sentences (lists of str), got a str; "
                    "tokenize first, e.g. word_tokenize(text)"
                )
            counts.update(sentence)
        kept = [t for t, c in counts.items() if c >= min_freq]
        kept.sort(key=lambda t: (-counts[t], t))
        return cls(kept[:max_size] if max_size is not None else kept)

    def __len__(self) -> int:
        return len(self.itos)

    def __contains__(self, token) -> bool:
        return token in self.stoi

    def __getitem__(self, token: str) -> int:
        return self.stoi.get(token, self.unk_id)

    pad_id = property(lambda self: self.stoi[PAD])
    unk_id = property(lambda self: self.stoi[UNK])
    bos_id = property(lambda self: self.stoi[BOS])
    eos_id = property(lambda self: self.stoi[EOS])
    mask_id = property(lambda self: self.stoi[MASK])
    cls_id = property(lambda self: self.stoi[CLS])
    sep_id = property(lambda self: self.stoi[SEP])

    def encode(self, tokens: Sequence[str], bos: bool = False, eos: bool = False) -> list[int]:
        """Ids of ``tokens`` (unknown ones -> ``<unk>``), optionally wrapped in <bos> ... <eos>."""
        if isinstance(tokens, str) or not isinstance(tokens, Sequence):
            raise TypeError(
                f"encode expects a list of str tokens, got {type(tokens).__name__}; "
                "tokenize the text first, e.g. vocab.encode(word_tokenize(text))"
            )
        ids = [self.bos_id] if bos else []
        for token in tokens:
            if not isinstance(token, str):
                raise TypeError(f"encode expects str tokens, got {type(token).__name__} {token!r}")
            ids.append(self.stoi.get(token, self.unk_id))
        if eos:
            ids.append(self.eos_id)
        return ids

    def decode(self, ids: Iterable[int], skip_specials: bool = True) -> list[str]:
        """Tokens of ``ids``; stops at the first <eos> and drops specials unless told not to."""
        out = []
        for i in ids:
            i = int(i)
            if not 0 <= i < len(self.itos):
                raise ValueError(f"id {i} is outside the vocabulary (size {len(self.itos)})")
            token = self.itos[i]
            if skip_specials and token == EOS:
                break
            if skip_specials and token in (PAD, BOS):
                continue
            out.append(token)
        return out
