"""Does a lecture stay usable beside other work? (printed, never asserted)

For every lecture, FAST mode through the course's runner (``python -m seqlab.course``), four
runs: alone ("idle") and beside one busy process ("busy"), each as lectures ran before
(torch's own thread count, one per core, and GNU OpenMP's own wait: ``OMP_NUM_THREADS`` = the
cores, ``GOMP_SPINCOUNT=300000``) and as ``seqlab.threads`` sets them now (one thread). The busy
process is a plain torch training loop (a small Transformer, torch's default threads, no
seqlab), the kind of work a student's other notebook or a grader's second kernel does. Printed
per lecture: the four times, busy / idle for both ("ratio", goal: at most about 2.5) and idle
now / idle before (goal: at most 1.10), with the 1-minute load average when each run started.

A run beside the busy process stops at ``--cap`` times its idle time (a minute at least) and
shows as ">"; on a machine shared with other work, compare numbers only within one run of this
script, read the load beside them, and repeat (``--repeats``: the median of each is printed).

    python benchmarks/contention.py [--lectures 03 08] [--repeats 3] [--cap 8] [--now-only]
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SPIN = {"GOMP_SPINCOUNT": "300000"}  # libgomp's default when nothing is set
# Settings a run must not inherit from this shell, so "now" is what the library chooses.
CLEARED = ("GOMP_SPINCOUNT", "OMP_WAIT_POLICY", "OMP_NUM_THREADS", "SEQLAB_FAST")

NEIGHBOUR = """
import torch
torch.manual_seed(1)
d, vocab = 128, 64
layer = torch.nn.TransformerEncoderLayer(d, 4, 4 * d, dropout=0.0, batch_first=True)
model = torch.nn.Sequential(torch.nn.Embedding(vocab, d), torch.nn.TransformerEncoder(layer, 2),
                            torch.nn.Linear(d, vocab))
optimizer = torch.optim.Adam(model.parameters(), 1e-3)
x = torch.randint(0, vocab, (32, 64))
print("ready", flush=True)
while True:
    loss = torch.nn.functional.cross_entropy(model(x).flatten(0, 1), x.flatten())
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
"""


def torch_default_threads() -> str:
    """The thread count torch picks by itself here (seqlab not imported)."""
    return subprocess.run([sys.executable, "-c", "import torch; print(torch.get_num_threads())"],
                          env=_environment({}), capture_output=True, text=True,
                          check=True).stdout.strip()


def load() -> float:
    return os.getloadavg()[0]


def _environment(extra: dict[str, str]) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in CLEARED}
    return {**env, **extra}


def run_lecture(path: Path, extra: dict[str, str], cap: float | None) -> float | None:
    """Seconds the course's runner reports for ``path`` in FAST mode, or None past ``cap``."""
    with tempfile.TemporaryDirectory() as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "seqlab.course", "--notebooks", str(path.parent),
             "--out", out, str(path)], cwd=ROOT, env=_environment(extra),
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
        try:
            stdout, stderr = process.communicate(timeout=cap)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)  # the runner and its kernel
            process.communicate()
            return None
    found = re.search(rf"{re.escape(path.name)}: ([0-9.]+) s", stdout)
    if process.returncode != 0 or not found:
        raise RuntimeError(f"{path.name} failed:\n{stdout[-1500:]}\n{stderr[-3000:]}")
    return float(found.group(1))


class Neighbour:
    """The busy process, started and stopped around one run."""

    def __enter__(self):
        self.process = subprocess.Popen([sys.executable, "-c", NEIGHBOUR],
                                        env=_environment({}), stdout=subprocess.PIPE,
                                        text=True, start_new_session=True)
        self.process.stdout.readline()  # "ready": torch imported, the loop starts
        time.sleep(2)
        return self

    def __exit__(self, *exc):
        os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait()


