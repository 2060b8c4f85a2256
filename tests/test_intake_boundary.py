"""One student's file never stops the class: whatever is wrong with it (a damaged, encrypted
or Deflate64 zip member, JSON nested too deeply, a name too long for Linux, a notebook of
200,000 cells, output by the megabyte, a value of millions of lists) is that student's row, with
a message they can act on, and every other student is graded as if it were not there.

Fuzzed with Hypothesis at intake (every export a student's file can make must give one
submission per student, the others' unchanged, and a notebook the workers can plan or refuse
with a message), and graded end to end on the cases named in the issue that found them."""

import io
import json
import zipfile

import pytest
from helpers import coded_solution
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from autograder.course import source_notebook
from autograder.intake.normalize import MAX_CELLS, plan, read_notebook
from autograder.intake.submissions import collect, fit_name
from autograder.isolation.sandbox import Limits, sandbox_problem

A = "01_language_models"
SOLUTION = json.dumps(coded_solution(A), indent=1).encode()  # graded, nothing left by hand
MASTER = read_notebook(source_notebook(A))
HONEST = {  # Canvas flat files: user ids 101 and 102
    "smithjohn_101_9001_01_language_models.ipynb": SOLUTION,
    "doejane_102_9002_01_language_models.ipynb": SOLUTION.replace(b"Counter()", b"{}"),
}
WHEN = (2026, 11, 1, 10, 0, 0)


# --- zips as students' machines and LMSs make them, damaged the ways they come ---------------
def _zip(files: dict[str, bytes], method=zipfile.ZIP_STORED) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", method) as zf:
        for name, data in files.items():
            zf.writestr(zipfile.ZipInfo(name, date_time=WHEN), data)
    return buffer.getvalue()


def _patch_headers(data: bytes, name: str, *, flags: int = 0, method: int | None = None) -> bytes:
    """The zip ``data`` with member ``name``'s headers (local and central) changed: ``flags``
    set (1: encrypted), ``method`` replaced (9: Deflate64, which Python cannot read)."""
    raw, encoded = bytearray(data), name.encode()
    for signature, flag_at, name_length_at, name_at in ((b"PK\x03\x04", 6, 26, 30),
                                                        (b"PK\x01\x02", 8, 28, 46)):
        at = raw.find(signature)
        while at != -1:
            length = int.from_bytes(raw[at + name_length_at:at + name_length_at + 2], "little")
            if bytes(raw[at + name_at:at + name_at + length]) == encoded:
                flag = int.from_bytes(raw[at + flag_at:at + flag_at + 2], "little") | flags
                raw[at + flag_at:at + flag_at + 2] = flag.to_bytes(2, "little")
                if method is not None:
                    raw[at + flag_at + 2:at + flag_at + 4] = method.to_bytes(2, "little")
            at = raw.find(signature, at + 4)
    return bytes(raw)


def _seen(subs) -> dict:
    return {s.student_id: (s.name, s.problem, s.note,
                           s.notebook.read_bytes() if s.notebook else None) for s in subs}


def _damaged(data: bytes, name: str, damage: str) -> bytes:
    """The zip ``data`` with member ``name`` damaged: "encrypted", "deflate64", "crc" (a byte
    of its data flipped) or "" (left alone)."""
    if damage == "encrypted":
        return _patch_headers(data, name, flags=1)
    if damage == "deflate64":
        return _patch_headers(data, name, method=9)
    if damage == "crc":  # the member is stored: its data follows its name in the local header
        start = data.find(b"PK\x03\x04")
        while start != -1:
            length = int.from_bytes(data[start + 26:start + 28], "little")
            if data[start + 30:start + 30 + length] == name.encode():
                size = int.from_bytes(data[start + 18:start + 22], "little")
                extra = int.from_bytes(data[start + 28:start + 30], "little")
                if size:
                    at = start + 30 + length + extra + size // 2
                    return data[:at] + bytes([data[at] ^ 0xFF]) + data[at + 1:]
                return data
            start = data.find(b"PK\x03\x04", start + 4)
    return data


def _collect(tmp_path, files: dict[str, bytes], zipped: bool, tag: str, damage: str = ""):
    """collect() of an export holding ``files``, zipped (the last member damaged as
    ``_damaged`` says) or as a folder."""
    folder = tmp_path / f"export-{tag}"
    if zipped:
        folder.mkdir()
        archive = folder / "export.zip"
        archive.write_bytes(_damaged(_zip(files), list(files)[-1], damage))
        return collect(archive, A, tmp_path / f"scratch-{tag}")
    for name, data in files.items():
        path = folder / fit_name(name)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    return collect(folder, A, tmp_path / f"scratch-{tag}")


