"""What crosses the sandbox's line, declared once and read by both sides: the requests the
grader may send, the values the runner may send back (numeric dtypes, frame size), and what
both do the same way (seeding; the notebook's heavy imports before any student code).

Standard library only, and nothing of the grader's: the runner, inside the sandbox, imports it
as a plain module lying beside it; the grader as ``autograder.isolation.protocol``.
"""

import importlib
import random
import sys

# Every request the grader may send, (op, *arguments); the runner refuses any other. Replies are
# dicts: {"op": "ran" | "value" | "raise" | "callback" | "ready", ...}.
REQUESTS = {
    "run": "(source, seed, seconds): execute a notebook cell",
    "get": "(name,): the value of a global name of the notebook",
    "call": "(handle, pickled (args, kwargs), seed, seconds): call a student object",
    "getattr": "(handle, name, seconds): an attribute of a student object",
    "getitem": "(handle, pickled key, seconds): an item of a student object",
    "len": "(handle, None, seconds): len() of a student object",
    "iter": "(handle, None, seconds): the items of a student object, as a list",
}
MAX_TEXT = 20_000  # characters of output kept per cell or call
MAX_FRAME = 64 * 2**20  # bytes of one message from the sandbox
NUMERIC = {"bool", "int8", "int16", "int32", "int64", "uint8", "float16", "float32", "float64",
           "complex64", "complex128"}


def seed_all(seed):
    """Seed ``random``, and numpy and torch where they are imported. The grader seeds its own
    test cells with this too, so both sides of the sandbox line draw the same numbers."""
    random.seed(seed)
    for name, fn in (("numpy", "random.seed"), ("torch", "manual_seed")):
        module = sys.modules.get(name)
        if module is not None:
            try:
                target = module
                for part in fn.split("."):
                    target = getattr(target, part)
                target(seed)
            except Exception:
                pass


def preload(modules: str) -> None:
    """Import what the notebook's given cells import (comma-separated), now: a sandbox started
    ahead of need, or a template, has done it before the submission's turn, and native
    libraries are loaded before the uid fallback's hook refuses ctypes."""
    for module in filter(None, modules.split(",")):
        try:
            importlib.import_module(module)
        except ImportError:
            pass
