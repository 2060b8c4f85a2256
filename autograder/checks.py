"""Strict checks for assignment test cells.

Plain ``assert result == expected`` is fooled by an object whose ``__eq__`` always returns True,
and by answers that call the course library. These helpers check the exact type first, compare
real numbers only, and say what was expected without handing over the answer. ``own_work``
watches one call of a student's function for code it must not use (see ``watch``); the sandbox
runner loads a private copy of this module to watch graded calls the same way.
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import importlib.util
import math
import sys
import threading
import types
import warnings
from collections import Counter, OrderedDict, defaultdict
from pathlib import Path
from typing import NamedTuple

_REAL_DICTS = (dict, Counter, OrderedDict, defaultdict)

NO_FUSED_ATTENTION = (
    "torch.nn.functional.scaled_dot_product_attention",
    "torch.nn.functional.multi_head_attention_forward",
    "torch.nn.MultiheadAttention",
)
"""``own_work(fn, ..., forbidden_calls=NO_FUSED_ATTENTION)``: the answer must compute attention
itself. Naming torch's fused attention arms ``AttentionGuard`` (every aten attention kernel,
however it is reached); ``nn.MultiheadAttention`` and its functional form are watched as Python
code. Names, not objects, so that importing this module never imports torch."""

# Either name of torch's fused attention in ``forbidden_calls`` arms the AttentionGuard.
_FUSED = frozenset({"torch.nn.functional.scaled_dot_product_attention",
                    "torch._C._nn.scaled_dot_product_attention"})
_ATTENTION_RULE = "answers must compute attention themselves (no fused attention, no " \
                  "nn.MultiheadAttention)"
_LIBRARY_RULE = "answers must be your own code, not the library's reference implementation"
_DISABLED = "the fused-attention monitor was disabled during your function; answers must " \
            "compute attention themselves"


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
    except (ImportError, ValueError):  # ImportError: a withheld package's stub
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    return str(Path(next(iter(spec.submodule_search_locations))).resolve()) + "/"


def _call_name(item) -> str:
    """A forbidden call as the dotted name that crosses into the sandbox."""
    if isinstance(item, str):
        return item
    module, qualname = getattr(item, "__module__", None), getattr(item, "__qualname__", None)
    if not callable(item) or not isinstance(module, str) or not isinstance(qualname, str):
        raise TypeError(f"forbidden_calls: expected functions, classes or dotted names, got "
                        f"{item!r}")
    return f"{module}.{qualname}"


_RESOLVED: dict = {}


def _resolve(name: str):
    """What a dotted name ("torch.nn.MultiheadAttention") refers to, or None. Remembered: names
    resolved before student code runs (``attention_guard`` does NO_FUSED_ATTENTION's) stay
    bound to torch's own objects whatever a notebook assigns to ``torch.nn`` later."""
    if name not in _RESOLVED:
        first, *rest = name.split(".")
        try:
            target = importlib.import_module(first)
            for part in rest:
                target = getattr(target, part)
        except (ImportError, AttributeError):
            return None
        _RESOLVED[name] = target
    return _RESOLVED[name]


def _targets(names) -> tuple[dict, dict]:
    """({id: display name} of compiled functions, {code: display name} of Python code) that the
    forbidden names stand for; a class stands for all of its methods."""
    compiled, codes = {}, {}
    for name in names:
        obj = _resolve(name)
        shown = name.rsplit(".", 1)[-1]
        for f in vars(obj).values() if isinstance(obj, type) else [obj]:
            f = getattr(f, "__func__", f)  # staticmethod, classmethod
            if isinstance(f, types.FunctionType):
                codes[f.__code__] = shown
            elif isinstance(f, types.BuiltinFunctionType):
                compiled[id(f)] = shown
    return compiled, codes


class _Armed(NamedTuple):
    """One arming of the AttentionGuard."""

    lib: object  # torch.library.Library holding our kernels
    handle: object  # its registration handle
    used: list  # attention ops called since (the kernels append to it)
    before: tuple  # torch._C._dispatch_dump of each op, before arming
    dumps: tuple  # and right after
    kernel: object  # a handle on our kernel: torch invalidates it if the registration goes


class AttentionGuard:
    """Refuses torch's fused attention at the dispatcher for the length of one watched call.

    A profiler sees only the Python name a call went through; torch.ops.aten.*, torch._C._nn.*,
    the lower-level kernels (``_scaled_dot_product_flash_attention_for_cpu``, ...), vmap,
    TorchScript and nn.Module fast paths all end in torch's dispatcher instead. ``arm`` puts a
    kernel that notes the call and raises on top of every dispatch key (CPU, CUDA, Meta, the
    composite and autograd keys: whichever the installed torch registers) of every aten op whose
    name contains "attention"; ``disarm`` takes them off again, so outside graded calls (a
    student's own exploration, visible tests) torch behaves as usual.

    Fail closed: setting up requires every key of every such op to show our kernel and a call
    through the dispatcher to be refused. ``disarm`` reports the guard intact only if the
    registrations are exactly those armed, a call through the dispatcher is still refused, and a
    kernel handle taken when arming still works: torch invalidates such a handle for good once
    its registration is removed, so removing the guard and re-installing it, even the same
    kernels under the same handle, shows. Made before any student code runs (the sandbox runner
    does so at start), it keeps torch's own entry points, and stops torch from handing out
    attention kernels (``torch.library.get_kernel``): one fetched between graded calls could be
    called during one without the dispatcher.

    Limits: it runs in the student's process. Code written to forge the guard itself (digging
    its private state out of memory and rewriting it, ctypes) or native code that calls torch's
    C++ kernels directly is not caught; such code is deliberate and left to misconduct review.
    """

    _HEADER = ("name", "schema", "debug", "alias analysis kind")

    def __init__(self, torch):
        self._library = torch.library.Library
        self._dump = torch._C._dispatch_dump
        self._fetch = torch._C._dispatch_get_computed_kernel_for_dispatch_key
        self._keyset = torch._C._dispatch_keyset_full()
        self._canary_call = torch._C._nn.scaled_dot_product_attention
        self._canary_args = (torch.zeros(1, 1, 1),) * 3
        self.ops = tuple(sorted(op for op in torch._C._dispatch_get_all_op_names()
                                if op.startswith("aten::") and "attention" in op))
        self._site = f"registered at {__file__}:"
        fetch = self._fetch

        def get_kernel(op, key):
            if "attention" in str(op):
                raise RuntimeError("torch's attention kernels cannot be fetched while answers "
                                   "are checked")
            return fetch(op, key)

        torch._C._dispatch_get_computed_kernel_for_dispatch_key = get_kernel
        if not self.disarm(self.arm())[1]:  # a torch that cannot be guarded fails here, early
            raise RuntimeError("the guard did not stay in place")

    def _dumps(self) -> tuple[str, ...]:
        return tuple(self._dump(op) for op in self.ops)

    @classmethod
    def _active(cls, dump: str) -> dict[str, str]:
        """{dispatch key: its active registration} from ``torch._C._dispatch_dump``."""
        active = {}
        for line in dump.splitlines():
            key, _, registration = line.partition(": ")
            if registration and key not in cls._HEADER and not key.endswith(" (inactive)"):
                active[key.removesuffix("[alias]")] = registration
        return active

    @staticmethod
    def _refusal(op: str, used: list):
        def refuse(*args, **kwargs):
            used.append(op)
            raise RuntimeError(f"{op} is torch's fused attention, which answers may not use")

        return refuse

    def _canaries(self, armed: _Armed) -> bool:
        """Whether a call through the dispatcher, and one through the kernel handle taken when
        arming, both reach this arming's kernels (which then forget the calls)."""
        seen = len(armed.used)
        for call in (lambda: self._canary_call(*self._canary_args),
                     lambda: armed.kernel.call_boxed(self._keyset, *self._canary_args)):
            try:
                call()
            except Exception:
                pass
        refused = armed.used[seen:] == ["aten::scaled_dot_product_attention"] * 2
        del armed.used[seen:]
        return refused

    def arm(self) -> _Armed:
        """Refuse every attention kernel from now on (RuntimeError if torch does not let us).
        What is returned is immutable, so a notebook cannot swap in an arming of its own."""
        used: list[str] = []
        before = self._dumps()
        lib = self._library("aten", "IMPL")
        handle = lib.m
        try:
            with warnings.catch_warnings():  # "overriding a previously registered kernel"
                warnings.simplefilter("ignore")
                for op, dump in zip(self.ops, before):
                    for key in self._active(dump):
                        lib.impl(op.removeprefix("aten::"), self._refusal(op, used), key)
            armed = _Armed(lib, handle, used, before, self._dumps(),
                           self._fetch("aten::scaled_dot_product_attention", "CPU"))
            if not (all(self._active(now).get(key, "").startswith(self._site)
                        for dump, now in zip(before, armed.dumps) for key in self._active(dump))
                    and self._canaries(armed)):
                raise RuntimeError("torch did not take its kernels")
        except BaseException:
            lib._destroy()
            handle.reset()
            raise
        return armed

    def disarm(self, armed: _Armed) -> tuple[list[str], bool]:
        """Stop refusing; return (the attention ops called while armed, whether the guard was
        intact all along)."""
        intact = self._canaries(armed) and self._dumps() == armed.dumps
        armed.lib._destroy()
        armed.handle.reset()  # also when the notebook swapped the Library's handle
        return sorted(set(armed.used)), intact and self._dumps() == armed.before


@functools.cache
def attention_guard():
    """This process's AttentionGuard, or why there can be none (a string). Resolves
    NO_FUSED_ATTENTION too, so both happen before student code when called first."""
    try:
        import torch
    except ImportError:  # absent, or withheld from this sandbox (never imported then)
        return "torch is not available"
    for name in NO_FUSED_ATTENTION:
        _resolve(name)
    try:
        return AttentionGuard(torch)
    except Exception as err:
        return f"{type(err).__name__}: {err}"


@contextlib.contextmanager
def watch(forbidden=(), forbidden_calls=(), guard=None, name="your function"):
    """Watch one call of a student's function (``with watch(...): fn()``): it must not run code
    from the ``forbidden`` packages or call ``forbidden_calls`` (dotted names of functions or
    classes).

    A profiler watches packages and calls (``sys.setprofile``, and the thread hook, so threads
    started during the call are watched too). If the calls name torch's fused attention, the
    ``guard`` (an AttentionGuard, or why there is none) is armed for the call. On exit,
    AssertionError names what was used, or says that a monitor was switched off, removed or
    could not be set up: an answer that disables the watch scores 0, never a pass. The state of
    the watch lives in this generator's locals, where a notebook cannot swap it.
    """
    dirs = {n: d for n in forbidden if (d := _package_dir(n))}
    attention = not _FUSED.isdisjoint(forbidden_calls)
    compiled, codes = _targets(forbidden_calls)
    used: set[str] = set()
    switched_off: list[bool] = []

    def profiler(frame, event, arg):
        if event == "c_call":
            if id(arg) in compiled:
                used.add(compiled[id(arg)])
            elif arg is sys.setprofile:
                switched_off.append(True)
        elif event == "call":
            code = frame.f_code
            if code in codes:
                used.add(codes[code])
            for package, directory in dirs.items():
                if code.co_filename.startswith(directory):
                    used.add(package)

    armed = None
    if attention:
        try:
            if not isinstance(guard, AttentionGuard):
                raise RuntimeError(guard or "no guard")
            armed = guard.arm()
        except Exception as err:
            raise AssertionError(f"the fused-attention monitor could not be set up ({err}); "
                                 "answers must compute attention themselves") from None
    previous = sys.getprofile(), threading.getprofile()
    threading.setprofile(profiler)
    sys.setprofile(profiler)
    try:
        yield
    finally:
        off = bool(switched_off) or sys.getprofile() is not profiler
        sys.setprofile(previous[0])
        threading.setprofile(previous[1])
        problems = []
        if armed is not None:
            ops, intact = guard.disarm(armed)
            used.update(op.removeprefix("aten::").split(".")[0] for op in ops)
            if not intact:
                problems.append(_DISABLED)
        if used:
            rule = _ATTENTION_RULE if attention and used - set(dirs) else _LIBRARY_RULE
            problems.insert(0, f"{name} calls {', '.join(sorted(used))}: {rule}")
        if off:
            problems.append("the call monitor was switched off during your function "
                            "(sys.setprofile); answers must be your own code")
        if problems:
            raise AssertionError("; ".join(problems))


def own_work(fn, *args, forbidden=("seqlab", "nltk"), forbidden_calls=(), **kwargs):
    """Call ``fn(*args, **kwargs)`` and fail if it runs code from a ``forbidden`` package or
    calls one of ``forbidden_calls``.

    Catches the reference implementation however it was imported or renamed, because it
    watches which source files the call executes. Subpackages work too: forbidding
    ``"torch.autograd"`` rejects answers that let autograd compute a gradient asked for by hand.
    ``forbidden_calls`` lists functions or classes (objects or dotted names) that count too;
    ``NO_FUSED_ATTENTION`` (or any list naming ``F.scaled_dot_product_attention``) also refuses
    torch's attention kernels however they are reached. Graded in the sandbox, the sandbox
    watches the call; in a student's own kernel the same watch runs here (best effort).
    """
    if not isinstance(forbidden, (tuple, list)) or not all(isinstance(p, str) for p in forbidden):
        raise TypeError(f"forbidden: expected a tuple of package names, got {forbidden!r}")
    if not isinstance(forbidden_calls, (tuple, list)):
        raise TypeError(f"forbidden_calls: expected a tuple of functions, classes or dotted "
                        f"names, got {forbidden_calls!r}")
    calls = [_call_name(c) for c in forbidden_calls]
    remote = sys.modules.get("autograder.remote")
    if remote is not None and isinstance(fn, remote.StudentObject):
        return remote.call_watched(fn, args, kwargs, (list(forbidden), calls))
    guard = attention_guard() if not _FUSED.isdisjoint(calls) else None
    with watch(forbidden, calls, guard, getattr(fn, "__name__", "your function")):
        return fn(*args, **kwargs)
