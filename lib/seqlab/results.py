"""Headline numbers of a notebook run, written where CI and ``make course`` can read them, and
the claims a lecture makes about them: each threshold is written once, in the lecture's
``claim``, and the lecture's robustness sweep over seeds and thread counts reads it from the run
(``seqlab.measured`` ships what the sweep found)."""

from __future__ import annotations

import json
import math
import operator
import os
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

OPS: dict[str, Callable[[float, float], bool]] = {
    "<": operator.lt, "<=": operator.le, ">": operator.gt, ">=": operator.ge}


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


def _update(change: Callable[[dict], None]) -> None:
    """Apply ``change`` to ``$SEQLAB_RESULTS/<notebook stem>.json``, rewritten atomically (a crash
    mid-write never leaves half a JSON document); nothing when ``SEQLAB_RESULTS`` is unset."""
    folder = os.environ.get("SEQLAB_RESULTS")
    if not folder:
        return
    path = Path(folder) / f"{_notebook_stem()}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    data = json.loads(path.read_text()) if path.exists() else {}
    change(data)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name, suffix=".tmp")
    with os.fdopen(fd, "w") as handle:
        json.dump(data, handle, indent=2, sort_keys=True)
    os.replace(tmp, path)


def _name(name) -> str:
    if not isinstance(name, str) or not name:
        raise TypeError(f"name must be a non-empty str, got {name!r}")
    return name


def record(name: str, value) -> None:
    """Store ``value`` under ``name`` in ``$SEQLAB_RESULTS/<notebook stem>.json``.

    Does nothing when ``SEQLAB_RESULTS`` is unset, so students never see files appear.
    """
    name, value = _name(name), _plain(value)
    _update(lambda data: data.__setitem__(name, value))


@dataclass(frozen=True)
class Check:
    """A result a lecture states: ``numbers[key] <op> threshold``."""

    key: str
    op: str  # "<", "<=", ">", ">="
    threshold: float

    def __post_init__(self):
        if self.op not in OPS:
            raise ValueError(f"op must be one of {sorted(OPS)}, got {self.op!r}")

    def holds(self, value: float) -> bool:
        return OPS[self.op](value, self.threshold)

    def worst(self, values: list[float]) -> float:
        """The value closest to failing: the largest for an upper bound, the smallest else."""
        return max(values) if self.op in ("<", "<=") else min(values)

    def __str__(self) -> str:
        return f"{self.key} {self.op} {self.threshold:g}"


def claim(name: str, value, op: str, threshold: float) -> None:
    """Assert what the lecture states, ``value <op> threshold``, and record it under "claims":
    the lecture's robustness sweep prints each claim's value and margin over seeds and thread
    counts from there, so the threshold is written here only.

    ``seqlab.claim("LSTM agreement accuracy", accuracy, ">", 0.9)`` fails with the name, the
    value and the threshold when the run does not bear the sentence out.
    """
    check = Check(_name(name), op, threshold)
    if hasattr(value, "item") and callable(value.item) and getattr(value, "ndim", 0) == 0:
        value = value.item()  # a numpy or torch scalar
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"value must be a number, got {type(value).__name__} {value!r}")
    _update(lambda data: data.setdefault("claims", {}).__setitem__(
        name, {"value": _plain(value), "op": op, "threshold": threshold}))  # NaN as "nan"
    if not check.holds(value):  # NaN holds nothing
        raise AssertionError(f"claim does not hold: {name}: got {value:.6g}, "
                             f"expected {op} {threshold:g}")
