"""The course's book, built from the FAST runs the notebook tests make (``lecture_runs``: no
lecture runs twice), opened page by page in headless Chromium through Playwright.

Every page: no console error, no failed request, nothing asked of another host, every image
decoded and described (alt text), math typeset, every internal link and anchor found, the Colab
badge at the course's address, no sideways scrolling at 390 px. Search finds the lectures.
Screenshots of the home page and lectures 04 and 06, at desktop and phone width, are written
to ``$SEQLAB_ARTIFACTS/book-screenshots`` (CI keeps that folder), else to pytest's temporary
folder; the test prints where.
"""

import functools
import json
import re
import threading
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import unquote, urlsplit

import pytest
from helpers import chromium, screenshot_folder

from autograder.authoring.book import build_book, check_executed
from autograder.authoring.publish import ROOT
from seqlab.course import colab_address, colab_url, lecture_notebooks

DESKTOP, PHONE = {"width": 1280, "height": 900}, {"width": 390, "height": 844}
LECTURES = lecture_notebooks(ROOT / "notebooks")
SHOTS = ("index", "notebooks/04_attention", "notebooks/06_decoding")
# TeX a reader must never see: MathJax typesets every formula of a page.
RAW_TEX = re.compile(r"\\\(|\\\)|\\\[|\\\]|\$\$|\\begin\{|\\frac\{|\\sum_")


def _run_of(source: Path, spoil=None) -> str:
    """A run of the lecture ``source`` as it is (every cell counted), spoiled by ``spoil(nb,
    last_code_cell)``."""
    nb = json.loads(source.read_text())
    code = [cell for cell in nb["cells"] if cell["cell_type"] == "code"]
    for count, cell in enumerate(code, 1):
        cell["execution_count"] = count
    if spoil:
        spoil(nb, code[-1])
    return json.dumps(nb)


def test_a_run_that_is_missing_stale_failed_or_stopped_is_refused(tmp_path):
    """Checked before anything is built, with what to run."""
    source = ROOT / "notebooks" / "07_bleu.ipynb"
    run = tmp_path / source.name
    with pytest.raises(ValueError, match="07_bleu.ipynb is missing: run the lectures again"):
        check_executed(source, run)
    run.write_text(_run_of(source))
    check_executed(source, run)
    error = {"output_type": "error", "ename": "ValueError", "evalue": "", "traceback": []}
    for message, spoil in [
            ("cells differ", lambda nb, last: nb["cells"][-1]["source"].append("\nedited")),
            ("ended in an error", lambda nb, last: last["outputs"].append(error)),
            ("never ran", lambda nb, last: last.update(execution_count=None))]:
        run.write_text(_run_of(source, spoil))
        with pytest.raises(ValueError, match=message):
            check_executed(source, run)


@pytest.fixture(scope="module")
def book(tmp_path_factory, lecture_runs):
    """The built book, Sphinx's warnings, and how many figures the lecture runs drew."""
    executed = lecture_runs.all(LECTURES)
    out = tmp_path_factory.mktemp("book") / "site"
    warnings = build_book(executed, out, log=lambda line: None)
    drawn = sum("image/png" in output.get("data", {})
                  for path in LECTURES
                  for cell in json.loads((executed / path.name).read_text())["cells"]
                  for output in cell.get("outputs", []))
    return out, warnings, drawn


@pytest.fixture(scope="module")
def site(book):
    """The book on a local web server: its address."""

    class Quiet(SimpleHTTPRequestHandler):
        def log_message(self, *args):
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(Quiet, directory=book[0]))
    httpd.daemon_threads = True
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}/"
    httpd.shutdown()
    httpd.server_close()


@pytest.fixture(scope="module")
def browser():
    yield from chromium()


class Visit:
    """One browser tab on the book that records what a reader would see go wrong."""

    def __init__(self, browser, site):
        self.site, self.problems = site, []
        self.context = browser.new_context(viewport=DESKTOP)
        self.context.set_default_timeout(180_000)  # a shared machine can be very slow; no race
        self.context.route("**/*", self._only_the_book)
        self.page = self.context.new_page()
        self.page.on("console", lambda m: m.type == "error" and self.note(f"console: {m.text}"))
        self.page.on("pageerror", lambda e: self.note(f"script error: {e}"))
        self.page.on("requestfailed", lambda r: self.note(f"request failed: {r.url}"))
        self.page.on("response", lambda r: r.status >= 400 and self.note(
            f"HTTP {r.status}: {r.url}"))
        self.where = ""

    def note(self, problem: str) -> None:
        self.problems.append(f"{self.where}: {problem}")

    def _only_the_book(self, route):
        if route.request.url.startswith(self.site):
            route.continue_()
        else:
            self.note(f"request to another host: {route.request.url}")
            route.abort()

    def open(self, path: str) -> None:
        self.where = path
        self.page.set_viewport_size(DESKTOP)
        self.page.goto(self.site + path, wait_until="load")
        self.page.evaluate("""async () => {
            if (window.MathJax && MathJax.startup) await MathJax.startup.promise;
            await document.fonts.ready;
        }""")


def _pages(folder: Path) -> list[str]:
    return sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*.html")
                  if p.relative_to(folder).parts[0] != "_static")  # template parts, not pages


def _anchors(folder: Path) -> dict[str, set[str]]:
    """Page -> the ids its links may point at."""
    return {page: set(re.findall(r'\bid="([^"]+)"', (folder / page).read_text()))
            for page in _pages(folder)}


