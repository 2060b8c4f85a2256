"""Argument checks with one message format, used by every public function of seqlab:

    "<name> must be <what was expected>, got <what came>"

A value of the wrong type raises ``TypeError``, one of the right type out of range
``ValueError``; ``bool`` is never accepted as a number (``True`` is an ``int`` in Python, and
``steps=True`` is always a slip). Each check returns the value, so it can sit inside an
assignment.
"""

from __future__ import annotations


def integer(name: str, value, minimum: int | None = None, below: int | None = None) -> int:
    """``value`` if it is an int with ``minimum <= value < below`` (either bound optional)."""
    if minimum is not None and below is not None:
        expected = f"an int in [{minimum}, {below})"
    elif minimum is not None:
        expected = f"an int >= {minimum}"
    else:
        expected = "an int" if below is None else f"an int < {below}"
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be {expected}, got {type(value).__name__} {value!r}")
    if (minimum is not None and value < minimum) or (below is not None and value >= below):
        raise ValueError(f"{name} must be {expected}, got {value!r}")
    return value


def number(name: str, value, low: float | None = None, high: float | None = None, *,
           low_open: bool = False, high_open: bool = False) -> float:
    """``value`` if it is an int or float within the interval from ``low`` to ``high`` (closed
    ends unless ``low_open``/``high_open``; ``None`` for no bound)."""
    if low is not None and high is not None:
        expected = (f"a number in {'(' if low_open else '['}{low:g}, {high:g}"
                    f"{')' if high_open else ']'}")
    elif low is not None:
        expected = f"a number {'>' if low_open else '>='} {low:g}"
    elif high is not None:
        expected = f"a number {'<' if high_open else '<='} {high:g}"
    else:
        expected = "a number"
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{name} must be {expected}, got {type(value).__name__} {value!r}")
    too_low = low is not None and (value <= low if low_open else value < low)
    too_high = high is not None and (value >= high if high_open else value > high)
    if too_low or too_high or value != value:  # NaN is in no interval
        raise ValueError(f"{name} must be {expected}, got {value!r}")
    return value
