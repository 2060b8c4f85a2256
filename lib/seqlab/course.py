"""Run the lecture notebooks headless, as CI and ``make course`` do.

``python -m seqlab.course [--full] [--out executed/] [notebooks...]`` executes each notebook in a
fresh kernel with ``SEQLAB_FAST`` set, writes the executed copy and collects every
``seqlab.record``-ed number in ``<out>/results/<notebook>.json``.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from contextlib import contextmanager
from pathlib import Path

NOTEBOOKS = Path(__file__).resolve().parents[2] / "notebooks"


@contextmanager
def _environment(**values: str):
    old = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def run_notebook(path: Path, out_dir: Path, fast: bool = True, timeout: int = 1800) -> float:
    """Execute ``path`` in a new python3 kernel; save it to ``out_dir``; return seconds taken.

    A failing cell raises ``nbclient.exceptions.CellExecutionError`` naming the cell, and the
    partly executed notebook is still saved so the error can be read in context.
    """
    import nbformat
    from nbclient import NotebookClient

    path, out_dir = Path(path).resolve(), Path(out_dir).resolve()  # the kernel runs elsewhere
    out_dir.mkdir(parents=True, exist_ok=True)
    nb = nbformat.read(path, as_version=4)
    client = NotebookClient(nb, timeout=timeout, kernel_name="python3",
                            resources={"metadata": {"path": str(path.parent)}})
    env = {"SEQLAB_FAST": "1" if fast else "0", "SEQLAB_NOTEBOOK": path.stem,
           "SEQLAB_RESULTS": str(out_dir / "results")}
    start = time.perf_counter()
    try:
        with _environment(**env):
            client.execute()
    finally:
        nbformat.write(nb, out_dir / path.name)
    return time.perf_counter() - start


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("notebooks", nargs="*", type=Path,
                        help="notebooks to run (default: every notebooks/*.ipynb)")
    parser.add_argument("--full", action="store_true", help="full mode (GPU-sized), not FAST")
    parser.add_argument("--out", type=Path, default=Path("executed"), help="output folder")
    args = parser.parse_args(argv)
    paths = args.notebooks or sorted(NOTEBOOKS.glob("[0-9][0-9]_*.ipynb"))
    failed = []
    for path in paths:
        try:
            seconds = run_notebook(path, args.out, fast=not args.full)
            print(f"{path.name}: {seconds:.1f} s")
        except Exception as err:  # report every notebook, then fail
            failed.append(path.name)
            print(f"{path.name}: FAILED\n{err}", file=sys.stderr)
    print(f"executed copies and results in {args.out}/")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
