"""Do lectures 03, 05 and 08 hold in half precision? (printed, never asserted)

No GPU runs in CI, so the paths a GPU takes, training under bfloat16 autocast (A100, L4, H100)
or float16 with a gradient scaler (a T4), are run here on the CPU: each lecture in FAST mode,
once in float32 and once per half type (``SEQLAB_PRECISION``), seed 0, one after another.
Prints, per lecture, the time of each run and whether every conclusion held (a failed
``seqlab.claim`` names its cell and line), then every claim's value in each precision beside its
threshold. A CPU computes bfloat16 slower or faster than float32 depending on its instructions
(AVX512-BF16 or not): the times say nothing about a GPU.

    python benchmarks/half_precision_lectures.py [--lectures 03 05 08] [--precisions bf16 fp16]
"""

from __future__ import annotations

import argparse
import resource
import sys
import tempfile
from pathlib import Path

from notebook_sweep import one_run

from seqlab.results import Check

ROOT = Path(__file__).resolve().parents[1]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lectures", nargs="+", default=["03", "05", "08"])
    parser.add_argument("--precisions", nargs="+", default=["bf16"],
                        choices=["bf16", "fp16"], help="half types to run beside float32")
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args(argv)
    settings = ["fp32", *args.precisions]
    for number in args.lectures:
        notebook = next((ROOT / "notebooks").glob(f"{number}_*.ipynb"), None)
        if notebook is None:
            parser.error(f"no lecture {number} in notebooks/")
        runs = {}
        for setting in settings:
            before = sum(resource.getrusage(resource.RUSAGE_CHILDREN)[:2])  # earlier kernels
            with tempfile.TemporaryDirectory() as tmp:
                runs[setting] = run = one_run(notebook, 0, args.threads, Path(tmp),
                                              env={"SEQLAB_PRECISION": setting})
            run["cpu_seconds"] -= before
            status = "every conclusion held" if run["error"] is None else f"FAILED: {run['error']}"
            print(f"{notebook.stem} {setting}: {run['seconds']:.0f} s wall, "
                  f"{run['cpu_seconds']:.0f} s CPU, {status}", flush=True)
        claims = {}
        for setting, run in runs.items():
            for name, made in run["records"].get("claims", {}).items():
                claims.setdefault(name, {})[setting] = made
        width = max([40, *map(len, claims)])
        print(f"\n{'claim':{width}s} {'threshold':>12s} " +
              " ".join(f"{s:>10s}" for s in settings))
        for name, made in claims.items():
            first = next(iter(made.values()))
            check = Check(name, first["op"], first["threshold"])
            cells = []
            for setting in settings:
                if setting not in made:
                    cells.append(f"{'not made':>10s}")
                    continue
                value = float(made[setting]["value"])
                cells.append(f"{value:10.4g}" + ("" if check.holds(value) else "!"))
            print(f"{name:{width}s} {check.op + ' ' + format(check.threshold, 'g'):>12s} "
                  + " ".join(cells))
        print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
