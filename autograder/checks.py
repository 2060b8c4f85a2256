"""Strict checks for assignment test cells.

Plain ``assert result == expected`` is fooled by an object whose ``__eq__`` always returns True,
and by answers that call the course library. These helpers check the exact type first, compare
real numbers only, and say what was expected without handing over the answer.
"""

from __future__ import annotations

import importlib.util
import math
import sys
from collections import Counter, OrderedDict, defaultdict
from pathlib import Path

_REAL_DICTS = (dict, Counter, OrderedDict, defaultdict)


def expect_float(actual, expected: float, what: str, rel: float = 1e-9, abs_: float = 1e-12):
    """``actual`` must be a real number (not bool) close to ``expected``; inf and -inf exact."""
    import numpy as np

    if isinstance(actual, bool) or not isinstance(actual, (int, float, np.integer, np.floating)):
        raise AssertionError(f"{what} should be a float, got {type(actual).__name__}")
    actual = float(actual)
    if math.isinf(expected) or math.isinf(actual):
        assert actual == expected, f"{what} should be {expected}, got {actual}"
    else:
        assert math.isclose(actual, expected, rel_tol=rel, abs_tol=abs_), (
            f"{what} should be {expected:.6g}, got {actual:.6g}"
        )


def expect_counts(actual, expected: dict, what: str) -> None:
    """``actual`` must be a plain dict or Counter whose keys are tuples of str and whose values
    are ints, with exactly ``expected``'s non-zero entries."""
    if type(actual) not in _REAL_DICTS:
        raise AssertionError(f"{what} should be a dict or Counter, got {type(actual).__name__}")
    plain = {}
    for key, value in dict.items(actual):
        if type(key) is not tuple or any(type(k) is not str for k in key):
            raise AssertionError(f"{what}: keys should be tuples of str, got {key!r}")
        if type(value) is not int:
            raise AssertionError(f"{what}: counts should be int, got {type(value).__name__}")
        if value:
            plain[key] = value
    missing = [k for k in expected if k not in plain]
    extra = [k for k in plain if k not in expected]
    wrong = [k for k in expected if k in plain and plain[k] != expected[k]]
    assert not missing, f"{what}: {len(missing)} n-gram(s) missing, e.g. {missing[0]}"
    assert not extra, f"{what}: {len(extra)} unexpected n-gram(s), e.g. {extra[0]}"
    assert not wrong, (
        f"{what}: wrong count for {wrong[0]}: expected {expected[wrong[0]]}, got {plain[wrong[0]]}"
    )


def expect_array(actual, expected, what: str, rtol: float = 1e-7, atol: float = 1e-10) -> None:
    """``actual`` must be a NumPy array (not a tensor, not a list) of ``expected``'s shape, with
    a float dtype, close to ``expected``."""
    import numpy as np

    if type(actual) is not np.ndarray:
        raise AssertionError(f"{what} should be a numpy.ndarray, got {type(actual).__name__}")
    assert actual.shape == expected.shape, (
        f"{what} should have shape {expected.shape}, got {actual.shape}"
    )
    assert np.issubdtype(actual.dtype, np.floating), (
        f"{what} should hold floats, got dtype {actual.dtype}"
    )
    assert np.allclose(actual, expected, rtol=rtol, atol=atol), (
        f"{what}: values differ from the expected ones "
        f"(largest difference {np.abs(actual - expected).max():.3g})"
    )


def expect_tensor(actual, expected, what: str, rtol: float = 1e-7, atol: float = 1e-9) -> None:
    """``actual`` must be a torch.Tensor with ``expected``'s shape and dtype, and close to it."""
    import torch

    if type(actual) is not torch.Tensor:
        raise AssertionError(f"{what} should be a torch.Tensor, got {type(actual).__name__}")
    assert tuple(actual.shape) == tuple(expected.shape), (
        f"{what} should have shape {tuple(expected.shape)}, got {tuple(actual.shape)}"
    )
    assert actual.dtype == expected.dtype, (
        f"{what} should have dtype {expected.dtype}, got {actual.dtype}"
    )
    assert torch.allclose(actual.detach(), expected, rtol=rtol, atol=atol), (
        f"{what}: values differ from the expected ones "
        f"(largest difference {(actual.detach() - expected).abs().max().item():.3g})"
    )


def _package_dir(name: str) -> str | None:
    """The source folder of a package or subpackage ("seqlab", "torch.autograd")."""
    try:
        spec = importlib.util.find_spec(name)
    except ModuleNotFoundError:
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    return str(Path(next(iter(spec.submodule_search_locations))).resolve()) + "/"


def own_work(fn, *args, forbidden=("seqlab", "nltk"), forbidden_calls=(), **kwargs):
    """Call ``fn(*args, **kwargs)`` and fail if it runs code from a ``forbidden`` package.

    Catches the reference implementation however it was imported or renamed, because it
    watches which source files the call executes. Subpackages work too: forbidding
    ``"torch.autograd"`` rejects answers that let autograd compute a gradient asked for by hand.
    ``forbidden_calls`` lists compiled functions (e.g. torch's fused attention) that count too.
    """
    remote = sys.modules.get("autograder.remote")
    if remote is not None and isinstance(fn, remote.StudentObject):
        # graded in the sandbox: withheld packages are absent there; watch for the rest
        calls = [(getattr(f, "__module__", None) or "", f.__qualname__) for f in forbidden_calls]
        return fn._session.call(fn, args, kwargs, monitor=(list(forbidden), calls))
    dirs = {name: d for name in forbidden if (d := _package_dir(name))}
    used: set[str] = set()

    def profiler(frame, event, arg):
        if event == "c_call" and any(arg is f for f in forbidden_calls):
            used.add(getattr(arg, "__name__", repr(arg)))
        elif event == "call":
            filename = frame.f_code.co_filename
            for name, directory in dirs.items():
                if filename.startswith(directory):
                    used.add(name)

    previous = sys.getprofile()
    sys.setprofile(profiler)
    try:
        result = fn(*args, **kwargs)
    finally:
        sys.setprofile(previous)
    assert not used, (
        f"{getattr(fn, '__name__', 'your function')} calls {', '.join(sorted(used))}: answers "
        "must be your own code, not the library's reference implementation"
    )
    return result
