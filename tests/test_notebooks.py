"""Every lecture notebook runs top to bottom in FAST mode, and is committed clean."""

import json
import re
import shutil
from pathlib import Path

import nbformat
import pytest
from conftest import SHARED_DATA

from seqlab.course import NOTEBOOKS, run_notebook
from seqlab.data import data_home

PATHS = sorted(NOTEBOOKS.glob("*.ipynb"))


def test_there_are_notebooks():
    assert any(p.name == "00_setup.ipynb" for p in PATHS)


@pytest.mark.parametrize("path", PATHS, ids=lambda p: p.stem)
def test_committed_clean_with_the_course_header(path):
    nb = nbformat.read(path, as_version=4)
    nbformat.validate(nb)
    assert nb.metadata["kernelspec"]["name"] == "python3"
    for cell in nb.cells:
        if cell.cell_type == "code":
            assert cell.outputs == [] and cell.execution_count is None, f"{path.name} has outputs"
    first, setup, params = nb.cells[:3]
    assert "colab-badge.svg" in first.source and f"notebooks/{path.name}" in first.source
    assert 'if "google.colab" in sys.modules:' in setup.source
    pip = re.findall(r"pip install[^\n]*", setup.source)
    assert pip and not any(re.search(r"\btorch\b|-U\b|--upgrade", line) for line in pip)
    assert "parameters" in params.metadata.get("tags", [])
    assert "seqlab.fast_mode()" in params.source  # FAST unless a GPU; SEQLAB_FAST overrides


@pytest.fixture
def corpus_cache(monkeypatch):
    """Give the lectures the real corpora this machine has, so they run on real text in CI
    (through the verified cache, or a user's own file); without them they use toy data."""
    for relative in ("tinyshakespeare/input.txt",):
        if (SHARED_DATA / relative).exists():
            target = data_home() / relative
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(SHARED_DATA / relative, target)
    tatoeba = SHARED_DATA / "tatoeba-fra-eng" / "fra.txt"
    if tatoeba.exists():
        monkeypatch.setenv("SEQLAB_TATOEBA_FILE", str(tatoeba))


# Each lecture runs with torch's default thread count and with one thread: floating-point
# rounding changes with the thread count, and a headline must not depend on it.
@pytest.mark.parametrize("threads", ["default", "1"], ids=lambda t: f"threads={t}")
@pytest.mark.parametrize("path", PATHS, ids=lambda p: p.stem)
def test_runs_in_fast_mode(path, threads, tmp_path, notebook_times, corpus_cache, monkeypatch):
    monkeypatch.chdir(tmp_path)
    if threads == "default":
        monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    else:
        monkeypatch.setenv("OMP_NUM_THREADS", threads)
    seconds = run_notebook(path, Path("out"))  # a relative folder, as `make course` passes
    notebook_times[f"{path.name} (threads: {threads})"] = seconds
    assert (tmp_path / "out" / path.name).exists()
    results = json.loads((tmp_path / "out" / "results" / f"{path.stem}.json").read_text())
    assert results, f"{path.name} recorded no headline number"
