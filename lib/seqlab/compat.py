"""Names that moved to another module, for copies of the lectures saved before they moved: each
old name still works, with a ``DeprecationWarning`` saying where it lives now. Nothing in the
course uses them; a module that lost names declares them here and imports nothing for them."""

from __future__ import annotations

import importlib
import warnings


def moved(module: str, names: dict[str, str]):
    """A module-level ``__getattr__`` (PEP 562) for ``module`` that finds each old name of
    ``names`` (old name -> the seqlab module it moved to) where it lives now."""

    def __getattr__(name: str):
        if name in names:
            warnings.warn(f"{module}.{name} moved to seqlab.{names[name]}.{name}",
                          DeprecationWarning, stacklevel=2)
            return getattr(importlib.import_module(f"seqlab.{names[name]}"), name)
        raise AttributeError(f"module {module!r} has no attribute {name!r}")

    return __getattr__
