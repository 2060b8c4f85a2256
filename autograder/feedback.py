"""What a student may see about their grading: per-test points and error messages.

Built from the autograded notebook's outputs, never from its sources, so hidden tests (which
nbgrader restores into that notebook) stay hidden. Tracebacks are left out for the same reason:
they quote the failing line of test code.
"""

from __future__ import annotations

import html
import json
from pathlib import Path

import nbformat

MAX_MESSAGE = 500


def _shorten(text: str, limit: int = MAX_MESSAGE) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def test_results(autograded: Path | None, grades: dict[str, tuple[float, float]]) -> list[dict]:
    """One entry per graded test cell: name, points, max_points, passed, message."""
    errors: dict[str, str] = {}
    if autograded is not None and autograded.exists():
        nb = nbformat.read(autograded, as_version=4)
        for cell in nb.cells:
            grade_id = cell.metadata.get("nbgrader", {}).get("grade_id")
            for output in cell.get("outputs", []):
                if output.get("output_type") == "error" and grade_id:
                    value = output.get("evalue", "")
                    name = output.get("ename", "Error")
                    errors[grade_id] = _shorten(f"{name}: {value}" if value else
                                                f"{name} (a test failed; no message)")
    results = []
    for name, (points, max_points) in grades.items():
        passed = points >= max_points
        message = "" if passed else errors.get(name, "this test did not pass")
        results.append({"test": name, "points": points, "max_points": max_points,
                        "passed": passed, "message": message})
    return results


def write_feedback(folder: Path, row: dict, results: list[dict]) -> None:
    """``feedback.json`` and a self-contained ``feedback.html`` for one student."""
    folder.mkdir(parents=True, exist_ok=True)
    data = {**row, "tests": results}
    (folder / "feedback.json").write_text(json.dumps(data, indent=2))
    rows = "\n".join(
        f"<tr><td>{html.escape(r['test'])}</td><td>{r['points']:g} / {r['max_points']:g}</td>"
        f"<td>{'passed' if r['passed'] else 'failed'}</td>"
        f"<td>{html.escape(r['message'])}</td></tr>" for r in results
    )
    note = f"<p><b>{html.escape(row['message'])}</b></p>" if row["message"] else ""
    (folder / "feedback.html").write_text(
        "<!doctype html><meta charset='utf-8'>"
        f"<title>{html.escape(row['assignment'])}: {html.escape(row['student_id'])}</title>"
        f"<h1>{html.escape(row['assignment'])}</h1>"
        f"<p>Score: <b>{row['score']:g} / {row['max_score']:g}</b> ({html.escape(row['status'])})"
        f"</p>{note}<table border='1' cellpadding='4'><tr><th>test</th><th>points</th>"
        f"<th>result</th><th>message</th></tr>{rows}</table>\n"
    )
