"""Run the lecture notebooks headless, as CI and ``make course`` do, and point them at Colab.

``python -m seqlab.course [--full] [--out executed/] [notebooks...]`` executes each notebook in a
fresh kernel with ``SEQLAB_FAST`` set, writes the executed copy and collects every
``seqlab.record``-ed number in ``<out>/results/<notebook>.json``.

``python -m seqlab.course colab [--repo URL] [--branch NAME] [--check]`` writes the course's
address (kept in one place: ``[tool.seqlab.colab]`` of pyproject.toml) into every notebook's
"Open in Colab" badge and Colab setup cell; ``--check`` only reports notebooks that disagree.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import time
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOKS = ROOT / "notebooks"
PYPROJECT = ROOT / "pyproject.toml"
_BADGE = re.compile(r"\[!\[Open In Colab\]\([^)]*\)\]\([^)]*\)")
_SETUP_MARK = 'if "google.colab" in sys.modules:'


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


# ---------------------------------------------------------------------- Colab
def colab_address(pyproject: Path | None = None) -> tuple[str, str]:
    """(repository URL, branch) from ``[tool.seqlab.colab]`` of pyproject.toml."""
    import tomllib

    settings = tomllib.loads((pyproject or PYPROJECT).read_text())["tool"]["seqlab"]["colab"]
    return settings["repository"].rstrip("/"), settings["branch"]


def _github_path(repo: str) -> str:
    match = re.fullmatch(r"https://github\.com/([\w.-]+/[\w.-]+?)(\.git)?", repo)
    if not match:
        raise ValueError(f"repo must be a GitHub address like https://github.com/OWNER/NAME, "
                         f"got {repo!r} (Colab opens notebooks from GitHub)")
    return match.group(1)


def colab_header(path: Path, repo: str, branch: str, root: Path | None = None
                 ) -> tuple[str, str]:
    """The badge markdown and the setup cell source for the notebook at ``path``."""
    relative = Path(path).resolve().relative_to((root or ROOT).resolve()).as_posix()
    owner_name = _github_path(repo)
    badge = ("[![Open In Colab](https://colab.research.google.com/assets/colab-badge.svg)]"
             f"(https://colab.research.google.com/github/{owner_name}/blob/{branch}/{relative})")
    setup = ("# Setup: on Colab, install the course library (Colab's own torch is kept); "
             "locally, nothing to do.\n"
             "import sys\n\n"
             f"{_SETUP_MARK}\n"
             f'    %pip install -q "seqlab @ git+https://github.com/{owner_name}@{branch}"')
    return badge, setup


def _header_cells(nb: dict) -> tuple[dict, dict]:
    """The cell holding the badge and the setup cell of a notebook (as JSON)."""
    cells = nb["cells"]
    badge = next((c for c in cells if _BADGE.search("".join(c["source"]))), None)
    setup = next((c for c in cells if c["cell_type"] == "code"
                  and _SETUP_MARK in "".join(c["source"])), None)
    if badge is None or setup is None:
        raise ValueError("the notebook has no Colab badge or no Colab setup cell")
    return badge, setup


def _lines(text: str) -> list[str]:
    lines = text.split("\n")
    return [line + "\n" for line in lines[:-1]] + ([lines[-1]] if lines[-1] else [])


def apply_colab(paths, repo: str, branch: str, check: bool = False, root: Path | None = None
                ) -> list[str]:
    """Rewrite (or with ``check`` only compare) the badge and setup cell of every notebook;
    return the names of those that disagreed."""
    stale = []
    for path in paths:
        nb = json.loads(Path(path).read_text())
        badge_cell, setup_cell = _header_cells(nb)
        badge, setup = colab_header(path, repo, branch, root)
        old_markdown, old_setup = "".join(badge_cell["source"]), "".join(setup_cell["source"])
        new_markdown = _BADGE.sub(lambda _, badge=badge: badge, old_markdown, count=1)
        if (new_markdown, setup) == (old_markdown, old_setup):
            continue
        stale.append(Path(path).name)
        if not check:
            badge_cell["source"], setup_cell["source"] = _lines(new_markdown), _lines(setup)
            Path(path).write_text(json.dumps(nb, indent=1, ensure_ascii=False) + "\n")
    return stale


def _set_address(repo: str, branch: str) -> None:
    pyproject = PYPROJECT
    text = pyproject.read_text()
    section = text.index("[tool.seqlab.colab]")
    head, tail = text[:section], text[section:]
    tail = re.sub(r'(?m)^repository = ".*"$', f'repository = "{repo}"', tail, count=1)
    tail = re.sub(r'(?m)^branch = ".*"$', f'branch = "{branch}"', tail, count=1)
    pyproject.write_text(head + tail)


def colab_notebooks() -> list[Path]:
    """Every notebook a student opens on Colab: the lectures (assignments get theirs at release)."""
    return sorted(NOTEBOOKS.glob("[0-9][0-9]_*.ipynb"))


def colab_main(argv) -> int:
    parser = argparse.ArgumentParser(prog="python -m seqlab.course colab",
                                     description="Point every notebook at the course's address.")
    parser.add_argument("--repo", help="https://github.com/OWNER/NAME (saved in pyproject.toml)")
    parser.add_argument("--branch", help="branch the badges open (default: the saved one)")
    parser.add_argument("--check", action="store_true", help="only list notebooks that disagree")
    args = parser.parse_args(argv)
    repo, branch = colab_address()
    repo, branch = (args.repo or repo).rstrip("/"), args.branch or branch
    _github_path(repo)  # validate before writing anything
    if not args.check and (args.repo or args.branch):
        _set_address(repo, branch)
    stale = apply_colab(colab_notebooks(), repo, branch, check=args.check)
    verb = "disagree with" if args.check else "rewritten for"
    print(f"{len(stale)} notebook(s) {verb} {repo} @ {branch}" +
          (": " + ", ".join(stale) if stale else ""))
    return 1 if args.check and stale else 0


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["colab"]:
        return colab_main(argv[1:])
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
