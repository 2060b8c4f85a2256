"""Headline numbers of a notebook run, written where CI and ``make course`` can read them."""

from __future__ import annotations

import json
import math
import os
import tempfile
from pathlib import Path


def _notebook_stem() -> str:
    """Stem of the running notebook: ``SEQLAB_NOTEBOOK`` (set by our runners), else 'session'."""
    return os.environ.get("SEQLAB_NOTEBOOK") or "session"


def _plain(value):
    """Turn numpy/torch scalars and containers into JSON-ready Python values."""
    if hasattr(value, "item") and callable(value.item) and getattr(value, "ndim", 0) == 0:
        value = value.item()
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)  # JSON has no inf/nan
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    raise TypeError(
        f"record() stores numbers, strings, lists and dicts of them; got {type(value).__name__}"
    )


def record(name: str, value) -> None:
    """Store ``value`` under ``name`` in ``$SEQLAB_RESULTS/<notebook stem>.json``.

    Does nothing when ``SEQLAB_RESULTS`` is unset, so students never see files appear. The file
    is rewritten atomically, so a crash mid-write never leaves half a JSON document.
    """
    if not isinstance(name, str) or not name:
        raise TypeError(f"name must be a non-empty str, got {name!r}")
    value = _plain(value)
    folder = os.environ.get("SEQLAB_RESULTS")
    if not folder:
        return
    path = Path(folder) / f"{_notebook_stem()}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    data = json.loads(path.read_text()) if path.exists() else {}
    data[name] = value
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name, suffix=".tmp")
    with os.fdopen(fd, "w") as handle:
        json.dump(data, handle, indent=2, sort_keys=True)
    os.replace(tmp, path)
