"""Every figure a lecture shows carries its title as alt text.

An IPython extension (``python -m seqlab.course`` loads it into each kernel it starts): a
matplotlib figure's output gets the metadata ``{"image/png": {"alt": ...}}``, the figure's
suptitle or else its axes' titles, which the course's book puts on the picture for readers who
cannot see it. The picture itself is still drawn by the inline backend; the extension only adds
metadata, through IPython's mime-bundle formatter, which the backend never replaces.
"""

from __future__ import annotations


def alt_text(figure) -> str:
    """The figure's suptitle, else the titles of its axes in reading order, joined by "; "
    (an empty string for a figure without any title)."""
    suptitle = getattr(figure, "_suptitle", None)
    if suptitle is not None and suptitle.get_text().strip():
        return " ".join(suptitle.get_text().split())
    titles = []
    for ax in figure.axes:
        for loc in ("left", "center", "right"):
            text = " ".join(ax.get_title(loc=loc).split())
            if text and text not in titles:
                titles.append(text)
    return "; ".join(titles)


def _metadata(figure):
    alt = alt_text(figure)
    return {}, ({"image/png": {"alt": alt}} if alt else {})  # the inline backend draws PNG


def load_ipython_extension(ipython) -> None:
    """Register the alt text for matplotlib figures (without importing matplotlib)."""
    ipython.display_formatter.mimebundle_formatter.for_type_by_name(
        "matplotlib.figure", "Figure", _metadata)
