"""The notebook as graded, for formgrader and nbgrader's feedback: what the student wrote, the
instructor's cells as the release shows them, and what the grading run printed and drew.

Everything a student controls lands here as data. A written answer, and any markdown cell the
student added, is the HTML their markdown renders to with every tag, attribute and link checked
against an allowlist (``safe_markdown``): formgrader and nbgrader's feedback render markdown
on the server with raw HTML passed through, and would otherwise run a student's script in a
grader's browser. A figure is kept only as a PNG whose bytes were checked. Test cells show
their public source, so nbgrader's own feedback cannot quote a hidden test; no cell ever holds
the instructor's model answer.
"""

from __future__ import annotations

import base64
import binascii
import html

from ..intake.markers import public_source
from ..intake.normalize import TEXT_STUB, Step
from .results import rubric

PNG = b"\x89PNG\r\n\x1a\n"
MAX_IMAGE = 2 * 2**20  # bytes of one figure kept
TAGS = ["p", "br", "hr", "em", "strong", "del", "code", "pre", "blockquote", "ul", "ol", "li",
        "h1", "h2", "h3", "h4", "h5", "h6", "a", "table", "thead", "tbody", "tr", "th", "td",
        "sub", "sup"]
ATTRIBUTES = {"a": ["href", "title"], "th": ["align"], "td": ["align"]}


MARKDOWN = ("bleach", "nbconvert.filters.markdown_mistune")
"""What ``safe_markdown`` imports: 1.6 s, which grading's workers take from the fork server."""


def safe_markdown(text: str) -> str:
    """A student's markdown as a markdown cell that shows it and can run nothing: the HTML it
    renders to (with nbconvert's renderer, the one formgrader and nbgrader's feedback use, so
    what is checked is what they show), cleaned by bleach (only ``TAGS`` and ``ATTRIBUTES``,
    links to http, https and mailto), on one line inside a ``<div>``: a markdown renderer
    passes such an HTML block through as it is and parses no markdown in it. Math keeps its
    ``$...$`` text, which MathJax typesets in the page."""
    if text.strip() in ("", TEXT_STUB):  # nothing to render
        return f'<div class="student-text"><p>{html.escape(text.strip())}</p></div>'
    import bleach
    from nbconvert.filters.markdown_mistune import markdown2html_mistune

    try:
        rendered = markdown2html_mistune(text)
    except Exception:  # e.g. an image pasted into the cell (attachment:), which is not kept
        rendered = f"<pre>{html.escape(text)}</pre>"
    cleaned = bleach.clean(rendered, tags=TAGS, attributes=ATTRIBUTES,
                           protocols=["http", "https", "mailto"])
    return '<div class="student-text">' + cleaned.replace("\n", "&#10;") + "</div>"


def png(data) -> str | None:
    """``data`` (base64 text from the sandbox) if it is a PNG of at most MAX_IMAGE bytes."""
    if not isinstance(data, str) or len(data) > MAX_IMAGE * 4 // 3 + 4:
        return None
    try:
        raw = base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError):
        return None
    return data if raw.startswith(PNG) else None


def _rubric_cell(step: Step):
    import nbformat

    items = rubric(step.metadata)
    if not items:
        return None
    lines = [f"- {html.escape(i['criterion'])} ({i['points']:g} point"
             f"{'' if i['points'] == 1 else 's'})" for i in items]
    return nbformat.v4.new_markdown_cell(
        f"**Rubric for {step.grade_id}** (for graders; {step.points:g} points):\n\n"
        + "\n".join(lines))


def graded_notebook(steps: list[Step], outputs: list[dict], metadata: dict) -> str:
    """The notebook as graded, as JSON (see the module's docstring). Built where the submission
    was graded, never in the process that writes every student's grades."""
    import nbformat

    nb = nbformat.v4.new_notebook(metadata={k: v for k, v in metadata.items()
                                            if k in ("kernelspec", "language_info")})
    for step, out in zip(steps, outputs, strict=True):
        if step.kind == "markdown":  # the instructor's (from the master), or the student's
            source = step.source if step.grade_id else safe_markdown(step.source)
            nb.cells.append(nbformat.v4.new_markdown_cell(source, metadata=step.metadata))
            continue
        if step.kind == "written":
            nb.cells.append(nbformat.v4.new_markdown_cell(safe_markdown(step.source),
                                                          metadata=step.metadata))
            if (cell := _rubric_cell(step)) is not None:
                nb.cells.append(cell)
            continue
        source = public_source(step.source) if step.kind == "test" else step.source
        cell = nbformat.v4.new_code_cell(source, metadata=step.metadata)
        for stream in ("stdout", "stderr"):
            if out.get(stream):
                cell.outputs.append(nbformat.v4.new_output("stream", name=stream,
                                                           text=out[stream]))
        for image in filter(None, map(png, out.get("figures", []))):
            cell.outputs.append(nbformat.v4.new_output("display_data",
                                                       data={"image/png": image}))
        if out.get("error"):
            ename, evalue = out["error"]
            cell.outputs.append(nbformat.v4.new_output("error", ename=ename, evalue=evalue,
                                                       traceback=[f"{ename}: {evalue}"]))
        nb.cells.append(cell)
        if step.points and step.kind == "code" and (rc := _rubric_cell(step)) is not None:
            nb.cells.append(rc)
    return nbformat.writes(nb)