def measure(path: Path, modes: dict[str, dict], repeats: int, cap: float, busy: bool = True
            ) -> dict:
    """Times (None: capped) and loads of every run, keyed by (mode, "idle" or "busy")."""
    runs: dict = {}
    for _ in range(repeats):
        for mode, extra in modes.items():
            at = load()
            runs.setdefault((mode, "idle"), []).append((run_lecture(path, extra, None), at))
        for mode, extra in modes.items() if busy else ():
            idle = min(s for s, _ in runs[(mode, "idle")])
            with Neighbour():
                at = load()
                runs.setdefault((mode, "busy"), []).append(
                    (run_lecture(path, extra, _cap(cap, idle)), at))
    return runs


def _cap(cap: float, idle: float) -> float:
    """Seconds after which a busy run is stopped (a minute at least: the runner's start)."""
    return max(cap * idle, 60.0)


def _median(times: list) -> float:
    """The median, a capped run counting as infinitely long."""
    return statistics.median([float("inf") if t is None else t for t in times])


def summary(path: Path, runs: dict, modes: dict, cap: float) -> str:
    cells, idle = [], {}
    for mode in modes:
        idle[mode] = _median([s for s, _ in runs[(mode, "idle")]])
        if (mode, "busy") not in runs:  # --idle-only
            cells.append(f"{idle[mode]:7.1f} s {'-':>8s} {'-':>7s}")
            continue
        busy = _median([s for s, _ in runs[(mode, "busy")]])
        if busy == float("inf"):
            limit = _cap(cap, min(s for s, _ in runs[(mode, "idle")]))
            busy_text, ratio = f">{limit:.0f} s", f">{limit / idle[mode]:.1f}x"
        else:
            busy_text, ratio = f"{busy:.0f} s", f"{busy / idle[mode]:.2f}x"
        cells.append(f"{idle[mode]:7.1f} s {busy_text:>8s} {ratio:>7s}")
    growth = f"{idle['now'] / idle['before']:6.2f}" if "before" in idle else ""
    loads = " ".join(f"{a:.1f}" for times in runs.values() for _, a in times)
    return f"{path.stem:20s} " + " | ".join(cells) + f" | {growth:>6s}   {loads}"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lectures", nargs="+", default=[],
                        help="numbers or names of lectures (default: all of notebooks/)")
    parser.add_argument("--notebooks", type=Path, default=ROOT / "notebooks")
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--cap", type=float, default=8.0,
                        help="stop a busy run at this many times its idle time (default 8)")
    parser.add_argument("--now-only", action="store_true",
                        help="only the library's current setting, not the old one beside it")
    parser.add_argument("--idle-only", action="store_true", help="no runs beside a busy one")
    parser.add_argument("--also", nargs="+", default=[], metavar="NAME:VAR=VALUE,...",
                        help="more columns, each with its own environment, e.g. "
                             "one-thread:OMP_NUM_THREADS=1")
    args = parser.parse_args(argv)
    paths = sorted(args.notebooks.glob("[0-9][0-9]_*.ipynb"))
    if args.lectures:
        paths = [p for p in paths if any(p.stem.startswith(x) for x in args.lectures)]
    if not paths:
        parser.error(f"no lecture matches {args.lectures} in {args.notebooks}")
    before = {**SPIN, "OMP_NUM_THREADS": torch_default_threads()}
    modes = {"now": {}} if args.now_only else {"before": before, "now": {}}
    for column in args.also:
        name, _, settings = column.partition(":")
        modes[name] = dict(item.split("=", 1) for item in settings.split(",") if item)
    print(f"{os.cpu_count()} CPUs; before: {' '.join(f'{k}={v}' for k, v in before.items())}; "
          f"load average at the start {load():.2f}; "
          f"{args.repeats} run(s) of each, medians; busy runs capped at {args.cap}x idle")
    head = " | ".join(f"{m + ': idle':>9s} {'busy':>8s} {'ratio':>7s}" for m in modes)
    print(f"\n{'lecture':20s} {head} | {'idle now/before' if len(modes) > 1 else '':>6s}"
          "   load at each run's start (idle runs, then busy runs)")
    for path in paths:
        runs = measure(path, modes, args.repeats, args.cap, busy=not args.idle_only)
        print(summary(path, runs, modes, args.cap), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
