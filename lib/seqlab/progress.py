"""Progress bars that read well live and in saved notebooks."""

from __future__ import annotations

import os


def progress_bar(*args, **kwargs):
    """``tqdm`` with Jupyter's widget when someone watches; plain text when the notebook runs
    headless (``python -m seqlab.course`` sets ``SEQLAB_NOTEBOOK``), because a saved copy keeps
    a widget's first frame, 0%, but keeps every line of text, the final state included."""
    if os.environ.get("SEQLAB_NOTEBOOK"):
        from tqdm.std import tqdm

        kwargs.update(leave=True, mininterval=10)  # keep the final line; few redraws
    else:
        from tqdm.auto import tqdm
    return tqdm(*args, **kwargs)
