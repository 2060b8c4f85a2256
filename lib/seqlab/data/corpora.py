"""``load_corpus`` and ``load_parallel``: one call for toy worlds and real corpora alike.

Real corpora are fetched through ``download.ensure`` (mirrors, checksums, cache). Where a source
has no official split, the split here is deterministic: contiguous for running text (so test
text never leaks into training), a fixed-seed shuffle for sentence pairs.
"""

from __future__ import annotations

import io
import random
import zipfile
from pathlib import Path

from .download import RemoteFile, ensure
from .toy import ToyLanguage, ToyTranslation

SPLITS = ("train", "valid", "test")
_GH = "https://raw.githubusercontent.com"
_JSD = "https://cdn.jsdelivr.net/gh"

TINYSHAKESPEARE = RemoteFile(
    "tinyshakespeare",
    "input.txt",
    "sha256:86c4e6aa9db7c042ec79f339dcb96d42b0075e16b8fc2e86bf0ca57e2dc565ed",
    (
        f"{_GH}/karpathy/char-rnn/master/data/tinyshakespeare/input.txt",
        f"{_JSD}/karpathy/char-rnn@master/data/tinyshakespeare/input.txt",
    ),
    homepage="https://github.com/karpathy/char-rnn",
    bundled="tinyshakespeare.txt.gz",
)

_WT2 = "pytorch/examples/main/word_language_model/data/wikitext-2"
_WT2_JSD = "pytorch/examples@main/word_language_model/data/wikitext-2"
WIKITEXT2 = {
    # The pytorch/examples copies of the official tokenized valid/test files, checked by SHA-256.
    "valid": RemoteFile(
        "wikitext-2",
        "valid.txt",
        "sha256:f0737ed31fc1329026e95cb8b98e19c2a182c39c240ab909dc31abf2f8af58e8",
        (f"{_GH}/{_WT2}/valid.txt", f"{_JSD}/{_WT2_JSD}/valid.txt"),
        homepage="https://github.com/pytorch/examples/tree/main/word_language_model",
    ),
    "test": RemoteFile(
        "wikitext-2",
        "test.txt",
        "sha256:d790b833ef8cf03a90db7bf1271b7520b83c45ce07ba3c1a9699df81e239eca0",
        (f"{_GH}/{_WT2}/test.txt", f"{_JSD}/{_WT2_JSD}/test.txt"),
        homepage="https://github.com/pytorch/examples/tree/main/word_language_model",
    ),
    # Training text comes from the original release archive, whose SHA-1 is published (d2l).
    "train": RemoteFile(
        "wikitext-2",
        "wikitext-2-v1.zip",
        "sha1:3c914d17d80b1459be871a5039ac23e752a53cbe",
        (
            "https://s3.amazonaws.com/research.metamind.io/wikitext/wikitext-2-v1.zip",
            "https://wikitext.smerity.com/wikitext-2-v1.zip",
            "https://foxrelax.oss-cn-hangzhou.aliyuncs.com/ml/wikitext-2-v1.zip",
        ),
        homepage="https://huggingface.co/datasets/Salesforce/wikitext",
    ),
}
_WT2_TRAIN_MEMBER = "wikitext-2/wiki.train.tokens"

TATOEBA = RemoteFile(
    "tatoeba-fra-eng",
    "fra-eng.zip",
    "sha1:94646ad1522d915e7b0f9296181140edcf86a4f5",
    (
        "http://d2l-data.s3-accelerate.amazonaws.com/fra-eng.zip",
        "https://d2l-data.s3.amazonaws.com/fra-eng.zip",
    ),
    homepage="https://www.manythings.org/anki/ (any fra-eng export works with path=...)",
)
_TATOEBA_MEMBER = "fra-eng/fra.txt"
# 18,065 short pairs of an older manythings.org export, shipped so FAST mode has real pairs offline
TATOEBA_SMALL = RemoteFile(
    "tatoeba-fra-eng-small",
    "fra.txt",
    "sha256:c52ae3c5a2f6b3c96d985aad8e2f1aab814c6701cfa9face467989069624bcaa",
    (),
    homepage="https://www.manythings.org/anki/",
    bundled="tatoeba-fra-eng-small.txt.gz",
)

CORPORA = ("toy-lm", "tinyshakespeare", "wikitext-2")
PARALLEL = ("toy-mt", "tatoeba-fra-eng", "tatoeba-fra-eng-small")
_TOY_SIZES = {"train": 20000, "valid": 2000, "test": 2000}
_TOY_SEEDS = {"train": 0, "valid": 1, "test": 2}


