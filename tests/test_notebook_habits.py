"""What students add to every notebook (plots with matplotlib and seaborn, a pandas table, a
tqdm progress bar, prints) runs in every assignment's sandbox, under every isolation, with the
same output: an honest habit never costs a point, wherever it is graded. Matplotlib's font
search starts fc-list, which the attention guard (04, 05) and the uid fallback refuse: refused
as an OSError, it goes on without it. (test_class.py grades a Colab save with these cells under
every isolation: the same grades.csv under each.)"""

import os
import shutil

import pytest
from test_class import HABITS, ISOLATIONS

from autograder.course import assignments, source_notebook
from autograder.intake.normalize import given_imports, read_notebook, refuses_attention, withheld
from autograder.isolation.sandbox import Limits, Sandbox, sandbox_problem, support_folder
from autograder.isolation.session import Session
from autograder.scoring.graded_copy import png

pytestmark = pytest.mark.skipif(bool(sandbox_problem()),
                                reason=f"needs bubblewrap: {sandbox_problem()}")
LIMITS = Limits(timeout_cell=60, timeout_notebook=120, memory_mb=2048, max_procs=64)


def _settings() -> dict[tuple, list[str]]:
    """The assignments by what their sandboxes differ in (what they withhold, whether torch's
    attention is off): one sandbox of each kind stands for the assignments that share it."""
    kinds: dict[tuple, list[str]] = {}
    for name in assignments():
        master = read_notebook(source_notebook(name))
        kinds.setdefault((withheld(master), refuses_attention(master)), []).append(name)
    return kinds


@pytest.mark.parametrize("isolation", list(ISOLATIONS))
def test_plots_tables_and_progress_bars_run_in_every_assignments_sandbox(
        isolation, tmp_path, private_course):
    outputs = {}
    for (withhold, attention), names in _settings().items():
        master = read_notebook(source_notebook(names[0]))
        sandbox = Sandbox(support_folder(ISOLATIONS[isolation]), LIMITS,
                          ISOLATIONS[isolation], withhold=withhold, refuse_attention=attention,
                          preload=given_imports(master))
        session = Session(sandbox, sandbox.start(f"{os.getpid()}-{len(outputs)}"))
        try:
            reply = session.run_cell(HABITS, 0, 60)
        finally:
            session.close()
            sandbox.close_template()
            shutil.rmtree(sandbox.support, ignore_errors=True)
        assert reply["ok"], (names, reply.get("ename"), reply.get("evalue"), reply["stderr"])
        assert reply["stdout"].strip().splitlines()[-1] == "7.24", (names, reply["stdout"])
        assert len(reply["figures"]) == 1 and png(reply["figures"][0]), names
        outputs[tuple(names)] = reply["stdout"]
    assert sorted(n for names in outputs for n in names) == assignments()
    assert len(set(outputs.values())) == 1, outputs  # the same in every assignment

