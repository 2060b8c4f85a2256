"""What the course's book adds to Sphinx (``_config.yml`` loads it as an extension):

- every figure of a lecture gets its title as alt text: ``python -m seqlab.course`` stores it in
  the output's metadata (``seqlab.alt_text``), and MyST-NB names each picture it writes after the
  SHA-256 of its bytes, which is how a picture is matched with its output here;
- MathJax comes from the build, not a CDN: the files ``mathjax_path`` needs are copied from the
  ``django-static-mathjax`` package (MathJax 3, no Django needed) into ``_static/mathjax``.
"""

from __future__ import annotations

import base64
import hashlib
import json
import shutil
from pathlib import Path

from docutils import nodes

# What tex-chtml.js loads: the TeX extensions it autoloads, its fonts, the menu and the
# accessibility parts the menu can switch on. (Speech, the 4 MB ``sre``, is left out.)
MATHJAX_FILES = ("tex-chtml.js", "input/tex/extensions", "output/chtml/fonts/woff-v2", "ui",
                 "a11y")


def mathjax_folder() -> Path:
    """MathJax's ``es5`` folder in the installed ``django-static-mathjax``."""
    try:
        import mathjax
    except ImportError:
        raise RuntimeError("the book needs MathJax from the docs extra: pip install -e "
                           "'.[docs]' (or make setup)") from None
    return Path(mathjax.__file__).parent / "static" / "mathjax" / "es5"


def figure_alt_texts(folder: Path) -> dict[str, str]:
    """SHA-256 of each PNG output of the notebooks in ``folder`` -> the alt text its output
    metadata carries."""
    texts = {}
    for path in sorted(Path(folder).rglob("*.ipynb")):
        for cell in json.loads(path.read_text()).get("cells", []):
            for output in cell.get("outputs", []):
                png = output.get("data", {}).get("image/png")
                alt = output.get("metadata", {}).get("image/png", {}).get("alt")
                if png and alt:
                    data = base64.b64decode("".join(png) if isinstance(png, list) else png)
                    texts[hashlib.sha256(data).hexdigest()] = alt
    return texts


def _read_alt_texts(app) -> None:
    app.book_alt_texts = figure_alt_texts(Path(app.srcdir))


def _add_alt_texts(app, doctree) -> None:
    for image in doctree.findall(nodes.image):
        alt = app.book_alt_texts.get(Path(image["uri"]).stem)
        if alt and not image.get("alt"):
            image["alt"] = alt


def _copy_mathjax(app, exception) -> None:
    if exception is not None or app.builder.format != "html":
        return
    source, target = mathjax_folder(), Path(app.outdir) / "_static" / "mathjax"
    for relative in MATHJAX_FILES:
        if (source / relative).is_dir():
            shutil.copytree(source / relative, target / relative, dirs_exist_ok=True)
        else:
            (target / relative).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source / relative, target / relative)
    shutil.copy2(source.parent / "LICENSE", target / "LICENSE")


def setup(app):
    mathjax_folder()  # fail at the start, with the fix, when MathJax is missing
    app.connect("builder-inited", _read_alt_texts)
    app.connect("doctree-read", _add_alt_texts)
    app.connect("build-finished", _copy_mathjax)
    return {"parallel_read_safe": False, "parallel_write_safe": True}
