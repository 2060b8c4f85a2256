"""Run the lecture notebooks headless, as CI and ``make course`` do, and point them at Colab.

``python -m seqlab.course [--notebooks DIR] [--full] [--out executed/] [notebooks...]`` executes
each notebook (default: every ``NN_*.ipynb`` of ``./notebooks``) in a fresh kernel with
``SEQLAB_FAST`` set, writes the executed copy and collects every ``seqlab.record``-ed number in
``<out>/results/<notebook>.json``.

``python -m seqlab.course colab [--root DIR] [--repo URL] [--branch NAME] [--check]`` writes the
course's address (kept in one place: ``[tool.seqlab.colab]`` of the course's pyproject.toml) into
every notebook's "Open in Colab" badge and Colab setup cell; ``--check`` only reports notebooks
that disagree.

The library knows nothing of where it is installed: every folder comes from the caller, by
default the working directory (the course's root).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import time
from pathlib import Path

_BADGE = re.compile(r"\[!\[Open In Colab\]\([^)]*\)\]\([^)]*\)")
_SETUP_MARK = 'if "google.colab" in sys.modules:'


def lecture_notebooks(folder: Path | str = "notebooks") -> list[Path]:
    """The lectures in ``folder`` (``NN_topic.ipynb``), in course order."""
    return sorted(Path(folder).glob("[0-9][0-9]_*.ipynb"))


def _kernel_environment(path: Path, out_dir: Path, fast: bool = True, env=None) -> dict[str, str]:
    """What the kernel running ``path`` sees: this process's environment, ``env`` on top, then
    seqlab's settings. (Sweeps that run several kernels at once pass ``OMP_WAIT_POLICY=PASSIVE``:
    there spinning threads steal each other's cores. A lone run keeps OpenMP's default, which
    is about 1.5 times faster on an idle 2-core machine.)"""
    return {**os.environ, **(env or {}),
            "SEQLAB_FAST": "1" if fast else "0", "SEQLAB_NOTEBOOK": Path(path).stem,
            "SEQLAB_RESULTS": str(Path(out_dir).resolve() / "results")}


def run_notebook(path: Path, out_dir: Path, fast: bool = True, timeout: int = 1800, *,
                 env: dict[str, str] | None = None, parameters: str = "",
                 allow_errors: bool = False) -> float:
    """Execute ``path`` in a new python3 kernel; save it to ``out_dir``; return seconds taken.
    Its figures carry their titles as alt text (``seqlab.alt_text``), which the book shows.

    ``env`` is added to the kernel's environment only (this process's is left alone);
    ``parameters`` is appended to the notebook's ``parameters`` cell (``"SEED = 3"``). A failing
    cell raises ``nbclient.exceptions.CellExecutionError`` naming the cell, unless
    ``allow_errors``; either way the executed notebook is saved so errors can be read in context.
    """
    import nbformat
    from nbclient import NotebookClient

    path, out_dir = Path(path).resolve(), Path(out_dir).resolve()  # the kernel runs elsewhere
    out_dir.mkdir(parents=True, exist_ok=True)
    nb = nbformat.read(path, as_version=4)
    if parameters:
        cell = next((c for c in nb.cells if "parameters" in c.metadata.get("tags", [])), None)
        if cell is None:
            raise ValueError(f"parameters: {path.name} has no cell tagged 'parameters' to "
                             f"append {parameters!r} to")
        cell.source += "\n" + parameters
    client = NotebookClient(nb, timeout=timeout, kernel_name="python3", allow_errors=allow_errors,
                            resources={"metadata": {"path": str(path.parent)}},
                            extra_arguments=["--ext=seqlab.alt_text"],  # figures' alt text
                            startup_timeout=300)  # a busy shared machine starts kernels slowly
    start = time.perf_counter()
    try:
        client.execute(env=_kernel_environment(path, out_dir, fast, env))
    finally:
        nb.metadata["seqlab"] = {"mode": "FAST" if fast else "full"}  # the book says which
        nbformat.write(nb, out_dir / path.name)
    return time.perf_counter() - start


# ---------------------------------------------------------------------- Colab
PLACEHOLDER_REPOSITORY = "https://github.com/seqlab-course/seqlab"
"""The address the course ships with: badges work once the course sets its own."""


def colab_address(pyproject: Path | str = "pyproject.toml") -> tuple[str, str]:
    """(repository URL, branch) from ``[tool.seqlab.colab]`` of the course's pyproject.toml."""
    import tomllib

    pyproject = Path(pyproject)
    try:
        settings = tomllib.loads(pyproject.read_text())["tool"]["seqlab"]["colab"]
    except (FileNotFoundError, KeyError) as err:
        raise ValueError(f"pyproject: {pyproject.resolve()} has no [tool.seqlab.colab] section "
                         f"with the course's repository and branch ({err!r})") from None
    return settings["repository"].rstrip("/"), settings["branch"]


