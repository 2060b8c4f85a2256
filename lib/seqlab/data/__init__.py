"""Data for the course: toy worlds with exact answers, real corpora, vocabularies, batching."""

from .batching import bucket_batches, lm_windows, pad_batch, padding_mask
from .corpora import CORPORA, PARALLEL, load_corpus, load_parallel, parse_tatoeba
from .download import ChecksumError, DownloadError, RemoteFile, data_home, ensure
from .tokenize import SubwordTokenizer, char_tokenize, word_tokenize
from .toy import (
    Pair,
    ToyLanguage,
    ToyTranslation,
    addition_task,
    copy_task,
    reverse_task,
    sort_task,
)
from .vocab import SPECIALS, Vocab

__all__ = [
    "CORPORA", "PARALLEL", "SPECIALS", "ChecksumError", "DownloadError", "Pair", "RemoteFile",
    "SubwordTokenizer", "ToyLanguage", "ToyTranslation", "Vocab", "addition_task",
    "bucket_batches", "char_tokenize", "copy_task", "data_home", "ensure", "lm_windows",
    "load_corpus", "load_parallel", "pad_batch", "padding_mask", "parse_tatoeba", "reverse_task",
    "sort_task", "word_tokenize",
]
