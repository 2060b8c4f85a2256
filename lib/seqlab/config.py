"""One way to size a model: a frozen dataclass per model family, with keyword overrides.

Every model of a family takes ``(vocab size(s), config=None, **sizes)``: ``config`` replaces the
model's defaults, and each keyword in ``sizes`` replaces one field (``TransformerLM(V,
num_layers=4)``). Names are the library's one vocabulary: ``num_layers`` and ``num_heads`` (as
torch's ``nn.LSTM`` and ``nn.MultiheadAttention``), ``d_model`` for a Transformer's width,
``embed_dim``/``hidden_dim`` for an RNN's embeddings and state.

Older calls keep working for a while with a ``DeprecationWarning``: the keyword names
``n_heads``/``n_layers``, and sizes given by position, as lectures saved before the change
still pass them.
"""

from __future__ import annotations

import dataclasses
import warnings

RENAMED = {"n_heads": "num_heads", "n_layers": "num_layers"}


def renamed(owner: str, sizes: dict, stacklevel: int = 3) -> dict:
    """``sizes`` with the old keyword names replaced by the new ones, warning once per name."""
    sizes = dict(sizes)
    for old, new in RENAMED.items():
        if old in sizes:
            if new in sizes:
                raise TypeError(f"{owner} got both {old}= and {new}=; pass {new}= only")
            warnings.warn(f"{owner}({old}=...) is now {new}=...; the old name will be removed",
                          DeprecationWarning, stacklevel=stacklevel)
            sizes[new] = sizes.pop(old)
    return sizes


def resolve(cls, owner: str, config, legacy: tuple, sizes: dict, *, defaults,
            legacy_order: tuple[str, ...], stacklevel: int = 3):
    """The config a model is built with.

    ``config`` (an instance of ``cls``) or else ``defaults`` (the model's own), then each of
    ``sizes``; ``legacy`` holds sizes still given by position in the old ``legacy_order``
    (``config`` itself then holds the first of them). Warnings point ``stacklevel`` frames up:
    3 is the caller of the model that calls this.
    """
    if config is not None and not isinstance(config, cls):
        legacy, config = (config, *legacy), None
    if legacy:
        if len(legacy) > len(legacy_order):
            raise TypeError(f"{owner} takes at most {len(legacy_order)} sizes by position "
                            f"({', '.join(legacy_order)}), got {len(legacy)}")
        warnings.warn(f"{owner}: pass sizes by name or as a {cls.__name__} (sizes by position "
                      "will be removed)", DeprecationWarning, stacklevel=stacklevel)
        named = dict(zip(legacy_order, legacy))
        clash = sorted(set(named) & set(sizes))
        if clash:
            raise TypeError(f"{owner} got {clash} both by position and by name")
        sizes = {**named, **sizes}
    sizes = renamed(owner, sizes, stacklevel=stacklevel + 1)
    fields = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(sizes) - fields)
    if unknown:
        raise TypeError(f"{owner} got unexpected keyword(s) {unknown}; a size is one of "
                        f"{sorted(fields)}")
    return dataclasses.replace(config if config is not None else defaults, **sizes)
