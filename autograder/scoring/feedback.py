"""What a student may see about their grading: per-test points and error messages, and for each
answer graded by hand its rubric, the points a grader gave and the grader's comment.

Built from the results and the gradebook only (each failure's exception message), never from
test sources or tracebacks, which would quote hidden tests, and never from the instructor's
model answers. Every text is escaped in the HTML.
"""

from __future__ import annotations

import html
import json
from pathlib import Path


def write_feedback(folder: Path, row: dict, results: list[dict], manual: list[dict] = (),
                   parts: dict | None = None, cells: dict | None = None) -> None:
    """``feedback.json`` and a self-contained ``feedback.html`` for one student. ``manual``:
    their answers graded by hand (``results.ManualAnswer``); ``cells``: what the gradebook
    holds for each cell (``gradebook.read_grades``), once graders have been at work;
    ``parts``: the pieces of the row's message, kept so a later sync can rebuild it."""
    folder.mkdir(parents=True, exist_ok=True)
    answers = [{**m, **_given(m, (cells or {}).get(m["cell"]))} for m in manual]
    shown = {key: value for key, value in row.items() if key != "flags"}  # the instructor's
    data = {**shown, "tests": results, "manual": answers, "parts": parts or {}}
    (folder / "feedback.json").write_text(json.dumps(data, indent=2, default=str))
    rows = "\n".join(
        f"<tr><td>{html.escape(r['test'])}</td>"
        f"<td>{html.escape(_kind(r))}</td>"
        f"<td>{r['points']:g} / {r['max_points']:g}</td>"
        f"<td>{'passed' if r['passed'] else 'failed'}</td>"
        f"<td>{html.escape(r['message'])}</td></tr>" for r in results
    )
    note = f"<p><b>{html.escape(str(row['message']))}</b></p>" if row["message"] else ""
    score = row["score"] if row["score"] != "" else "not final"
    (folder / "feedback.html").write_text(
        "<!doctype html><meta charset='utf-8'>"
        f"<title>{html.escape(row['assignment'])}: {html.escape(row['student_id'])}</title>"
        f"<h1>{html.escape(row['assignment'])}</h1>"
        f"<p>Score: <b>{html.escape(_number(score))} / {_number(row['max_score'])}</b> "
        f"({html.escape(str(row['status']))})</p>{note}"
        "<table border='1' cellpadding='4'><tr><th>test</th><th>tests in it</th>"
        "<th>points</th>"
        f"<th>result</th><th>message</th></tr>{rows}</table>\n{_by_hand(answers)}"
    )


def _number(value) -> str:
    try:
        return f"{float(value):g}"
    except (TypeError, ValueError):
        return str(value)


def _given(answer: dict, cell: dict | None) -> dict:
    """The points and comment an answer has so far, in words for the student."""
    if answer["blank"]:
        return {"points": 0.0, "comment": "No response.", "state": "no response"}
    if cell is None or cell.get("manual") is None:
        return {"points": None, "comment": "", "state": "not graded yet"}
    return {"points": cell["manual"] + (cell.get("extra") or 0.0),
            "comment": cell.get("comment") or "", "state": "graded"}


def _by_hand(answers: list[dict]) -> str:
    if not answers:
        return ""
    blocks = []
    for a in answers:
        points = ("not graded yet" if a["points"] is None
                  else f"{a['points']:g} / {a['max_points']:g}")
        rubric = "".join(f"<li>{html.escape(r['criterion'])} ({r['points']:g})</li>"
                         for r in a.get("rubric", []))
        blocks.append(
            f"<h3>{html.escape(a['cell'])}: {html.escape(points)}</h3>"
            + (f"<p>Rubric:</p><ul>{rubric}</ul>" if rubric else "")
            + (f"<p>Comment: {html.escape(a['comment'])}</p>" if a["comment"] else ""))
    return "<h2>Answers graded by hand</h2>\n" + "\n".join(blocks) + "\n"


def _kind(result: dict) -> str:
    """Which tests a cell holds: the visible ones you ran yourself, hidden checks, or both."""
    if result.get("visibility") == "hidden":
        return "hidden checks only"
    return "visible tests + hidden checks" if result.get("has_hidden") else "visible tests"
