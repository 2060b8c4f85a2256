"""Similarity of answers to the course library and to each other: a report for a person to read.

No rule can forbid text in a cell, and the student edition ships ``seqlab``, whose code answers
much of every assignment. So a grading run does what instructors do with MOSS: it fingerprints
every answer cell and reports those whose code is largely found in a library module or in another
student's answer to the same cell. A flag asks for a review; it never changes a score.

Fingerprints are copydetect's: the code is tokenized as Python, names become placeholders and
comments and layout are dropped (so renaming, reformatting and deleting comments change nothing),
and every k-gram of what is left is hashed. All k-grams are kept (a winnowing window of 1):
answers are short, and Python salts its string hash per process, so a winnowed selection, and
with it a similarity, would change from one run to the next. Code the release gives (signatures,
docstrings, given cells, visible tests) never counts.

``similarity`` of an answer to a match is the share of the answer's own code (its fingerprinted
characters, given code excluded) that is also in the match. A pair is reported when that share
is at least ``threshold`` and the shared code is at least ``min_match`` characters of tokenized
code: a one-line answer is the same whoever writes it, so it cannot be judged. The defaults are
measured in ``tests/test_similarity.py``: independent honest solutions stay below them, pastes
from the library and answers shared between students (renamed, reformatted, uncommented) above.
"""

from __future__ import annotations

import csv
import functools
import html
import importlib.util
import io
import json
import os
import tempfile
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, replace
from pathlib import Path

NOISE = 25          # k: the shortest shared run of tokenized code that counts, in characters
THRESHOLD = 0.85    # share of an answer found in one match
MIN_MATCH = 60      # shared tokenized characters (about three lines) to judge an answer at all
ADDED = "(added cells)"  # code cells a student added: compared as one more answer
COLUMNS = ("student_id", "cell", "match", "similarity")
MAX_CODE = 100_000  # characters of one answer fingerprinted; a longer one is cut there
SHOWN = 3           # matches of one answer shown side by side in the HTML (all are in the csv)


@dataclass(frozen=True)
class Match:
    """One reported pair: ``similarity`` of ``student_id``'s answer ``cell`` to ``match``."""

    student_id: str
    cell: str
    match: str           # a library module (``seqlab.decoding``) or another student's id
    similarity: float    # share of the answer's own code found in the match, 0..1
    shared: int          # characters of tokenized code they share
    answer_html: str     # the answer, shared regions marked (HTML-escaped)
    match_html: str      # the matching code, shared regions marked (HTML-escaped)


def _fingerprint(code: str, given=(), noise: int = NOISE):
    """copydetect's fingerprint of ``code`` without the k-grams of ``given`` code.

    copydetect's own boilerplate filter (``np.intersect1d(assume_unique=True)`` on a hash list
    that repeats a k-gram as often as the code does) would also drop repeated code, so the given
    k-grams are taken out of the fingerprint's hash index here instead."""
    from copydetect import CodeFingerprint
    from copydetect.utils import get_token_coverage

    fp = CodeFingerprint("answer.py", noise, 1, language="python",
                         fp=io.StringIO(code[:MAX_CODE]))
    if given:
        fp.hash_idx = {h: i for h, i in fp.hash_idx.items() if h not in given}
        fp.hashes = set(fp.hash_idx)
        fp.token_coverage = get_token_coverage(fp.hash_idx, noise, len(fp.filtered_code))
    return fp


class Given:
    """Code the release gives (signatures, docstrings, given cells, visible tests), which is
    never evidence of copying: its lines are taken out of an answer before fingerprinting (so
    the k-grams that join the given signature to the answer's first line do not dilute a short
    answer), and its k-grams out of what is left (given code retyped or reformatted)."""

    def __init__(self, code: Iterable[str] = (), noise: int = NOISE):
        code = list(code)
        self.lines = {line.strip() for c in code for line in c.splitlines()} - {""}
        self.hashes = frozenset().union(*(_fingerprint(c, noise=noise).hashes for c in code))

    def strip(self, answer: str) -> str:
        """The answer without the lines the release gives."""
        return "\n".join(line for line in answer.splitlines() if line.strip() not in self.lines)


