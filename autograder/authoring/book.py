"""The course as a book: static HTML pages students read in a browser, built with Jupyter Book 1
(Sphinx and MyST-NB) from the lectures as ``python -m seqlab.course`` executed them.

``python -m autograder book --executed executed/ --out site/`` (``make site`` runs the lectures
first) writes:

- a home page: what the course is, the map of topics and what each lecture reproduces (the
  README's Topics table), how to run it on Colab or a laptop and how the assignments work (the
  student edition's README says the same, from the same text);
- a page per lecture, with its outputs and plots (each figure's title as its alt text) and its
  Colab badge pointing at ``[tool.seqlab.colab]`` of pyproject.toml;
- a page per assignment: the goals and points table of its release and its parts, never a
  solution or a hidden test (the built site goes through ``publish``'s leak scan, and nothing is
  written if it would hold a secret line);
- the library's reference, from its docstrings, with the source one click away; search.

The book is self-contained: MathJax, fonts and scripts come with it, and no page asks any other
host for anything, so it works offline and on any static host (``publish --book`` puts it into
the student edition, with a GitHub Pages workflow). ``book/_config.yml`` holds the settings.
"""

from __future__ import annotations

import json
import os
import pkgutil
import re
import shutil
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import yaml

from ..course import COURSE, assignments
from .publish import (
    HOW_ASSIGNMENTS_WORK,
    ROOT,
    how_to_run,
    is_built_book,
    place,
    refuse_leaks,
)
from .release import release

BOOK = ROOT / "book"
_SETUP_MARK = 'if "google.colab" in sys.modules:'
_BADGE_LINE = re.compile(r"^\[!\[Open In Colab\]\([^)]*\)\]\([^)]*\)\s*$", re.MULTILINE)


# ---------------------------------------------------------------------------- the lectures
def _sources(nb: dict) -> list[str]:
    """What a run must not change: every cell's source but the Colab badge and setup cell
    (the course's address may have changed since)."""
    return [_BADGE_LINE.sub("", "".join(c["source"])) for c in nb["cells"]
            if _SETUP_MARK not in "".join(c["source"])]


def check_executed(source: Path, executed: Path) -> None:
    """``executed`` is a complete, error-free run of the lecture ``source`` as it is now;
    ``ValueError`` saying what to run otherwise."""
    again = ("run the lectures again: make course (or python -m seqlab.course --out "
             f"{executed.parent})")
    if not executed.is_file():
        raise ValueError(f"executed: {executed} is missing: {again}")
    nb, current = json.loads(executed.read_text()), json.loads(source.read_text())
    if _sources(nb) != _sources(current):
        raise ValueError(f"executed: {executed} is not a run of {source} as it is now (their "
                         f"cells differ): {again}")
    for index, cell in enumerate(nb["cells"]):
        if cell["cell_type"] != "code":
            continue
        if any(o.get("output_type") == "error" for o in cell.get("outputs", [])):
            raise ValueError(f"executed: cell {index} of {executed} ended in an error: {again} "
                             "and fix the lecture")
        if cell.get("execution_count") is None and "".join(cell["source"]).strip():
            raise ValueError(f"executed: cell {index} of {executed} never ran (the run was "
                             f"stopped): {again}")


def _badge(repo: str, branch: str, relative: str) -> str:
    """The Colab badge of the notebook at ``relative``, drawn from the book (Colab's own image
    is on Colab's host)."""
    from seqlab.course import colab_url

    return (f"[![Open In Colab](../_static/colab-badge.svg)]"
            f"({colab_url(repo, branch, relative)})")


def _lecture_page(executed: Path, target: Path, repo: str, branch: str) -> str:
    """Copy a lecture run to ``target``, its Colab badge after its title; return the run's
    mode."""
    nb = json.loads(executed.read_text())
    for cell in nb["cells"]:
        text = "".join(cell["source"])
        if cell["cell_type"] == "markdown" and _BADGE_LINE.search(text):
            rest = _BADGE_LINE.sub("", text).strip("\n")
            title, _, body = rest.partition("\n")
            badge = _badge(repo, branch, f"notebooks/{executed.name}")
            cell["source"] = (f"{title}\n\n{badge}\n{body}" if title.startswith("# ")
                              else f"{badge}\n\n{rest}")
            break
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(json.dumps(nb, indent=1, ensure_ascii=False))
    return nb.get("metadata", {}).get("seqlab", {}).get("mode", "FAST")


def topic_map(root: Path = ROOT) -> list[dict[str, str]]:
    """The rows of the README's Topics table: number, notebook, topic, what it reproduces."""
    text = (root / "README.md").read_text()
    section = text.split("\n## Topics\n", 1)[-1].split("\n## ", 1)[0]
    rows = []
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 4 and re.fullmatch(r"\d\d", cells[0]):
            rows.append(dict(zip(("number", "notebook", "topic", "reproduces"), cells)))
    return rows


