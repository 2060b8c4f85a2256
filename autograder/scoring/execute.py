"""Grade one submission: run its cells in a sandbox, its tests in this (trusted) process.

Test cells never run where student code runs. Their names resolve, in order, to what the
instructor's cells defined here (imports, ``expect_float``, constants), to Python's builtins, and
only then to the student's globals, fetched from the sandbox as plain data or as call-through
handles. So a student who redefines ``expect_float``, patches ``math.isclose`` or numpy's testing,
or breaks IPython changes nothing that decides a test.
"""

from __future__ import annotations

import ast
import builtins
import contextlib
import io
import re
import time
import types

from ..intake.markers import has_visible_code, hidden_lines
from ..intake.normalize import Step
from ..isolation.protocol import seed_all
from ..isolation.session import TEST_MODULE, ProtocolError, SandboxGone, Session
from .results import Result, Status, TestResult, clip, manual_answers, test_result

KEPT_TYPES = (types.FunctionType, type, types.ModuleType)
MAX_OUTPUT = 10_000  # characters of one cell's output kept in the graded copy
MAX_TOTAL_OUTPUT = 1_000_000  # characters of output kept, all cells together
MAX_FIGURES_TOTAL = 8_000_000  # characters of base64 PNG kept, all figures together


def _seed(seed: int) -> None:
    import numpy  # noqa: F401  imported first, so that seed_all seeds them
    import torch  # noqa: F401

    seed_all(seed)


def free_and_bound_names(code: str) -> tuple[set[str], set[str]]:
    """(names a test reads that it does not bind, names it binds at top level)."""
    tree = ast.parse(code)
    loads, stores = set(), set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            (loads if isinstance(node.ctx, ast.Load) else stores).add(node.id)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            stores.add(node.name)
        elif isinstance(node, ast.arg):
            stores.add(node.arg)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            stores.update((a.asname or a.name).split(".")[0] for a in node.names)
        elif isinstance(node, ast.ExceptHandler) and node.name:
            stores.add(node.name)
    return loads - stores, stores


def _short(text: str, limit: int = MAX_OUTPUT) -> str:
    return text if len(text) <= limit else text[:limit] + f"\n... [{len(text) - limit} more " \
                                                          "characters truncated]"


def _message(exc: BaseException) -> str:
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _raised_in(exc: BaseException, filename: str) -> bool:
    """Whether the innermost frame of ``exc`` is the test cell's own code (not a proxied call
    into the student's code, whose errors the grader's proxy raises)."""
    tb = exc.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    return tb is not None and tb.tb_frame.f_code.co_filename == filename


def name_hint(exc: NameError, filename: str) -> str:
    """What a student can do about a NameError in a test. A test reading a ``_``-prefixed name
    it does not define reads a helper of the grader's, which only an earlier test cell could
    have left behind: not the student's to fix, so say so instead of asking for that name."""
    name = getattr(exc, "name", None)
    if not isinstance(name, str):
        match = re.search(r"name '([^']+)' is not defined", str(exc))
        name = match.group(1) if match else ""
    if name.startswith("_") and _raised_in(exc, filename):
        return (f": {name} is a helper of the grader's, not a name you should define; an "
                "earlier test cell failed before defining it, so this cell could not check your "
                "answer. This is a bug in the grader, not in your code: please report it")
    return " (is the function defined, under exactly this name?)"


def _failed_in_hidden(exc: BaseException, filename: str, hidden: set[int]) -> bool:
    """Whether the test cell's own line that raised lies in a hidden block."""
    line = None
    tb = exc.__traceback__
    while tb is not None:
        if tb.tb_frame.f_code.co_filename == filename:
            line = tb.tb_lineno
        tb = tb.tb_next
    return line in hidden


