"""seqlab: the library behind the neural sequence models course.

Every lecture notebook imports from here and shows the source of what it teaches
(``seqlab.show_source``), so there is one implementation, tested once.

- One module per topic: ``lm`` (01), ``rnn`` (02), ``seq2seq`` (03), ``attention`` (04),
  ``transformer`` (05), ``decoding`` (06: searches and samplers on one protocol), ``bleu`` (07),
  ``mlm`` (08).
- Shared by the topics: ``data`` (toy worlds, corpora, ``Vocab``, which owns the special ids),
  ``losses`` (what a loss returns: its mean and its count of targets), ``train`` (the one
  training loop), ``metrics`` (scores of generated text beside BLEU), ``tensors`` (one walk over
  nested tensors, eval mode), ``validate`` (argument checks, one message format), ``config``
  (one way to size a model: a config dataclass plus keyword overrides, one vocabulary of size
  names), ``device`` (the device and the training precision, ``SEQLAB_PRECISION``),
  ``threads`` (how torch's CPU threads wait, set before torch loads), ``seeding``,
  ``results`` (what a run records, and ``claim``: a lecture's stated result, asserted and
  recorded), ``measured`` (what was measured once and ships: each lecture's claims over seeds
  and thread counts, and a full-mode run), ``viz``.
- Above them: ``experiments`` (what a lecture and its robustness script both run, with the
  lecture's thresholds) and ``course`` (runs the lectures headless, given their folder, with
  ``alt_text`` in each kernel, so figures carry their titles as alt text; points them at
  Colab). Model modules never import these, the training loop or the metrics (names that
  moved out of a model module are found for saved lectures through ``compat``, lazily).
"""

from . import threads  # noqa: F401  first: sets how torch's CPU threads wait, before torch loads
from .device import autocast, fast_mode, get_device
from .results import claim, record
from .seeding import seed_everything
from .source import show_source

__version__ = "0.1.0"
__all__ = ["autocast", "claim", "fast_mode", "get_device", "record", "seed_everything",
           "show_source", "__version__"]