# ---------------------------------------------------------------------------- the assignments
def assignment_page(name: str, released: Path, repo: str, branch: str) -> str:
    """The page of one assignment, from its release: its header (goals, points, rules), the
    Colab badge and the titles of its parts. Code cells are never shown."""
    cells = json.loads(released.read_text())["cells"]
    markdown = ["".join(c["source"]) for c in cells if c["cell_type"] == "markdown"]
    header = markdown[0].strip()
    title, _, body = header.partition("\n")
    badge = _badge(repo, branch, f"assignments/{name}/{name}.ipynb")
    parts = [text.splitlines()[0][3:] for text in markdown[1:] if text.startswith("## ")]
    listed = "\n".join(f"- {part}" for part in parts)
    return f"""{title}

{badge}
{body}

## In the notebook

The notebook is `assignments/{name}/{name}.ipynb` of the course's repository: open it in Colab
with the badge above, or in JupyterLab on your laptop ([how](../index.md#on-your-laptop)). Its
sections:

{listed}

[How the assignments are graded and how to submit](../index.md#assignments).
"""


# ---------------------------------------------------------------------------- the library
def library_modules() -> list[str]:
    """Every public module of ``seqlab``, the package first."""
    import seqlab

    names = [m.name for m in pkgutil.walk_packages(seqlab.__path__, "seqlab.")]
    return ["seqlab"] + sorted(n for n in names if not any(p.startswith("_")
                                                            for p in n.split(".")))


def _is_package(module: str) -> bool:
    import importlib

    return hasattr(importlib.import_module(module), "__path__")


def _summary(module: str) -> str:
    import importlib

    doc = (importlib.import_module(module).__doc__ or "").strip()
    return " ".join(doc.split("\n\n")[0].split())


def _reference(src: Path) -> list[str]:
    """One page per module (autodoc, viewcode) and an index; return their names."""
    folder = src / "reference"
    folder.mkdir(parents=True)
    modules = library_modules()
    rows = "\n".join(f"| [`{m}`]({m}.rst) | {_summary(m)} |" for m in modules)
    (folder / "index.md").write_text(f"""# The library: seqlab

Every lecture imports `seqlab` and shows the source of what it teaches: this is that library,
module by module, generated from its docstrings. Each function and class links to its source
(*[source]*).

| module | what it is for |
|---|---|
{rows}
""")
    for module in modules:
        # A package's page documents what it defines, not the names it re-exports from its
        # modules (in its __all__): documented twice, viewcode's links from the source would
        # point at the package's page with the module's anchors.
        options = "   :ignore-module-all:\n" if _is_package(module) else ""
        (folder / f"{module}.rst").write_text(
            f"{module}\n{'=' * len(module)}\n\n.. automodule:: {module}\n{options}")
    return [f"reference/{m}" for m in modules]


# ---------------------------------------------------------------------------- the home page
def home_page(rows: list[dict[str, str]], names: list[str], modes: dict[str, str],
              repo: str) -> str:
    """What the course is, its topics with links, how to run it, how assignments work."""
    by_number = {name[:2]: name for name in names}
    table = []
    for row in rows:
        stem = row["notebook"].strip("`").removesuffix(".ipynb")
        task = by_number.get(row["number"])
        table.append(f"| {row['number']} | [{row['topic']}](notebooks/{stem}.ipynb) | "
                     f"{row['reproduces']} | "
                     + (f"[assignment {row['number']}](assignments/{task}.md)" if task else "")
                     + " |")
    mode = sorted(set(modes.values()))
    run = ("in FAST mode (small data and short training, on a CPU; full mode on a GPU gives "
           "the real numbers)" if mode == ["FAST"] else
           "in full mode" if mode == ["full"] else "in FAST and full mode")
    return f"""# Neural sequence models: from n-grams to BERT

A course you run: from n-gram language models and perplexity through RNNs, sequence-to-sequence
models, attention and the Transformer to decoding, BLEU and BERT-style masked language models.
Each topic is a lecture notebook, a module of the small library every lecture imports
(`seqlab`) and a graded assignment. This book shows the lectures with their outputs and plots,
as run {run}, and the library's [reference](reference/index.md). The course's repository is
[{repo}]({repo}).

## The lectures

| # | lecture | what you reproduce | practice |
|---|---|---|---|
{chr(10).join(table)}

Read a lecture here, then run it yourself: every page has an *Open in Colab* badge.

{how_to_run(repo)}
{HOW_ASSIGNMENTS_WORK}"""


# ---------------------------------------------------------------------------- building
def _config(repo: str, branch: str) -> dict:
    config = yaml.safe_load((BOOK / "_config.yml").read_text())
    config["repository"].update(url=repo, branch=branch)
    return config


def _toc(lectures: list[str], names: list[str], reference: list[str]) -> dict:
    return {"format": "jb-book", "root": "index", "parts": [
        {"caption": "Lectures", "chapters": [{"file": f"notebooks/{s}"} for s in lectures]},
        {"caption": "Assignments", "chapters": [{"file": f"assignments/{n}"} for n in names]},
        {"caption": "Library reference",
         "chapters": [{"file": "reference/index", "sections": [{"file": r} for r in reference]}]},
    ]}


