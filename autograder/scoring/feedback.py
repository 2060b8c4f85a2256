"""What a student may see about their grading: per-test points and error messages.

Built from the test results only (each failure's exception message), never from test sources or
tracebacks, which would quote hidden tests.
"""

from __future__ import annotations

import html
import json
from pathlib import Path


def write_feedback(folder: Path, row: dict, results: list[dict]) -> None:
    """``feedback.json`` and a self-contained ``feedback.html`` for one student."""
    folder.mkdir(parents=True, exist_ok=True)
    data = {**row, "tests": results}
    (folder / "feedback.json").write_text(json.dumps(data, indent=2))
    rows = "\n".join(
        f"<tr><td>{html.escape(r['test'])}</td>"
        f"<td>{html.escape(_kind(r))}</td>"
        f"<td>{r['points']:g} / {r['max_points']:g}</td>"
        f"<td>{'passed' if r['passed'] else 'failed'}</td>"
        f"<td>{html.escape(r['message'])}</td></tr>" for r in results
    )
    note = f"<p><b>{html.escape(row['message'])}</b></p>" if row["message"] else ""
    (folder / "feedback.html").write_text(
        "<!doctype html><meta charset='utf-8'>"
        f"<title>{html.escape(row['assignment'])}: {html.escape(row['student_id'])}</title>"
        f"<h1>{html.escape(row['assignment'])}</h1>"
        f"<p>Score: <b>{row['score']:g} / {row['max_score']:g}</b> ({html.escape(row['status'])})"
        f"</p>{note}<table border='1' cellpadding='4'><tr><th>test</th><th>tests in it</th>"
        "<th>points</th>"
        f"<th>result</th><th>message</th></tr>{rows}</table>\n"
    )


def _kind(result: dict) -> str:
    """Which tests a cell holds: the visible ones you ran yourself, hidden checks, or both."""
    if result.get("visibility") == "hidden":
        return "hidden checks only"
    return "visible tests + hidden checks" if result.get("has_hidden") else "visible tests"
