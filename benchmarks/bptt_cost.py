"""What assignment 02's cost cell measures, for every answer in ``tests/answers_02.py``.

For each answer (the solution's ``rnn_backward`` first) and each of the cost cell's two models,
prints its CPU time in forward passes written in plain Python (the cell's unit: a forward pass's
multiply-adds at what one costs in plain Python here; the cell allows fewer than 80) and in
forward passes of the NumPy reference (``autograder.testing.rnn_forward``), and whether its
gradients are right. Backpropagation through time costs the same number of plain-Python passes at
both sizes however it is written; against the NumPy forward pass, whose cost is mostly Python's
overhead per call at these sizes, a BPTT with Python loops over entries is not flat, which is
why the cell does not use that unit. The larger model is measured only for answers the smaller
one lets through, as in the cell. CPU time, in this process, without a sandbox; ``uptime`` says
the load it ran under.

    python benchmarks/bptt_cost.py [--repeat N]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import numpy as np

from autograder.checks import python_madd_seconds
from autograder.course import source_notebook
from autograder.testing import rnn_forward, rnn_gradients

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
import answers_02  # noqa: E402

SIZES = ((40, 16, 48, 20), (16, 8, 320, 1))  # vocab, D, H, T: as in test_rnn_backward_cost
LIMIT = 80


def solution() -> str:
    cells = json.loads(source_notebook("02_rnn_backprop").read_text())["cells"]
    return "".join(next(c for c in cells if c["metadata"].get("nbgrader", {}).get("grade_id")
                        == "rnn_backward")["source"])


def model(vocab, d, h, T, seed):
    """The cost cell's inputs for one seed."""
    rng = np.random.default_rng([seed, h])
    p = {"E": rng.normal(size=(vocab, d)), "W": rng.normal(size=(h, d)) / d**0.5,
         "U": rng.normal(size=(h, h)) / h**0.5, "b": rng.normal(size=h) * 0.1,
         "V": rng.normal(size=(vocab, h)) / h**0.5, "c": rng.normal(size=vocab) * 0.1}
    return p, rng.integers(0, vocab, T), rng.integers(0, vocab, T), rng.normal(size=h) * 0.5


def cpu(fn, *args):
    start = time.process_time()
    value = fn(*args)
    return time.process_time() - start, value


def measure(answer: str, madd: float, repeat: int) -> list[str]:
    scope = {"np": np, "rnn_forward": rnn_forward, "__name__": "answer"}
    exec(compile(answer, "<answer>", "exec"), scope)
    cells = []
    for vocab, d, h, T in SIZES:
        unit = madd * T * (h * d + h * h + vocab * h)
        best, right = float("inf"), True
        for seed in range(repeat):
            p, ids, targets, h0 = model(vocab, d, h, T, 1000 + seed)
            hs, probs, _ = rnn_forward(p, ids, targets, h0)
            took, grads = cpu(scope["rnn_backward"], p, ids, targets, hs, probs)
            best = min(best, took)
            ref = rnn_gradients(p, ids, targets, h0)
            right &= all(k in grads and np.allclose(grads[k], g, rtol=1e-6, atol=1e-10)
                         for k, g in ref.items())
        numpy_pass = min(cpu(rnn_forward, p, ids, targets, h0)[0] for _ in range(20))
        cells.append(f"{best / unit:8.2f} {best / numpy_pass:9.1f} "
                     f"{'right' if right else 'WRONG':>5}")
        if best / unit >= LIMIT and (vocab, d, h, T) != SIZES[-1]:
            cells.append("   (over the limit already)")
            break
    return cells


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=2, help="seeds per size (fastest kept)")
    args = parser.parse_args()
    madd = python_madd_seconds()
    print(f"load: {os.getloadavg()[0]:.1f}; a multiply-add in plain Python: {madd * 1e9:.1f} ns; "
          f"limit: {LIMIT} plain-Python passes at each size")
    header = " ".join(f"{'plain':>8} {'numpy':>9} {'grads':>5}" for _ in SIZES)
    sizes = " ".join(f"{f'{sum(v.size for v in model(*s, 0)[0].values()) + s[2]:,} params':>24}"
                     for s in SIZES)
    print(f"{'':28s}{sizes}\n{'answer':28s}{header}")
    answers = {"solution": solution(), **answers_02.HONEST, **answers_02.NOT_BACKPROPAGATION}
    for name, answer in answers.items():
        print(f"{name:28s}" + " ".join(measure(answer, madd, args.repeat)), flush=True)


if __name__ == "__main__":
    main()
