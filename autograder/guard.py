"""How "compute attention yourself" is made to hold: torch's attention, refused by construction.

Assignments 04 and 05 ask students to write attention; torch offers it in many places (fused
operators, ``nn.MultiheadAttention``, ONNX and other custom operators, Python decompositions,
flex attention), and new ones appear with every release. So nothing here is a list of names.
What computes attention is recognised by what it is:

- an operator of torch's dispatcher, in any namespace (aten, onnx, custom), is attention-like
  when its name says so (attention, attn) or its schema takes query, key and value (or q, k, v);
  every dispatch key of each gets a kernel that refuses;
- a Python function in torch's own files is attention-like by the same rule, read from its
  qualified name and its argument names; its code is replaced by a refusal in place, so every
  reference to it (aliases, bound methods, wrappers) refuses, in every thread.

``install_sentinel`` does this in the grading sandbox, for good, before any student code runs,
and again for every torch module imported later (torch loads many lazily: printing a tensor,
an optimizer's first step). An audit hook (PEP 578: no code can remove one) holds the only
references to the refusing registrations and refuses what could undo them or go around them:
walking the garbage collector's objects, ctypes, creating functions or code objects, starting
other programs, and reading or running torch's own files anywhere but inside torch's own import
of a torch module (so neither torch's attention source nor a fresh copy of one of its modules
can be brought in). Where an import is under way is read from the interpreter's frames, never
from state a notebook could reach.

``refusing(torch)`` applies the same refusals for the length of one call and undoes them:
``own_work`` in a student's own kernel uses it, so visible tests behave as graded ones.

Limits, all deliberate and visible in a submission: native code the student brings (a compiled
library written to disk and loaded as an extension module); torch's attention source pasted as
text into a cell (the similarity report is for pasted code); and code that rewrites Python's
import machinery (importlib's classes, fake torch modules in ``sys.modules``) to run inside one
of torch's imports and copy torch's source from there, which is that same paste by other means.
"""

from __future__ import annotations

import contextlib
import os
import re
import sys
import threading
import types
import warnings

ATTENTION_NAME = re.compile(r"attention|attn", re.IGNORECASE)
QKV = (frozenset({"query", "key", "value"}), frozenset({"q", "k", "v"}))
SITE = ("/grader/guard.py", 1)  # where the refusing kernels say they were registered
REFUSAL = ("{name} is torch's own attention, which is switched off while this assignment is "
           "graded: compute attention yourself (matmul, softmax, masking)")
# What the sandbox refuses once the sentinel is set up: events of PEP 578's table.
REFUSED_EVENTS = {
    "gc.get_objects": "walking the garbage collector's objects",
    "gc.get_referrers": "walking the garbage collector's objects",
    "gc.get_referents": "walking the garbage collector's objects",
    "function.__new__": "creating functions from code objects",
    "code.__new__": "creating code objects",
    "subprocess.Popen": "starting other programs",
    "os.system": "starting other programs",
    "os.exec": "starting other programs",
    "os.posix_spawn": "starting other programs",
    "os.spawn": "starting other programs",
}


def attention_like(name: str, arg_names) -> bool:
    """Whether a function or operator called ``name`` with these argument names computes
    attention: the name says so, or it takes query, key and value."""
    names = {str(a).lower() for a in arg_names}
    return bool(ATTENTION_NAME.search(name)) or any(qkv <= names for qkv in QKV)


_SCHEMA_ARGS = re.compile(r"[(,]\s*[^,()]*?\s(\w+)(?:=[^,()]*)?(?=[,)])")


def attention_ops(torch, ops=None) -> list[str]:
    """The attention-like dispatcher operators among ``ops`` (default: all of them, in every
    namespace)."""
    found = []
    for op in torch._C._dispatch_get_all_op_names() if ops is None else ops:
        base, _, overload = op.partition(".")
        if ATTENTION_NAME.search(base.split("::")[-1]):
            found.append(op)
            continue
        for schema in torch._C._jit_get_schemas_for_operator(base):
            if schema.overload_name == overload and attention_like(
                    "", (a.name for a in schema.arguments)):
                found.append(op)
    return sorted(found)


def _active_keys(dump: str) -> list[str]:
    """The dispatch keys with an active registration, from ``torch._C._dispatch_dump``."""
    keys = []
    for line in dump.splitlines():
        key, sep, registration = line.partition(": ")
        if sep and registration.startswith("registered at") and key != "debug" and \
                not key.endswith("(inactive)"):
            keys.append(key.removesuffix("[alias]"))
    return keys