def github_repository(repo: str) -> str:
    """``OWNER/NAME`` of a GitHub address, the part Colab's URLs and pip's ``git+`` need;
    ``ValueError`` for anything else (Colab opens notebooks from GitHub only)."""
    match = re.fullmatch(r"https://github\.com/([\w.-]+/[\w.-]+?)(\.git)?", repo)
    if not match:
        raise ValueError(f"repo must be a GitHub address like https://github.com/OWNER/NAME, "
                         f"got {repo!r} (Colab opens notebooks from GitHub)")
    return match.group(1)


def colab_url(repo: str, branch: str, relative: str) -> str:
    """Where Colab opens the notebook at ``relative`` (a path in the repository ``repo``)."""
    return (f"https://colab.research.google.com/github/{github_repository(repo)}/blob/"
            f"{branch}/{relative}")


def colab_header(path: Path, repo: str, branch: str, root: Path | str = ".") -> tuple[str, str]:
    """The badge markdown and the setup cell source for the notebook at ``path`` of the course
    (or edition) whose root folder is ``root``."""
    relative = Path(path).resolve().relative_to(Path(root).resolve()).as_posix()
    owner_name = github_repository(repo)
    badge = ("[![Open In Colab](https://colab.research.google.com/assets/colab-badge.svg)]"
             f"({colab_url(repo, branch, relative)})")
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


def apply_colab(paths, repo: str, branch: str, check: bool = False, root: Path | str = "."
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


def _set_address(pyproject: Path, repo: str, branch: str) -> None:
    text = pyproject.read_text()
    section = text.index("[tool.seqlab.colab]")
    head, tail = text[:section], text[section:]
    tail = re.sub(r'(?m)^repository = ".*"$', f'repository = "{repo}"', tail, count=1)
    tail = re.sub(r'(?m)^branch = ".*"$', f'branch = "{branch}"', tail, count=1)
    pyproject.write_text(head + tail)


def colab_main(argv) -> int:
    parser = argparse.ArgumentParser(prog="python -m seqlab.course colab",
                                     description="Point every notebook at the course's address.")
    parser.add_argument("--root", type=Path, default=Path("."),
                        help="the course's folder: pyproject.toml and notebooks/ (default: .)")
    parser.add_argument("--repo", help="https://github.com/OWNER/NAME (saved in pyproject.toml)")
    parser.add_argument("--branch", help="branch the badges open (default: the saved one)")
    parser.add_argument("--check", action="store_true", help="only list notebooks that disagree")
    args = parser.parse_args(argv)
    pyproject = args.root / "pyproject.toml"
    repo, branch = colab_address(pyproject)
    repo, branch = (args.repo or repo).rstrip("/"), args.branch or branch
    github_repository(repo)  # validate before writing anything
    if not args.check and (args.repo or args.branch):
        _set_address(pyproject, repo, branch)
    stale = apply_colab(lecture_notebooks(args.root / "notebooks"), repo, branch,
                        check=args.check, root=args.root)
    verb = "disagree with" if args.check else "rewritten for"
    print(f"{len(stale)} notebook(s) {verb} {repo} @ {branch}" +
          (": " + ", ".join(stale) if stale else ""))
    return 1 if args.check and stale else 0


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["colab"]:
        return colab_main(argv[1:])
    parser = argparse.ArgumentParser(prog="python -m seqlab.course",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("notebooks", nargs="*", type=Path,
                        help="notebooks to run (default: every lecture in --notebooks)")
    parser.add_argument("--notebooks", dest="folder", type=Path, default=Path("notebooks"),
                        help="the lectures' folder (default: ./notebooks)")
    parser.add_argument("--full", action="store_true", help="full mode (GPU-sized), not FAST")
    parser.add_argument("--out", type=Path, default=Path("executed"), help="output folder")
    args = parser.parse_args(argv)
    paths = args.notebooks or lecture_notebooks(args.folder)
    missing = [str(p) for p in paths if not p.is_file()]
    if not paths or missing:
        where = (", ".join(missing) if missing
                 else f"no NN_*.ipynb lectures in {args.folder.resolve()}")
        print(f"python -m seqlab.course: nothing to run: {where}; pass the lectures' folder with "
              "--notebooks DIR (or run from the course's root, which holds notebooks/)",
              file=sys.stderr)
        return 2
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