def release_code(release: dict) -> list[str]:
    """Every code cell of a released notebook (a dict as ``normalize.read_notebook`` gives)."""
    return [c["source"] for c in release["cells"] if c["cell_type"] == "code"]


def answers(steps) -> dict[str, str]:
    """A student's code by answer cell, from the graded plan (``normalize.plan``): each answer
    cell under its grade_id, every cell the student added (or split off an answer) under
    ``ADDED``. Exactly the code that ran when graded."""
    out: dict[str, str] = {}
    for step in steps:
        source = _python_lines(step.source)
        if step.kind == "code" and source.strip():
            key = step.grade_id or ADDED
            out[key] = out.get(key, "") + source + "\n"
    return out


def _python_lines(source: str) -> str:
    """``source`` without shell and magic lines (``!pip install``, ``%cd``, a ``%%bash`` cell):
    notebook plumbing that many students add alike (from Colab's snippets), never evidence;
    grading skips most of it too."""
    if source.lstrip().startswith("%%"):
        return ""
    return "\n".join(line for line in source.splitlines()
                     if not line.lstrip().startswith(("!", "%")))


def answers_of(master: dict, notebook: Path | None) -> dict[str, str]:
    """``answers`` of a submitted notebook file; {} when it is missing or unreadable (it is
    ungradable then, and has nothing to compare)."""
    from ..intake.normalize import plan, read_notebook

    if notebook is None:
        return {}
    try:
        return answers(plan(master, read_notebook(notebook)))
    except Exception:  # whatever is wrong with the file, it has no answers to compare
        return {}


def library_sources(package: str = "seqlab") -> dict[str, str]:
    """Module name -> source of every module of the installed ``package`` (found, not imported),
    e.g. ``{"seqlab.lm": "...", "seqlab.data.vocab": "..."}``."""
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError(f"cannot find the package {package!r} to compare answers with")
    root = Path(next(iter(spec.submodule_search_locations)))
    sources = {}
    for path in sorted(root.rglob("*.py")):
        parts = (package, *path.relative_to(root).with_suffix("").parts)
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        sources[name] = path.read_text(encoding="utf-8", errors="replace")
    return sources


@functools.lru_cache(maxsize=256)
def _module_print(code: str, noise: int):
    """A library module's fingerprint: the same modules in every comparison of a run."""
    return _fingerprint(code, noise=noise)


def _marked(code: str, slices) -> str:
    from copydetect.utils import highlight_overlap

    text, _ = highlight_overlap(code, slices, "<mark>", "</mark>", truncate=8, escape_html=True)
    return text


class _Seen(dict):
    """Results of compared pairs of texts, kept where a text repeats: resubmitted, untouched or
    shared answers come again, and are compared once. Every other pair comes once, and keeping
    it would grow with the square of the class (about 350 bytes a pair: 88 GB at 10,000)."""

    def __init__(self, repeated: set[int]):
        super().__init__()
        self.repeated = repeated  # ids of fingerprints of texts more than one answer has

    def keep(self, fp, fp_other, result) -> None:
        if id(fp) in self.repeated or id(fp_other) in self.repeated:
            self[id(fp), id(fp_other)] = result


_UNSEEN = object()


def _pair(student, cell, other, fp, fp_other, threshold, min_match, both,
          seen: _Seen) -> list[Match]:
    """The reported directions of one comparison: the student's, and with ``both`` (``other``
    is a student too) the other's."""
    from copydetect import compare_files

    result = seen.get((id(fp), id(fp_other)), _UNSEEN)
    if result is _UNSEEN:
        result = None if fp.hashes.isdisjoint(fp_other.hashes) else \
            compare_files(fp, fp_other)[1:] + ({},)
        seen.keep(fp, fp_other, result)
    if result is None:
        return []
    (share, share_other), (slices, slices_other), marked = result
    found = []
    for side, who, what, sim, a, b, sa, sb in (
            (0, student, other, share, fp, fp_other, slices, slices_other),
            (1, other, student, share_other, fp_other, fp, slices_other, slices))[:1 + both]:
        shared = int(round(sim * a.token_coverage))  # tokenized characters of a in b
        if sim >= threshold and shared >= min_match:
            if side not in marked:
                marked[side] = _marked(a.raw_code, sa), _marked(b.raw_code, sb)
            found.append(Match(who, cell, what, round(float(sim), 3), shared, *marked[side]))
    return found