def _torch_path(path, torch_dir: str) -> bool:
    """Whether an ``open`` event's path lies in torch's folder (by real path)."""
    if isinstance(path, int):
        return False
    try:
        return os.path.realpath(os.fsdecode(os.fspath(path))).startswith(torch_dir)
    except (TypeError, ValueError):
        return False


def _package_dir(module) -> str:
    return os.path.realpath(os.path.dirname(module.__file__)) + os.sep


def _functions(module) -> list[types.FunctionType]:
    """The Python functions a module defines or holds, with the methods of its classes and
    what wrappers wrap (``__wrapped__``)."""
    found = []

    def add(f):
        while isinstance(f, types.FunctionType) and f not in found:
            found.append(f)
            f = f.__dict__.get("__wrapped__")

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for value in list(vars(module).values()):
            if isinstance(value, type) and vars(value).get("__module__") == module.__name__:
                for member in list(vars(value).values()):
                    add(getattr(member, "__func__", member))
            else:
                add(value)
    return found


def _refusal(function: types.FunctionType) -> types.CodeType:
    """Code that refuses, naming ``function``, with as many free variables as its own (a
    function's code can only be swapped for code with the same closure size)."""
    free = function.__code__.co_freevars
    name = f"{function.__module__}.{function.__qualname__}"
    lines = ["def outer():", *(f"    {v} = None" for v in free), "    def refused(*a, **k):"]
    if free:
        lines.append(f"        {', '.join(free)}")
    lines += [f"        raise RuntimeError({REFUSAL.format(name=name)!r})", "    return refused"]
    scope: dict = {}
    exec(compile("\n".join(lines), f"<refused {name}>", "exec"), scope)
    return scope["outer"]().__code__


def attention_functions(module, torch_dir: str) -> list[types.FunctionType]:
    """The attention-like Python functions of torch that ``module`` holds."""
    found = []
    for f in _functions(module):
        code = f.__code__
        names = code.co_varnames[:code.co_argcount + code.co_kwonlyargcount]
        if attention_like(f.__qualname__, names) and \
                os.path.realpath(code.co_filename).startswith(torch_dir):
            found.append(f)
    return found


class _Kernels:
    """Refusing kernels on every active key of attention-like operators."""

    def __init__(self, torch):
        self.torch = torch
        self.libraries: dict[str, object] = {}  # namespace -> torch's C++ Library handle
        self.armed: dict[str, str] = {}  # op -> its dump once armed

    def arm(self, ops) -> None:
        dump = self.torch._C._dispatch_dump
        for op in ops:
            if op in self.armed:
                continue
            namespace, name = op.split("::", 1)
            if namespace not in self.libraries:
                self.libraries[namespace] = self.torch._C._dispatch_library(
                    "IMPL", namespace, "", *SITE)
            refuse = _kernel(op)
            with warnings.catch_warnings():  # "overriding a previously registered kernel"
                warnings.simplefilter("ignore")
                for key in _active_keys(dump(op)):
                    self.libraries[namespace].impl(name, key, refuse, False)
            self.armed[op] = dump(op)

    def intact(self) -> bool:
        dump = self.torch._C._dispatch_dump
        return all(dump(op) == seen for op, seen in self.armed.items())

    def reset(self) -> None:
        for library in self.libraries.values():
            library.reset()
        self.libraries.clear()
        self.armed.clear()


def _kernel(op: str):
    def refuse(*args, **kwargs):
        raise RuntimeError(REFUSAL.format(name=op))

    return refuse


@contextlib.contextmanager
def refusing(torch):
    """Refuse torch's attention (operators and Python functions) inside the ``with`` block, and
    undo it afterwards: the best effort of a student's own kernel."""
    torch_dir = _package_dir(torch)
    kernels = _Kernels(torch)
    swapped = []
    try:
        kernels.arm(attention_ops(torch))
        for name, module in list(sys.modules.items()):
            if name.split(".")[0] == "torch" and getattr(module, "__file__", None):
                for f in attention_functions(module, torch_dir):
                    swapped.append((f, f.__code__))
                    f.__code__ = _refusal(f)
        yield
    finally:
        for f, code in swapped:
            f.__code__ = code
        kernels.reset()


