"""The Colab path: one address for every badge and setup cell, and lectures that import only
what installing the package brings."""

import ast
import importlib.metadata as md
import json
import re
import shutil
import sys
from pathlib import Path

import pytest
from packaging.requirements import Requirement

from seqlab.course import apply_colab, colab_address, lecture_notebooks, main

ROOT = Path(__file__).resolve().parents[1]
LECTURES = lecture_notebooks(ROOT / "notebooks")

# Present wherever a notebook runs (Jupyter, Colab); not something the package must install.
NOTEBOOK_RUNTIME = {"IPython", "google", "ipykernel"}


def test_every_notebook_points_at_the_one_address():
    repo, branch = colab_address(ROOT / "pyproject.toml")
    assert apply_colab(LECTURES, repo, branch, check=True, root=ROOT) == [], (
        "run `python -m seqlab.course colab` to rewrite the notebooks from pyproject.toml")


def test_a_fork_changes_the_address_in_one_command(tmp_path, monkeypatch):
    shutil.copytree(ROOT / "notebooks", tmp_path / "notebooks")
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    monkeypatch.chdir(tmp_path)  # the course's root is the working directory
    assert main(["colab", "--repo", "https://github.com/someone/fork", "--branch", "t2"]) == 0
    assert main(["colab", "--check"]) == 0
    assert 'repository = "https://github.com/someone/fork"' in \
        (tmp_path / "pyproject.toml").read_text()
    nb = json.loads((tmp_path / "notebooks" / "03_seq2seq.ipynb").read_text())
    text = "".join(nb["cells"][0]["source"]) + "".join(nb["cells"][1]["source"])
    assert "github/someone/fork/blob/t2/notebooks/03_seq2seq.ipynb" in text
    assert "git+https://github.com/someone/fork@t2" in text
    with pytest.raises(ValueError, match="GitHub address"):
        main(["colab", "--repo", "ftp://example.org/x"])


def _imports(source: str) -> set[str]:
    code = "\n".join(re.sub(r"^(\s*)[%!].*", r"\1pass", line) for line in source.splitlines())
    names = set()
    for node in ast.walk(ast.parse(code)):
        if isinstance(node, ast.Import):
            names |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0:
            names.add(node.module.split(".")[0])
    return names


def _runtime_closure(dist: str = "seqlab") -> set[str]:
    """Distributions that `pip install seqlab` brings, without extras, recursively."""
    seen, todo = set(), [dist]
    while todo:
        name = todo.pop()
        key = re.sub(r"[-_.]+", "-", name).lower()
        if key in seen:
            continue
        seen.add(key)
        for line in md.requires(name) or []:
            req = Requirement(line)
            if req.marker is None or req.marker.evaluate({"extra": ""}):
                todo.append(req.name)
    return seen


@pytest.mark.parametrize("path", LECTURES, ids=lambda p: p.stem)
def test_lecture_imports_are_runtime_dependencies(path):
    nb = json.loads(path.read_text())
    imported = set().union(*(_imports("".join(c["source"])) for c in nb["cells"]
                             if c["cell_type"] == "code"))
    providers = md.packages_distributions()
    runtime = _runtime_closure()
    missing = []
    for module in sorted(imported - set(sys.stdlib_module_names) - NOTEBOOK_RUNTIME):
        dists = {re.sub(r"[-_.]+", "-", d).lower() for d in providers.get(module, [module])}
        if module not in ("seqlab", "autograder") and not dists & runtime:
            missing.append(module)
    assert not missing, (f"{path.name} imports {missing}, which `pip install seqlab` (the Colab "
                         "setup cell) does not install: add them to [project] dependencies")