def _planned_or_refused(sub) -> None:
    """What a grading worker does with a notebook: plan it, or refuse it with ValueError (a
    message for the student); anything else would be a grader failure."""
    if sub.notebook is None:
        assert sub.problem, sub
        return
    try:
        plan(MASTER, read_notebook(sub.notebook))
    except ValueError as err:
        assert str(err)


# --- what a fuzzed file may hold ---------------------------------------------------------
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(st.text(max_size=8), inner,
                                                                max_size=5),
    max_leaves=30)


@st.composite
def notebooks(draw) -> bytes:
    """Notebook-like JSON: the solution's cells shuffled, cut, given odd types and metadata."""
    nb = json.loads(SOLUTION)
    cells = draw(st.lists(st.sampled_from(nb["cells"]), max_size=12))
    odd = draw(st.lists(json_values, max_size=3))
    nb["cells"] = cells + odd
    nb["metadata"] = draw(json_values)
    return json.dumps(nb).encode()


def _mutated(data: bytes, cuts: list[tuple[int, int]]) -> bytes:
    out = bytearray(data)
    for where, byte in cuts:
        if out:
            out[where % len(out)] = byte
    return bytes(out)


contents = st.one_of(
    st.binary(max_size=300),
    notebooks(),
    st.builds(lambda v: json.dumps(v).encode(), json_values),
    st.integers(1, 60_000).map(lambda depth: b"[" * depth + b"]" * depth),
    st.integers(1, 60_000).map(lambda d: b'{"cells": [' + b"[" * d + b"]" * d + b"]}"),
    st.builds(_mutated, st.just(SOLUTION), st.lists(st.tuples(st.integers(0, 10**6),
                                                              st.integers(0, 255)),
                                                    max_size=8)),
    st.builds(lambda nb: _zip({"hw/01.ipynb": nb}), notebooks()),
    st.builds(lambda z, c: _mutated(z, c), st.just(_zip({"hw/01.ipynb": SOLUTION})),
              st.lists(st.tuples(st.integers(0, 10**6), st.integers(0, 255)), min_size=1,
                       max_size=4)),
)
original_names = st.one_of(
    st.sampled_from(["01_language_models.ipynb", "hw.zip", "hw.json", "notes.ipynb.txt",
                     "report.pdf", "noextension"]),
    st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="/\x00"),
            min_size=1, max_size=120).map(lambda t: t + ".ipynb"),
    st.integers(1, 120).map(lambda n: "作" * n + ".ipynb"),
)


