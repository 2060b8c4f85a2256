"""Word, character and subword tokenizers."""

from __future__ import annotations

import re
from collections.abc import Iterable

from ..validate import integer
from .vocab import SPECIALS

_WORD = re.compile(r"\w+(?:'\w+)*|[^\w\s]", re.UNICODE)


def _text(text) -> str:
    if not isinstance(text, str):
        raise TypeError(f"text must be a str, got {type(text).__name__}")
    return text


def word_tokenize(text: str, lowercase: bool = False) -> list[str]:
    """Words and punctuation marks as separate tokens: "Hi, you!" -> ["Hi", ",", "you", "!"].

    Apostrophes inside a word stay ("don't", "l'aide"). Production tokenizers (Moses, spaCy)
    handle many more cases; this is enough for our corpora.
    """
    text = _text(text)
    return _WORD.findall(text.lower() if lowercase else text)


def char_tokenize(text: str) -> list[str]:
    """Every character is a token, spaces included."""
    return list(_text(text))


class SubwordTokenizer:
    """Byte-pair encoding trained with HuggingFace ``tokenizers`` (the library GPT-2 and
    RoBERTa tokenizers are built with). Word boundaries are kept as "▁" so decoding restores
    the spaces."""

    def __init__(self, tokenizer):
        self._tok = tokenizer

    @classmethod
    def train(cls, texts: Iterable[str], vocab_size: int = 1000, min_frequency: int = 2):
        from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

        if isinstance(texts, str):
            raise TypeError("texts must be an iterable of str (sentences), got one str")
        integer("vocab_size", vocab_size, 8)
        tok = Tokenizer(models.BPE(unk_token="<unk>"))
        tok.pre_tokenizer = pre_tokenizers.Metaspace()
        tok.decoder = decoders.Metaspace()
        trainer = trainers.BpeTrainer(
            vocab_size=vocab_size, min_frequency=min_frequency, special_tokens=list(SPECIALS),
            show_progress=False,
        )
        tok.train_from_iterator((_text(t) for t in texts), trainer=trainer)
        return cls(tok)

    @property
    def vocab_size(self) -> int:
        return self._tok.get_vocab_size()

    def tokenize(self, text: str) -> list[str]:
        return self._tok.encode(_text(text)).tokens

    def detokenize(self, pieces: list[str]) -> str:
        return self._tok.decoder.decode(pieces)

    def save(self, path) -> None:
        self._tok.save(str(path))

    @classmethod
    def load(cls, path) -> SubwordTokenizer:
        from tokenizers import Tokenizer

        return cls(Tokenizer.from_file(str(path)))