def compare(answers_by_student: Mapping[str, Mapping[str, str]], *,
            library: Mapping[str, str], given: Iterable[str] = (),
            students: Iterable[str] | None = None, threshold: float = THRESHOLD,
            min_match: int = MIN_MATCH, noise: int = NOISE) -> list[Match]:
    """Every reported pair for ``students`` (default: all of ``answers_by_student``): each answer
    against every ``library`` module (name -> source) and against every other student's answer
    to the same cell. ``given``: the release's code, subtracted from every answer. Ordered by
    student (as given), cell, then similarity (highest first)."""
    if not 0 < threshold <= 1:
        raise ValueError(f"threshold must be in (0, 1], got {threshold!r}")
    if isinstance(min_match, bool) or not isinstance(min_match, int) or min_match < 0:
        raise ValueError(f"min_match must be an int >= 0, got {min_match!r}")
    chosen = list(answers_by_student if students is None else students)
    unknown = [s for s in chosen if s not in answers_by_student]
    if unknown:
        raise ValueError(f"students {unknown} have no answers to compare")
    given, texts, uses = Given(given, noise), {}, Counter()
    for cells in answers_by_student.values():
        for code in cells.values():
            uses[code] += 1
            if code not in texts:  # one fingerprint per distinct text
                texts[code] = _fingerprint(given.strip(code), given.hashes, noise)
    seen = _Seen({id(texts[code]) for code, n in uses.items() if n > 1})
    prints = {s: {cell: texts[code] for cell, code in cells.items()}
              for s, cells in answers_by_student.items()}
    modules = {name: _module_print(code, noise) for name, code in library.items()}
    mine, found = set(chosen), []
    for student in chosen:
        for cell, fp in prints[student].items():
            for name, module in modules.items():
                found += _pair(student, cell, name, fp, module, threshold, min_match, False,
                               seen)
    others = list(answers_by_student)
    for i, a in enumerate(others):  # each pair of students once, both directions
        for b in others[i + 1:]:
            if a not in mine and b not in mine:
                continue
            for cell in prints[a].keys() & prints[b].keys():
                for m in _pair(a, cell, b, prints[a][cell], prints[b][cell], threshold,
                               min_match, True, seen):
                    if m.student_id in mine:
                        found.append(m)
    rank = {s: i for i, s in enumerate(chosen)}
    # cells in the order of the whole class, whoever is chosen: a shard's report and flags
    # then read as the unsharded run's
    cells = {c: i for i, c in enumerate(dict.fromkeys(
        c for answers in answers_by_student.values() for c in answers))}
    found.sort(key=lambda m: (rank[m.student_id], cells.get(m.cell, len(cells)),
                              -m.similarity, m.match))
    shown: dict[tuple, int] = {}  # the HTML shows the closest SHOWN matches of each answer
    for i, m in enumerate(found):
        shown[m.student_id, m.cell] = shown.get((m.student_id, m.cell), 0) + 1
        if shown[m.student_id, m.cell] > SHOWN:
            found[i] = replace(m, answer_html="", match_html="")
    return found


def flags(matches: Iterable[Match]) -> dict[str, str]:
    """student_id -> the cells to review, each with its closest match, e.g.
    ``"perplexity: seqlab.lm 0.94; count_ngrams: s017 1.00 (+2 more)"``."""
    by: dict[str, dict[str, list[Match]]] = {}
    for m in matches:
        by.setdefault(m.student_id, {}).setdefault(m.cell, []).append(m)
    out = {}
    for student, cells in by.items():
        parts = []
        for cell, ms in cells.items():
            best = max(ms, key=lambda m: m.similarity)
            more = f" (+{len(ms) - 1} more)" if len(ms) > 1 else ""
            parts.append(f"{cell}: {best.match} {best.similarity:.2f}{more}")
        out[student] = "; ".join(parts)
    return out