def install_sentinel(torch) -> str:
    """Refuse torch's attention in this process for good (the grading sandbox calls this
    before any student code). Returns "" when every refusal is in place, else why not."""
    try:
        _Sentinel(torch)
        canary = torch._C._nn.scaled_dot_product_attention
        try:
            canary(*(torch.zeros(1, 1, 1),) * 3)
        except RuntimeError as err:
            if "switched off" in str(err):
                return ""
        return "torch's attention still ran after the refusals were set up"
    except Exception as err:  # report, never half-guard silently
        return f"{type(err).__name__}: {err}"


class _Sentinel:
    """The sandbox's refusals. After ``__init__`` returns, only the audit hook (and, through
    it, nothing reachable from Python) holds the kernels' registrations. Fetching a kernel by
    dispatch key (``torch.library.get_kernel``) hands out the refusing one: every key that had
    a kernel now has ours."""

    def __init__(self, torch):
        torch_dir = _package_dir(torch)
        for name, module in list(sys.modules.items()):
            if name.split(".")[0] == "torch" and getattr(module, "__file__", None):
                _sanitize(module, torch_dir)
        kernels = _Kernels(torch)
        kernels.arm(attention_ops(torch))
        busy: set[int] = set()
        ident = threading.get_ident
        importing = _Loader.exec_module.__code__

        def inside_torch_import() -> bool:
            """Whether torch's own import of a torch module (through ``_TorchImports``) is on
            this thread's stack: the frames are the interpreter's, not a notebook's state."""
            frame = sys._getframe(1)
            while frame is not None:
                if frame.f_code is importing:
                    return True
                frame = frame.f_back
            return False

        keep = [kernels]  # referenced by the hook alone: the only way to the registrations

        def hook(event, args):
            me = ident()
            if me in busy:  # an event our own check raised (realpath, _getframe)
                return
            busy.add(me)
            try:
                if event == "seqlab.keep":  # registrations made for modules imported later
                    keep.append(args[0])
                    return
                reason = REFUSED_EVENTS.get(event) or (
                    "using ctypes" if event.startswith("ctypes.") else "")
                if not reason and event == "open" and _torch_path(args[0], torch_dir) \
                        and not inside_torch_import():
                    reason = "reading torch's own files"
                if not reason and event == "exec" and isinstance(args[0], types.CodeType) \
                        and _torch_path(args[0].co_filename, torch_dir) \
                        and not inside_torch_import():
                    reason = "running torch's own code outside its imports"
                if reason:  # an OSError, as libraries expect of what the system refuses
                    # (matplotlib's font search starting fc-list goes on without it)
                    raise PermissionError(f"{reason} is not possible while this assignment "
                                          "is graded (its answers may not use torch's "
                                          "attention)")
            finally:
                busy.discard(me)

        sys.addaudithook(hook)
        sys.meta_path.insert(0, _TorchImports(torch, torch_dir))


def _sanitize(module, torch_dir: str) -> None:
    """Replace the code of ``module``'s attention-like functions by refusals, in place."""
    for f in attention_functions(module, torch_dir):
        f.__code__ = _refusal(f)


class _TorchImports:
    """Torch modules imported after set-up (torch loads many lazily: printing a tensor, an
    optimizer's first step): torch's own loader runs them, then their attention is refused like
    the rest, and the attention operators they registered get refusing kernels."""

    def __init__(self, torch, torch_dir: str):
        self.torch, self.torch_dir = torch, torch_dir

    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] != "torch":
            return None
        from importlib.machinery import PathFinder

        spec = PathFinder.find_spec(name, path, target)
        if spec is not None and spec.loader is not None:
            spec.loader = _Loader(spec.loader, self)
        return spec


class _Loader:
    def __init__(self, loader, imports: _TorchImports):
        self.loader, self.imports = loader, imports

    def create_module(self, spec):
        return self.loader.create_module(spec)

    def exec_module(self, module):
        torch = self.imports.torch
        before = set(torch._C._dispatch_get_all_op_names())
        self.loader.exec_module(module)
        _sanitize(module, self.imports.torch_dir)
        new = sorted(set(torch._C._dispatch_get_all_op_names()) - before)
        kernels = _Kernels(torch)
        kernels.arm(attention_ops(torch, new))
        if kernels.armed:
            sys.audit("seqlab.keep", kernels)  # kept alive by the hook alone

    def __getattr__(self, name):  # get_data, get_source, is_package, ... as torch's loader
        return getattr(self.loader, name)