def grade_steps(steps: list[Step], sandbox, box) -> Result:
    """Grade one planned submission (``normalize.plan``) in a sandbox of its own: ``box``, one
    that ``sandbox.start`` started for it (the name of a new one is accepted too). Every way
    of grading calls this."""
    return Grading(steps, sandbox, sandbox.start(box) if isinstance(box, str) else box).run()


class Grading:
    """Runs a plan; collects per-cell outputs and per-test results."""

    def __init__(self, steps: list[Step], sandbox, box):
        self.steps, self.sandbox, self.box = steps, sandbox, box
        self.limits = sandbox.limits
        self.trusted = {"__name__": TEST_MODULE, "__builtins__": builtins}
        self.outputs: list[dict] = [{} for _ in steps]
        self.tests: list[TestResult] = []
        self.problems: list[str] = []
        self.status = Status.GRADED
        self.output_left = MAX_TOTAL_OUTPUT
        self.figures_left = MAX_FIGURES_TOTAL

    def run(self) -> Result:
        start = time.monotonic()
        stop, session, i = "", None, 0
        try:
            session = Session(self.sandbox, self.box)
            for i, step in enumerate(self.steps):
                left = self.limits.timeout_notebook - (time.monotonic() - start)
                if left <= 0:
                    self.status = Status.TIMEOUT
                    stop = (f"the notebook ran past its total time limit of "
                            f"{self.limits.timeout_notebook:g} s; later tests were not run")
                    break
                seconds = min(self.limits.timeout_cell, left)
                if step.kind in ("code", "given"):
                    self._cell(session, i, step, seconds)
                elif step.kind == "test":
                    self._test(session, i, step, seconds)
        except SandboxGone as gone:
            self.status = Status.TIMEOUT if gone.timed_out else Status.CRASHED
            where = self._where(i)
            stop = f"{where} {gone.reason}; tests that finished keep their points, later ones " \
                   "score 0"
        except ProtocolError as err:
            self.status = Status.CRASHED
            stop = f"the notebook broke the grader's connection to it ({err}); tests that " \
                   "finished keep their points, later ones score 0"
        finally:
            if session is not None:
                session.close()
            else:  # it never answered: stop what was started
                self.sandbox.stop(self.box)
        done = {t["test"] for t in self.tests}
        for step in self.steps:
            if step.kind == "test" and step.grade_id not in done:
                done.add(step.grade_id)
                self.tests.append(test_result(step.grade_id, step.points, False, "not run: " + (
                    stop or "the grading stopped"), step.source))
        order = {s.grade_id: k for k, s in enumerate(self.steps) if s.kind == "test"}
        self.tests.sort(key=lambda t: order[t["test"]])
        if stop:
            self.problems.insert(0, stop)
        return {"status": self.status, "message": clip(" ".join(self.problems), 1000),
                "tests": self.tests, "manual": manual_answers(self.steps),
                "outputs": self.outputs}

    def _kept(self, text: str) -> str:
        """What of one output the graded copy keeps: MAX_OUTPUT characters of each, and
        MAX_TOTAL_OUTPUT of all together (the first time that runs out, the result says so)."""
        text = _short(text)
        if len(text) <= self.output_left:
            self.output_left -= len(text)
            return text
        if self.output_left >= 0:
            self.problems.append(f"the notebook printed more than {MAX_TOTAL_OUTPUT:,} "
                                 "characters of output in all; the graded copy keeps the first "
                                 "ones only (this costs no points).")
        kept, self.output_left = text[:max(self.output_left, 0)], -1
        return kept + ("\n... [output not kept: the notebook's output limit was reached]"
                       if text else "")

    def _figures(self, figures) -> list[str]:
        """The figures a cell drew (base64 PNG text), MAX_FIGURES_TOTAL characters of them in
        all: graders see students' plots; a notebook drawing hundreds keeps the first."""
        kept = []
        for figure in figures if type(figures) is list else []:
            if type(figure) is str and len(figure) <= self.figures_left:
                self.figures_left -= len(figure)
                kept.append(figure)
        return kept

    def _where(self, i: int) -> str:
        step = self.steps[i]
        return (f"during test {step.grade_id}," if step.kind == "test" else
                f"in cell {i + 1} ({step.grade_id or 'your code'}),")

    def _cell(self, session: Session, i: int, step: Step, seconds: float) -> None:
        if step.kind == "given":
            try:
                exec(compile(step.source, f"<{step.grade_id}>", "exec"), self.trusted)
            except Exception as exc:
                self.problems.append(f"the instructor's cell {step.grade_id} failed in the "
                                     f"grader ({_message(exc)}); please report this.")
        reply = session.run_cell(step.source, i, seconds)
        self.outputs[i] = {"stdout": self._kept(str(reply.get("stdout", ""))),
                           "stderr": self._kept(str(reply.get("stderr", ""))),
                           "figures": self._figures(reply.get("figures"))}
        if not reply.get("ok", False):
            ename = str(reply.get("ename", "Error"))
            evalue = clip(str(reply.get("evalue", "")), 500)
            self.outputs[i]["error"] = (ename, evalue)
            if ename == "CellTimeout":
                self.status = Status.TIMEOUT
                self.problems.append(f"cell {i + 1} ran past the {seconds:g} s limit and was "
                                     "stopped (an infinite loop?).")
            elif ename == "SystemExit":
                self.problems.append(f"cell {i + 1} called sys.exit() or exit(); that cell "
                                     "stopped there, the rest ran.")
            else:
                self.problems.append(f"cell {i + 1} ({step.grade_id or 'your code'}) raised "
                                     f"{ename}: {clip(evalue, 200)}.")

    def _test(self, session: Session, i: int, step: Step, seconds: float) -> None:
        session.begin_test_cell(seconds)
        missing, binds = free_and_bound_names(step.source)
        scope = dict(self.trusted)
        unsendable = None  # a name of the student's whose value cannot be graded
        for name in sorted(missing - set(scope) - set(dir(builtins))):
            try:
                scope[name] = session.get(name, session.budget())
            except KeyError:
                pass
            except (SandboxGone, ProtocolError):
                raise
            except Exception as exc:  # raised when the test reads it, with its name
                unsendable = unsendable or RuntimeError(f"your {name} could not be graded: "
                                                        f"{_message(exc)}")
        _seed(i)
        out = io.StringIO()
        passed, message, in_hidden, failure = False, "", False, ""
        filename, hidden = f"<test {step.grade_id}>", hidden_lines(step.source)
        try:
            if unsendable is not None:
                raise unsendable
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
                exec(compile(step.source, filename, "exec"), scope)
            passed = True
        except (SandboxGone, ProtocolError):
            raise
        except Exception as exc:
            message, failure = _message(exc), type(exc).__name__
            if isinstance(exc, NameError):
                message += name_hint(exc, filename)
            in_hidden = _failed_in_hidden(exc, filename, hidden)
            if in_hidden:
                before = ("the visible tests passed, a hidden check failed" if
                          has_visible_code(step.source) else
                          "a hidden check failed (this cell has no visible tests)")
                message = f"{before}: {message}"
        if not passed and step.note:  # where the student put this test may be why
            message = f"{message} ({step.note})"
        if session.timed_out:
            self.status = Status.TIMEOUT
        # later cells may use the functions, classes and modules a test cell defines; the
        # data it held (values decoded from the sandbox among them) is released here
        self.trusted.update({k: v for k, v in scope.items()
                             if k in binds and isinstance(v, KEPT_TYPES)})
        self.tests.append(test_result(step.grade_id, step.points, passed, message, step.source,
                                      hidden_failed=in_hidden))
        self.outputs[i] = {"stdout": self._kept(out.getvalue())}
        if message:  # shown as "<type>: <message>", the reason said once
            self.outputs[i]["error"] = (failure, message)

