"""Show the library's real source in a notebook, so lectures never paste a copy that drifts."""

from __future__ import annotations

import inspect


def source_of(obj) -> str:
    """The source code of a function, class or module, as a string."""
    try:
        return inspect.getsource(obj)
    except (TypeError, OSError) as err:
        raise TypeError(f"show_source needs a function, class or module, got {obj!r}") from err


def show_source(obj) -> None:
    """Display the source of a seqlab function or class (syntax-highlighted in Jupyter)."""
    code = source_of(obj)
    try:
        from IPython.display import Markdown, display
    except ImportError:  # plain Python: print it
        print(code)
        return
    display(Markdown(f"```python\n{code}```"))