def _stage(src: Path, executed: Path, course: Path, root: Path, repo: str, branch: str) -> None:
    """Write the book's sources (config, pages, copies of the lecture runs) into ``src``."""
    from seqlab.course import lecture_notebooks

    lectures = lecture_notebooks(root / "notebooks")
    if not lectures:
        raise ValueError(f"no lectures (NN_topic.ipynb) in {root / 'notebooks'}")
    modes = {}
    for source in lectures:
        check_executed(source, executed / source.name)
    for source in lectures:
        modes[source.stem] = _lecture_page(executed / source.name,
                                           src / "notebooks" / source.name, repo, branch)
    names = assignments(course)
    (src / "assignments").mkdir()
    with tempfile.TemporaryDirectory() as tmp, \
            ThreadPoolExecutor(max_workers=min(4, len(names) or 1)) as pool:
        releases = pool.map(lambda name: release(name, Path(tmp), course), names)
        for name, released in zip(names, releases):
            (src / "assignments" / f"{name}.md").write_text(
                assignment_page(name, released / f"{name}.ipynb", repo, branch))
    reference = _reference(src)
    (src / "index.md").write_text(home_page(topic_map(root), names, modes, repo))
    shutil.copytree(BOOK / "_static", src / "_static")
    (src / "_config.yml").write_text(yaml.safe_dump(_config(repo, branch), sort_keys=False))
    (src / "_toc.yml").write_text(yaml.safe_dump(
        _toc([s.stem for s in lectures], names, reference), sort_keys=False))


def _sphinx(src: Path, output: Path) -> tuple[Path, list[str]]:
    """Run Jupyter Book on ``src``; return the HTML folder and Sphinx's warnings."""
    command = [sys.executable, "-c", "from jupyter_book.cli.main import main; main()",
               "build", str(src), "--path-output", str(output), "--builder", "html"]
    done = subprocess.run(command, capture_output=True, text=True,
                          env={**os.environ, "PYTHONWARNINGS": "ignore"})
    log = done.stdout + done.stderr
    html = output / "_build" / "html"
    if done.returncode or not (html / "index.html").is_file():
        tail = "\n".join(log.splitlines()[-40:])
        raise RuntimeError(f"jupyter-book could not build the book (exit {done.returncode}):\n"
                           f"{tail}")
    warnings = [line for line in log.splitlines() if "WARNING" in line]
    for page in html.rglob("*.html"):
        _each_inline_script_once(page)
    return html, warnings


_INLINE_SCRIPT = re.compile(r"[ \t]*<script>[^<]*</script>\n")


def _each_inline_script_once(page: Path) -> None:
    """Jupyter Book 1 writes two extensions' inline scripts twice in every page's head
    (sphinx-thebe's ``const THEBE_JS_URL = ...``, sphinx-togglebutton's settings), after the
    templates ran; a second ``const`` of one name is a script error. The repeats go."""
    seen: set[str] = set()

    def once(match: re.Match) -> str:
        script = match.group(0).strip()
        if script in seen:
            return ""
        seen.add(script)
        return match.group(0)

    text = page.read_text()
    kept = _INLINE_SCRIPT.sub(once, text)
    if kept != text:
        page.write_text(kept)


def _check_out(out: Path, root: Path, course: Path) -> None:
    for precious in (root, course):
        if precious.resolve() == out or precious.resolve().is_relative_to(out):
            raise ValueError(f"--out {out} holds the course; write the book somewhere else")
    if out.exists() and (not out.is_dir() or (any(out.iterdir()) and not is_built_book(out))):
        raise ValueError(f"--out {out} is neither empty nor an earlier book (no .buildinfo, "
                         "index.html and _static): choose a new or empty folder")


def build_book(executed: Path, out: Path, course: Path = COURSE, root: Path = ROOT,
               log=print) -> list[str]:
    """Build the book from the lecture runs in ``executed`` into ``out`` (replaced only when it
    is empty or an earlier book); return Sphinx's warnings.

    ``ValueError`` when a run is missing, stale or failed, or ``out`` must not be replaced;
    ``EditionLeak`` (nothing written) when a page would hold a solution or hidden-test line.
    """
    from seqlab.course import colab_address

    repo, branch = colab_address(root / "pyproject.toml")
    out, executed = Path(out).resolve(), Path(executed)
    _check_out(out, Path(root), Path(course))
    out.parent.mkdir(parents=True, exist_ok=True)
    stage = Path(tempfile.mkdtemp(prefix=f".{out.name}-new-", dir=out.parent))
    try:
        log(f"book: pages from the runs in {executed}/ and the assignments' releases")
        _stage(stage / "src", executed, Path(course), Path(root), repo, branch)
        log("book: jupyter-book build (about a minute)")
        html, warnings = _sphinx(stage / "src", stage / "out")
        refuse_leaks(html, Path(course), Path(root), "the book")
        place(html, out)
    finally:
        shutil.rmtree(stage, ignore_errors=True)
    return warnings
