"""Strict checks for assignment test cells.

Plain ``assert result == expected`` is fooled by an object whose ``__eq__`` always returns True,
and by answers that call the course library. These helpers check the exact type first, compare
real numbers only, and say what was expected without handing over the answer. ``own_work``
calls a student's function under the assignment's rules: graded, the sandbox enforces them by
construction (forbidden packages are absent there, torch's attention refuses: ``guard``) and
``own_work`` only checks that it was set up so; in a student's own kernel it applies the same
rules for the one call, as well as a kernel that is not a sandbox can. ``cpu_seconds`` and
``python_madd_seconds`` measure what a call costs in CPU time, never in wall time, so that a busy
machine changes no grade.
"""

from __future__ import annotations

import contextlib
import importlib.util
import math
import os
import sys
import time
from collections import Counter, OrderedDict, defaultdict

from . import guard
from .guard import ATTENTION_NAME

_REAL_DICTS = (dict, Counter, OrderedDict, defaultdict)

NO_FUSED_ATTENTION = (
    "torch.nn.functional.scaled_dot_product_attention",
    "torch.nn.functional.multi_head_attention_forward",
    "torch.nn.MultiheadAttention",
)
"""``own_work(fn, ..., forbidden_calls=NO_FUSED_ATTENTION)``: the answer must compute attention
itself. These names stand for all of torch's attention, whatever it is called: every operator
and Python function of torch that computes attention refuses (see ``guard``). Names, not
objects, so that importing this module never imports torch."""

LIBRARY_RULE = ("is not available while your notebook is graded: answers must be your own code "
                "(see the assignment rules)")
"""The one wording for a package an answer may not use, in the sandbox (where importing it
fails with this message) and in a student's own kernel (``own_work``)."""


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
    """The real source folder of a package ("seqlab"), symbolic links resolved."""
    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    return os.path.realpath(next(iter(spec.submodule_search_locations))) + os.sep


def _attention_rule(forbidden_calls) -> bool:
    """Whether ``forbidden_calls`` asks for attention computed by hand. Only torch's attention
    can be forbidden by call (``NO_FUSED_ATTENTION``, or any of torch's attention functions):
    it is the one rule enforced inside torch (``guard``); other code an answer may not use is
    a package, withheld as a whole (``forbidden``)."""
    if not isinstance(forbidden_calls, (tuple, list)):
        raise TypeError(f"forbidden_calls: expected NO_FUSED_ATTENTION or (), got "
                        f"{forbidden_calls!r}")
    for item in forbidden_calls:
        name = item if isinstance(item, str) else \
            f"{getattr(item, '__module__', '')}.{getattr(item, '__qualname__', '')}"
        if name.split(".")[0] != "torch" or not ATTENTION_NAME.search(name.rsplit(".", 1)[-1]):
            raise TypeError(f"forbidden_calls: only torch's attention (NO_FUSED_ATTENTION) can "
                            f"be forbidden by call, got {item!r}; to forbid other code, list its "
                            "package in forbidden= (the grader withholds it)")
    return bool(forbidden_calls)


@contextlib.contextmanager
def _local_rules(forbidden, attention: bool, name: str):
    """The rules in a student's own kernel, for one call: a profiler notes code run from the
    forbidden packages (compared by real path), and torch's attention refuses (``guard``)."""
    dirs = {p: d for p in forbidden if (d := _package_dir(p))}
    used: set[str] = set()
    files: dict[str, str] = {}

    def profiler(frame, event, arg):
        if event == "call":
            path = frame.f_code.co_filename
            if path not in files:
                real = os.path.realpath(path)
                files[path] = next((p for p, d in dirs.items() if real.startswith(d)), "")
            if files[path]:
                used.add(files[path])

    refusing = contextlib.nullcontext()
    if attention and "torch" in sys.modules:
        refusing = guard.refusing(sys.modules["torch"])
    previous = sys.getprofile()
    with refusing:
        sys.setprofile(profiler if dirs else previous)
        try:
            yield
        finally:
            sys.setprofile(previous)
    if used:
        raise AssertionError(f"{name} uses {', '.join(sorted(used))}, which {LIBRARY_RULE}")