PAGE_FACTS = """() => {
    const article = document.querySelector('main') || document.body;
    const images = [...document.images].map(img => ({
        src: img.currentSrc || img.src, alt: (img.getAttribute('alt') || '').trim(),
        width: img.naturalWidth, inArticle: article.contains(img)}));
    const maths = [...document.querySelectorAll('.math')];
    const clone = article.cloneNode(true);
    clone.querySelectorAll('pre, code, script, style, mjx-container, mjx-assistive-mml')
        .forEach(e => e.remove());
    return {
        images,
        untypeset: maths.filter(m => !m.querySelector('mjx-container')).length,
        text: clone.textContent,
        links: [...document.querySelectorAll('a[href]')].map(a => a.href),
        badges: [...document.querySelectorAll('a')]
            .filter(a => a.querySelector('img[alt="Open In Colab"]')).map(a => a.href),
    };
}"""


def test_every_page_reads_well_in_a_browser(book, site, browser):
    folder, warnings, drawn = book
    assert warnings == [], "Sphinx warned:\n" + "\n".join(warnings)
    pages, anchors = _pages(folder), _anchors(folder)
    lectures = [f"notebooks/{p.stem}.html" for p in LECTURES]
    tasks = sorted(p.relative_to(folder).as_posix() for p in folder.glob("assignments/*.html"))
    assert set(lectures) | {"index.html", "search.html", "reference/index.html"} <= set(pages)
    assert len(tasks) == 8 and any(p.startswith("_modules/seqlab/") for p in pages)
    repo, branch = colab_address(ROOT / "pyproject.toml")
    colab = colab_url(repo, branch, "")  # every Colab link opens the course's address
    visit, figures = Visit(browser, site), 0
    for path in pages:
        visit.open(path)
        visit.page.evaluate("""() => Promise.all([...document.images].map(img => {
            img.loading = 'eager';  // a lazy image would load only when scrolled to
            return img.decode().catch(() => null);
        }))""")
        facts = visit.page.evaluate(PAGE_FACTS)
        note = visit.note
        for image in facts["images"]:
            if image["width"] == 0:
                note(f"image not decoded: {image['src']}")
            if image["inArticle"] and not image["alt"]:
                note(f"image without alt text: {image['src']}")
            if path in lectures and re.search(r"/_images/[0-9a-f]{64}\.png$", image["src"]):
                figures += 1  # a lecture's figure (MyST-NB names it after its bytes)
        if facts["untypeset"]:
            note(f"{facts['untypeset']} formula(s) not typeset by MathJax")
        if RAW_TEX.search(facts["text"]):
            note(f"raw TeX in the text: ...{RAW_TEX.search(facts['text']).group(0)}...")
        for link in facts["links"]:
            if link.startswith(site):
                problem = _broken(link[len(site):], path, anchors, folder)
                if problem:
                    note(problem)
            elif "colab.research.google.com" in link and not link.startswith(colab):
                note(f"Colab link not at the course's address: {link}")
        expected = ([colab_url(repo, branch, f"notebooks/{Path(path).stem}.ipynb")]
                    if path in lectures else
                    [colab_url(repo, branch, f"assignments/{Path(path).stem}/"
                                             f"{Path(path).stem}.ipynb")]
                    if path in tasks else [])
        if facts["badges"] != expected:
            note(f"Colab badge {facts['badges']}, expected {expected}")
        visit.page.set_viewport_size(PHONE)
        visit.page.wait_for_timeout(50)
        width = visit.page.evaluate("document.documentElement.scrollWidth")
        if width > PHONE["width"]:
            note(f"scrolls sideways at 390 px: {width} px wide")
    visit.context.close()
    assert figures == drawn > 20, f"{figures} of the {drawn} figures the lectures drew"
    assert not visit.problems, f"{len(visit.problems)} problem(s):\n" + "\n".join(visit.problems)


def _broken(target: str, page: str, anchors: dict[str, set[str]], folder: Path) -> str:
    """What is wrong with a link from ``page`` to ``target`` (a path on the book's server), or
    an empty string."""
    parts = urlsplit(target)
    path = unquote(parts.path) or page
    if path.endswith("/"):
        path += "index.html"
    if not (folder / path).is_file():
        return f"link to a missing file: {target}"
    if parts.fragment and path.endswith(".html") and parts.fragment not in anchors[path]:
        return f"link to a missing anchor: {target}"
    return ""


@pytest.mark.parametrize(("word", "lecture"), [("perplexity", "01_language_models"),
                                               ("beam", "06_decoding")])
def test_search_finds_the_lecture(book, site, browser, word, lecture):
    visit = Visit(browser, site)
    visit.open(f"search.html?q={word}")
    visit.page.wait_for_selector("#search-results ul.search li")
    hits = visit.page.eval_on_selector_all("#search-results ul.search li a",
                                           "links => links.map(a => a.href)")
    visit.context.close()
    assert any(f"notebooks/{lecture}.html" in hit for hit in hits), hits
    assert not visit.problems, visit.problems


def test_screenshots_of_home_and_two_lectures(book, site, browser, tmp_path_factory):
    """Artefacts for a person to look at: the top of each page and its first figure."""
    folder = screenshot_folder("book-screenshots", tmp_path_factory)
    visit = Visit(browser, site)
    for path in SHOTS:
        for width, size in (("desktop", DESKTOP), ("phone", PHONE)):
            visit.open(f"{path}.html")
            visit.page.set_viewport_size(size)
            name = path.replace("notebooks/", "")
            visit.page.screenshot(path=folder / f"{name}-{width}.png")
            figure = visit.page.query_selector(".cell_output img")
            if figure is not None:
                figure.scroll_into_view_if_needed()
                visit.page.screenshot(path=folder / f"{name}-{width}-figure.png")
    visit.context.close()
    print(f"book screenshots in {folder}")
    assert len(list(folder.glob("*.png"))) == 10
    assert not visit.problems, visit.problems