def _check(name, split, known: tuple[str, ...], what: str) -> None:
    if not isinstance(name, str):
        raise TypeError(f"name must be a str, got {type(name).__name__}")
    if name not in known:
        raise ValueError(f"unknown {what} {name!r}; known: {', '.join(known)}")
    if split not in SPLITS:
        raise ValueError(f"unknown split {split!r}; expected one of {', '.join(SPLITS)}")


def _contiguous(lines: list[str], split: str, fractions=(0.9, 0.05)) -> list[str]:
    a = int(len(lines) * fractions[0])
    b = a + int(len(lines) * fractions[1])
    return {"train": lines[:a], "valid": lines[a:b], "test": lines[b:]}[split]


def _shuffled(items: list, split: str, seed: int = 0) -> list:
    items = list(items)
    random.Random(seed).shuffle(items)
    return _contiguous(items, split)


def _nonempty_lines(text: str) -> list[str]:
    return [line.strip() for line in text.splitlines() if line.strip()]


def _read_member(archive: Path, member: str) -> str:
    with zipfile.ZipFile(archive) as zf:
        return zf.read(member).decode("utf-8")


def parse_tatoeba(text: str) -> list[tuple[str, str]]:
    """(English, French) pairs from an Anki/Tatoeba export: 2 columns, or 3 with attribution."""
    pairs = []
    for number, line in enumerate(io.StringIO(text), start=1):
        line = line.rstrip("\n").replace("\u202f", " ").replace("\xa0", " ")
        if not line.strip():
            continue
        fields = line.split("\t")
        if len(fields) not in (2, 3):
            raise ValueError(
                f"line {number} of the Tatoeba file has {len(fields)} tab-separated fields; "
                "expected 2 (English, French) or 3 (with attribution)"
            )
        pairs.append((fields[0].strip(), fields[1].strip()))
    return pairs


def load_corpus(name: str, split: str = "train", path: str | Path | None = None) -> list[str]:
    """Sentences or lines of a monolingual corpus.

    ``name``: ``"toy-lm"`` (``ToyLanguage`` samples), ``"tinyshakespeare"`` (non-empty lines,
    contiguous 90/5/5 split; the package ships it, so it needs no network) or ``"wikitext-2"``
    (non-empty lines of the official split, already tokenized with ``<unk>``; a download).
    ``path`` reads your own copy of the file (for WikiText-2: of that split) instead of the
    verified one; it is not checksummed.
    """
    _check(name, split, CORPORA, "corpus")
    if name == "toy-lm":
        return ToyLanguage().sample(_TOY_SIZES[split], seed=_TOY_SEEDS[split])
    if name == "tinyshakespeare":
        file = Path(path) if path is not None else ensure(TINYSHAKESPEARE)
        return _contiguous(_nonempty_lines(file.read_text(encoding="utf-8")), split)
    if path is not None:
        return _nonempty_lines(Path(path).read_text(encoding="utf-8"))
    file = ensure(WIKITEXT2[split])
    if split == "train":
        return _nonempty_lines(_read_member(file, _WT2_TRAIN_MEMBER))
    return _nonempty_lines(file.read_text(encoding="utf-8"))


def load_parallel(
    name: str, split: str = "train", path: str | Path | None = None
) -> list[tuple[str, str]]:
    """(source, target) sentence pairs.

    ``name``: ``"toy-mt"`` (``ToyTranslation`` pairs with their canonical reference; use
    ``ToyTranslation().sample`` for all references and alignments), ``"tatoeba-fra-eng"``
    (English -> French, fixed-seed shuffle then 90/5/5; a download) or
    ``"tatoeba-fra-eng-small"`` (18,065 short pairs the package ships, split the same way).
    ``path`` reads your own export (``fra.txt``, two or three columns) instead of the verified
    copy.
    """
    _check(name, split, PARALLEL, "parallel corpus")
    if name == "toy-mt":
        pairs = ToyTranslation().sample(_TOY_SIZES[split] // 2, seed=10 + _TOY_SEEDS[split])
        return [(p.source, p.references[0]) for p in pairs]
    if path is not None:
        text = Path(path).read_text(encoding="utf-8")
    elif name == "tatoeba-fra-eng-small":
        text = ensure(TATOEBA_SMALL).read_text(encoding="utf-8")
    else:
        text = _read_member(ensure(TATOEBA), _TATOEBA_MEMBER)
    return _shuffled(parse_tatoeba(text), split)