@settings(max_examples=60, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(content=contents, original=original_names, zipped=st.booleans(),
       damage=st.sampled_from(["", "encrypted", "deflate64", "crc"]))
def test_a_fuzzed_file_is_its_students_alone(tmp_path_factory, content, original, zipped,
                                             damage):
    tmp = tmp_path_factory.mktemp("fuzz")
    alone = _seen(_collect(tmp, HONEST, zipped, "alone"))
    files = {**HONEST, f"fuzz_777_9003_{original}": content}
    subs = _collect(tmp, files, zipped, "with", damage)
    seen = _seen(subs)
    assert len(seen) == 3, "one submission per student, the fuzzed one's under some key"
    assert {k: seen[k] for k in alone} == alone, "the others read exactly as without it"
    for sub in subs:
        _planned_or_refused(sub)


def test_names_too_long_for_linux_keep_their_id_and_extension():
    name = "smithjohn_101_9001_" + "作" * 96 + ".ipynb"  # 307 bytes: fine on macOS and Windows
    fitted = fit_name(name)
    assert len(fitted.encode()) <= 255
    assert fitted.startswith("smithjohn_101_9001_") and fitted.endswith(".ipynb")
    assert fit_name(name.replace("作", "字")) != fitted  # two long names stay two
    assert fit_name("a\0b/c.ipynb") == "a_b_c.ipynb"


# --- graded end to end ------------------------------------------------------------------
pytestmark_sandbox = pytest.mark.skipif(bool(sandbox_problem()),
                                        reason=f"needs bubblewrap: {sandbox_problem()}")
LIMITS = Limits(timeout_cell=20, timeout_notebook=120, memory_mb=2048, max_procs=64)


def _with_cells(cells: list[dict], after: str = "") -> bytes:
    """The solution with ``cells`` added after the cell ``after`` (a grade_id), or at its end."""
    nb = json.loads(SOLUTION)
    at = next((i + 1 for i, c in enumerate(nb["cells"])
               if c["metadata"].get("nbgrader", {}).get("grade_id") == after), len(nb["cells"]))
    nb["cells"][at:at] = cells
    return json.dumps(nb).encode()


def _code(source: str) -> dict:
    return {"cell_type": "code", "source": source, "metadata": {}, "outputs": [],
            "execution_count": None}


@pytest.fixture(scope="module")
def nasty_export(tmp_path_factory):
    """A Canvas export: the two honest students, and one student per way a file broke a run."""
    tmp = tmp_path_factory.mktemp("nasty")
    deep = b"[" * 200_000 + b"]" * 200_000
    files = {
        **HONEST,
        "deepjson_201_9101_01_language_models.json": deep,
        "deepnb_202_9102_01_language_models.ipynb": b'{"cells": [], "metadata": ' + deep + b"}",
        "crc_203_9103_01_language_models.ipynb": SOLUTION,
        "locked_204_9104_01_language_models.ipynb": SOLUTION,
        "deflate_205_9105_01_language_models.ipynb": SOLUTION + b" ",
        "badzip_206_9106_hw.zip": _zip({"hw/01_language_models.ipynb": SOLUTION})[:-40],
        "longname_207_9107_" + "作" * 96 + ".ipynb": SOLUTION,
        "cells_208_9108_01_language_models.ipynb": json.dumps(
            {"cells": [{"cell_type": "markdown", "source": "", "metadata": {}}] * 200_000,
             "metadata": {}, "nbformat": 4, "nbformat_minor": 5}).encode(),
        "printer_209_9109_01_language_models.ipynb": _with_cells(
            [_code("print('x' * 40_000)")] * 150),
        "lists_210_9110_01_language_models.ipynb": _with_cells(
            [_code("perplexity = [[] for _ in range(1_200_000)]")], after="perplexity"),
    }
    data = _zip(files)
    for name in files:  # damage three members the ways Windows zips and LMSs deliver them
        if name.startswith("crc_"):
            start = data.find(name.encode())
            at = data.find(SOLUTION[:200], start) + 1000
            data = data[:at] + bytes([data[at] ^ 0xFF]) + data[at + 1:]
        elif name.startswith("locked_"):
            data = _patch_headers(data, name, flags=1)
        elif name.startswith("deflate_"):
            data = _patch_headers(data, name, method=9)
    archive = tmp / "export.zip"
    archive.write_bytes(data)
    honest = tmp / "honest.zip"
    honest.write_bytes(_zip(HONEST))
    return archive, honest


EXPECTED = {  # student -> (status, words in the message)
    "201": ("ungradable", "nested too deeply"),
    "202": ("ungradable", "nested too deeply"),
    "203": ("ungradable", "damaged in the export (a bad checksum); submit it again"),
    "204": ("ungradable", "password-protected; submit the .ipynb file without a password"),
    "205": ("ungradable", "cannot be read here (Windows' Deflate64"),
    "206": ("ungradable", "the zip hw.zip could not be read"),
    "207": ("graded", ""),
    "208": ("ungradable", f"over the {MAX_CELLS:,} a submission may have"),
    "209": ("graded", "characters of output in all; the graded copy keeps the first"),
    "210": ("graded", "holds over 1,000,000 lists, tuples, sets or dicts"),
}


@pytestmark_sandbox
def test_a_class_with_every_broken_file_grades_everyone(nasty_export, tmp_path):
    from autograder.scoring.grade import grade

    archive, honest = nasty_export
    rows = {r["student_id"]: r for r in grade(A, archive, tmp_path / "out", limits=LIMITS,
                                             workers=2, log=lambda *a: None)}
    alone = {r["student_id"]: r for r in grade(A, honest, tmp_path / "alone", limits=LIMITS,
                                              workers=2, log=lambda *a: None)}
    assert sorted(rows) == sorted(["101", "102", *EXPECTED]), "one row per student"
    def graded(row):  # flags compare a student with classmates, and 207, 209, 210 hand in
        return {k: v for k, v in row.items() if k != "flags"}  # copies of 101's notebook

    assert {s: graded(rows[s]) for s in alone} == {s: graded(r) for s, r in alone.items()}, \
        "the others graded as if the rest were not there"
    for student, (status, words) in EXPECTED.items():
        assert rows[student]["status"] == status, rows[student]
        assert words in rows[student]["message"], rows[student]
    full = float(alone["101"]["score"])
    assert float(rows["207"]["score"]) == full  # the long name is only a name
    assert float(rows["209"]["score"]) == full  # printing costs no points
    assert float(rows["210"]["score"]) == full - 3  # only the test that reads the value
    copy = tmp_path / "out" / "course" / "autograded" / "209" / A / f"{A}.ipynb"
    assert copy.stat().st_size < 1_300_000  # 150 x 40 KB printed, about 1 MB kept