def own_work(fn, *args, forbidden=("seqlab", "nltk"), forbidden_calls=(), **kwargs):
    """Call ``fn(*args, **kwargs)``, an answer that must be the student's own work: it may not
    run code of the ``forbidden`` packages (subpackages such as ``"torch.autograd"`` work too),
    nor torch's attention when ``forbidden_calls`` is ``NO_FUSED_ATTENTION``.

    Graded, the sandbox enforces this by construction: the forbidden packages are not there at
    all, and torch's attention refuses however it is reached. ``own_work`` then checks that the
    sandbox was set up so, and fails closed (AssertionError) if it was not. In a student's own
    kernel the same rules hold for this one call, as far as a plain kernel allows.
    """
    if not isinstance(forbidden, (tuple, list)) or not all(isinstance(p, str) for p in forbidden):
        raise TypeError(f"forbidden: expected a tuple of package names, got {forbidden!r}")
    attention = _attention_rule(forbidden_calls)
    remote = sys.modules.get("autograder.isolation.session")
    if remote is not None and isinstance(fn, remote.StudentObject):
        return remote.call_under_rules(fn, args, kwargs, forbidden=tuple(forbidden),
                                       attention=attention)
    with _local_rules(forbidden, attention, getattr(fn, "__name__", "your function")):
        return fn(*args, **kwargs)


def cpu_seconds(fn, *args, forbidden=("seqlab", "nltk"), forbidden_calls=(), **kwargs):
    """``(seconds, result)``: ``fn(*args, **kwargs)`` and the CPU time it took. CPU time, not
    wall time: other programs running beside it (other students' notebooks, a busy laptop)
    change the wall time, not this.

    Graded, ``fn`` is a student's function: it runs in the sandbox, under the rules ``own_work``
    checks (``forbidden``, ``forbidden_calls``), and the grader reads the CPU time of the
    sandbox's processes from the kernel, outside the sandbox, where nothing the student's code
    does can change it (``isolation.cputime``). Where the sandbox's cgroup does not count CPU
    time, the call must run in the processes the sandbox had before it: one during which a
    process of the sandbox started or ended cannot be metered, and fails. In a student's own
    kernel it is this process's CPU time (``time.process_time``), and the call runs without
    ``own_work``'s checks, which would slow it down.
    """
    if not isinstance(forbidden, (tuple, list)) or not all(isinstance(p, str) for p in forbidden):
        raise TypeError(f"forbidden: expected a tuple of package names, got {forbidden!r}")
    attention = _attention_rule(forbidden_calls)
    remote = sys.modules.get("autograder.isolation.session")
    if remote is not None and isinstance(fn, remote.StudentObject):
        value, usage = remote.call_under_rules(fn, args, kwargs, forbidden=tuple(forbidden),
                                               attention=attention, metered=True)
        if usage.others:
            raise AssertionError(
                f"{len(usage.others)} other process(es) of your notebook started or ended "
                "while the call was timed, and their CPU time cannot be counted here: compute "
                "it in the notebook's own process, without starting others")
        return usage.seconds, value
    start = time.process_time()
    value = fn(*args, **kwargs)
    return time.process_time() - start, value


_FASTEST_MADD = [math.inf]  # the fastest multiply-add this process has timed so far


def python_madd_seconds(terms: int = 100_000, repeat: int = 5) -> float:
    """CPU seconds of one multiply-add written in plain Python on this machine: the fastest of
    ``repeat`` dot products of ``terms`` floats held in lists, or of any such timing this
    process made before. A unit of cost that grows with the work done, whatever the machine
    and however busy it is: "a forward pass in plain Python" is the number of multiply-adds of
    a forward pass times this. Busy neighbours can slow a CPU's every instruction a little
    (sharing its caches, or its core as a hyperthread) and so make the unit larger, never
    smaller: keeping the fastest timing of the process makes that count once at most."""
    if type(terms) is not int or type(repeat) is not int or terms < 1 or repeat < 1:
        raise ValueError(f"terms and repeat must be positive ints, got {terms!r}, {repeat!r}")
    x = [0.5] * terms
    for _ in range(repeat):
        start = time.process_time()
        sum(a * b for a, b in zip(x, x))
        _FASTEST_MADD[0] = min(_FASTEST_MADD[0], (time.process_time() - start) / terms)
    return _FASTEST_MADD[0]
