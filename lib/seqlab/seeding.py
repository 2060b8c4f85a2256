"""One call that makes a notebook's random numbers repeatable."""

from __future__ import annotations

import random

import numpy as np
import torch

from .validate import integer


def seed_everything(seed: int) -> int:
    """Seed Python, NumPy and torch (all devices) with ``seed`` and return it.

    The same seed gives the same numbers on the same device and library versions. GPU kernels
    may still be nondeterministic (atomics in cuDNN); that is why tests compare on the CPU.
    String hashing (the order of a ``set`` of str) is fixed only by ``PYTHONHASHSEED`` set
    before Python starts, which no call inside a running notebook can do; the course's code
    never lets a result depend on set order, for that reason.
    """
    integer("seed", seed, 0, below=2**32)
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)  # also seeds every CUDA device
    return seed