def _atomic(path: Path, text: str) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}")
    with os.fdopen(fd, "w", newline="", encoding="utf-8") as handle:
        handle.write(text)
    os.replace(tmp, path)


def write_report(matches: list[Match], *, out: Path, title: str = "Similarity report") -> None:
    """``out/similarity.csv`` (one row per reported pair), ``similarity.html`` (each pair side by
    side, shared code marked) and ``similarity.json`` (the same, for ``merge``)."""
    out = Path(out)
    text = io.StringIO()
    writer = csv.writer(text)
    writer.writerow(COLUMNS)
    writer.writerows([m.student_id, m.cell, m.match, f"{m.similarity:.3f}"] for m in matches)
    _atomic(out / "similarity.csv", text.getvalue())
    _atomic(out / "similarity.json", json.dumps([asdict(m) for m in matches], indent=1))
    _atomic(out / "similarity.html", _html(matches, title))


def read_report(folder: Path) -> list[Match]:
    """The pairs a grading output reported ([] when it has no report)."""
    path = Path(folder) / "similarity.json"
    return [Match(**m) for m in json.loads(path.read_text())] if path.exists() else []


def _html(matches: list[Match], title: str) -> str:
    shown = [m for m in matches if m.answer_html]
    rows = "\n".join(
        f"<h2>{html.escape(m.student_id)} · {html.escape(m.cell)} · {html.escape(m.match)}: "
        f"{m.similarity:.0%} of the answer ({m.shared} shared characters of tokenized code)</h2>"
        f"<table><tr><th>{html.escape(m.student_id)}</th><th>{html.escape(m.match)}</th></tr>"
        f"<tr><td><pre>{m.answer_html}</pre></td><td><pre>{m.match_html}</pre></td></tr>"
        "</table>" for m in shown)
    return ("<!doctype html><meta charset='utf-8'>"
            f"<title>{html.escape(title)}</title><style>"
            "table{width:100%;table-layout:fixed}td{vertical-align:top;width:50%}"
            "pre{white-space:pre-wrap;font-size:12px}mark{background:#fd8}</style>"
            f"<h1>{html.escape(title)}</h1><p>{len(matches)} pair(s) to review, all in "
            f"similarity.csv; here the closest {SHOWN} of each answer ({len(shown)}). Marked: "
            "code the two share (names, layout and comments ignored; code the release gives "
            "excluded). A pair is a reason to look, not a verdict: a flag never changes a "
            f"score.</p>\n{rows}\n")


def report_class(*, master: dict, notebooks: Mapping[str, Path | None], release: dict,
                 out: Path, students: Iterable[str] | None = None, log=print) -> dict[str, str]:
    """Compare the submitted ``notebooks`` (student_id -> file, None when there is none) with
    the installed ``seqlab`` and with each other (see ``compare``), write the report into
    ``out`` and return the flags of ``students`` (default: all). A failure here is logged and
    leaves the grades alone: every student then reads "not checked"."""
    chosen = list(notebooks if students is None else students)
    try:
        matches = compare({s: answers_of(master, path) for s, path in notebooks.items()},
                          library=library_sources(), given=release_code(release),
                          students=chosen)
        write_report(matches, out=out)
    except Exception as err:  # the report must never cost the grades
        log(f"similarity report failed ({type(err).__name__}: {err}); grades are unaffected")
        return {s: f"not checked: the similarity report failed ({type(err).__name__})"
                for s in chosen}
    found = flags(matches)
    log(f"similarity: {len(found)} of {len(chosen)} student(s) flagged for review "
        f"({out / 'similarity.html'})")
    return found


def library_only(*, answers_of_student: Mapping[str, str], release: dict | None,
                 threshold: float = THRESHOLD, min_match: int = MIN_MATCH) -> list[dict]:
    """One submission against the library alone (Gradescope grades one at a time, so it has
    no class to compare with): [{cell, match, similarity}] of the reported pairs."""
    matches = compare({"submission": answers_of_student}, library=library_sources(),
                      given=release_code(release) if release else (),
                      threshold=threshold, min_match=min_match)
    return [{"cell": m.cell, "match": m.match, "similarity": m.similarity} for m in matches]
