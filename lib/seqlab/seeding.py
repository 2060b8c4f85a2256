"""One call that makes a notebook's random numbers repeatable."""

from __future__ import annotations

import os
import random

import numpy as np
import torch


def seed_everything(seed: int) -> int:
    """Seed Python, NumPy and torch (all devices) with ``seed`` and return it.

    The same seed gives the same numbers on the same device and library versions. GPU kernels
    may still be nondeterministic (atomics in cuDNN); that is why tests compare on the CPU.
    """
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise TypeError(f"seed must be an int, got {type(seed).__name__} {seed!r}")
    if not 0 <= seed < 2**32:
        raise ValueError(f"seed must be in [0, 2**32), got {seed}")
    os.environ["PYTHONHASHSEED"] = str(seed)
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)  # also seeds every CUDA device
    return seed
