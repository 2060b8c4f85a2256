"""One message format for every argument check: '<name> must be <expected>, got <value>'; the
wrong type is a TypeError, the right type out of range a ValueError, and bool is no number."""

import math

import pytest

from seqlab.validate import integer, number


def test_integers():
    assert integer("steps", 3, 1) == 3 and integer("seed", 0, 0, below=2**32) == 0
    with pytest.raises(ValueError, match=r"^steps must be an int >= 1, got 0$"):
        integer("steps", 0, 1)
    with pytest.raises(TypeError, match=r"^steps must be an int >= 1, got bool True$"):
        integer("steps", True, 1)
    with pytest.raises(TypeError, match=r"^k must be an int, got float 1.5$"):
        integer("k", 1.5)
    with pytest.raises(ValueError, match=r"^position must be an int in \[0, 3\), got 3$"):
        integer("position", 3, 0, below=3)


def test_numbers():
    assert number("p", 1, 0, 1, low_open=True) == 1 and number("tau", 0.5) == 0.5
    with pytest.raises(ValueError, match=r"^p must be a number in \(0, 1\], got 0$"):
        number("p", 0, 0, 1, low_open=True)
    with pytest.raises(ValueError, match=r"^mass must be a number in \(0, 1\), got 1$"):
        number("mass", 1, 0, 1, low_open=True, high_open=True)
    with pytest.raises(ValueError, match=r"^clip must be a number > 0, got nan$"):
        number("clip", math.nan, 0, low_open=True)
    with pytest.raises(TypeError, match=r"^temperature must be a number, got str '1'$"):
        number("temperature", "1")
    with pytest.raises(TypeError, match="got bool False"):
        number("dropout", False, 0, 1)
