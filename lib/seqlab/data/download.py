"""Download a file once, verify it, keep it: mirrors, checksums, atomic writes, offline errors.

Dead links broke other courses for months, so every remote file lists several sources tried in
order, and the small corpora FAST mode needs ship inside the package (``bundled/``): ``ensure``
unpacks those into the cache without touching the network. A file enters the cache only after
its checksum matches (temp file, then ``os.replace``), and the checksum is checked again on every
cache hit, so a truncated or edited copy is refused instead of silently training on garbage.
"""

from __future__ import annotations

import gzip
import hashlib
import os
import shutil
import tempfile
import urllib.error
import urllib.request
from dataclasses import dataclass
from functools import partial
from pathlib import Path

from ..progress import progress_bar

DEFAULT_TIMEOUT = 20.0  # seconds per connection attempt: offline machines fail fast, never hang
_CHUNK = 1 << 16


@dataclass(frozen=True)
class RemoteFile:
    """One file of a dataset: where the cache keeps it, its checksum and where to get it.

    ``digest`` is ``"sha256:<hex>"`` (or ``"sha1:<hex>"`` where upstream only publishes SHA-1).
    ``bundled`` names a gzip file in ``seqlab/data/bundled`` holding the same bytes: the package's
    own copy, used before any url.
    """

    dataset: str
    filename: str
    digest: str
    urls: tuple[str, ...]
    homepage: str = ""
    bundled: str = ""

    def __post_init__(self):
        algo, _, hexdigest = self.digest.partition(":")
        if algo not in ("sha256", "sha1") or not hexdigest:
            raise ValueError(f"digest must be 'sha256:<hex>' or 'sha1:<hex>', got {self.digest!r}")
        if not self.urls and not self.bundled:
            raise ValueError(f"{self.dataset}/{self.filename}: a url or a bundled copy is needed")


class DownloadError(RuntimeError):
    """No source delivered a verified copy and none is cached; the message says what to do."""


class ChecksumError(RuntimeError):
    """A file's checksum does not match the one the course expects."""


def data_home() -> Path:
    """The cache folder: ``$SEQLAB_DATA`` or ``~/.cache/seqlab``."""
    return Path(os.environ.get("SEQLAB_DATA") or Path.home() / ".cache" / "seqlab")


def cache_path(remote: RemoteFile, root: Path | None = None) -> Path:
    return (root or data_home()) / remote.dataset / remote.filename


def file_digest(path: Path, algo: str = "sha256") -> str:
    h = hashlib.new(algo)
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(_CHUNK), b""):
            h.update(chunk)
    return h.hexdigest()


def verify(path: Path, digest: str) -> None:
    """Raise ``ChecksumError`` unless the file at ``path`` has ``digest``."""
    algo, _, expected = digest.partition(":")
    actual = file_digest(path, algo)
    if actual != expected:
        raise ChecksumError(
            f"{path} failed its checksum: {algo} is {actual}, expected {expected}. The file is "
            "corrupted or is a different version; delete it and load again to re-download, or "
            "place the correct file there."
        )


def _fetch(url: str, dest: Path, timeout: float, desc: str) -> None:
    """Stream ``url`` into ``dest``; raise on HTTP errors, timeouts and short bodies."""
    request = urllib.request.Request(url, headers={"User-Agent": "seqlab-course"})
    with urllib.request.urlopen(request, timeout=timeout) as response, open(dest, "wb") as out:
        total = response.headers.get("Content-Length")
        total = int(total) if total and total.isdigit() else None
        received = 0
        with progress_bar(total=total, unit="B", unit_scale=True, desc=desc, leave=False) as bar:
            for chunk in iter(lambda: response.read(_CHUNK), b""):
                out.write(chunk)
                received += len(chunk)
                bar.update(len(chunk))
    if total is not None and received != total:
        raise OSError(f"truncated download: got {received} of {total} bytes")


def bundled_path(remote: RemoteFile) -> Path | None:
    """The package's gzip copy of ``remote``, or None when it ships none."""
    if not remote.bundled:
        return None
    path = Path(__file__).with_name("bundled") / remote.bundled
    return path if path.exists() else None


def _unpack(archive: Path, dest: Path) -> None:
    with gzip.open(archive, "rb") as source, open(dest, "wb") as out:
        shutil.copyfileobj(source, out, _CHUNK)


def ensure(remote: RemoteFile, root: Path | None = None, timeout: float = DEFAULT_TIMEOUT) -> Path:
    """Return the path of a verified local copy of ``remote``: from the cache, else unpacked from
    the package's bundled copy, else downloaded from the first url that delivers."""
    path = cache_path(remote, root)
    if path.exists():
        verify(path, remote.digest)  # every cache hit: a corrupted copy is refused, not used
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    bundled, desc = bundled_path(remote), f"{remote.dataset}/{remote.filename}"
    sources = [(bundled, partial(_unpack, bundled))] if bundled else []
    sources += [(url, partial(_fetch, url, timeout=timeout, desc=desc)) for url in remote.urls]
    failures = []
    for source, fetch in sources:
        fd, tmp_name = tempfile.mkstemp(dir=path.parent, prefix=f".{remote.filename}.",
                                        suffix=".part")
        os.close(fd)
        tmp = Path(tmp_name)
        try:
            fetch(tmp)
            verify(tmp, remote.digest)
            os.replace(tmp, path)  # atomic: readers see the whole verified file or nothing
            return path
        except (urllib.error.URLError, OSError, ChecksumError, ValueError, EOFError) as err:
            failures.append(f"  {source}: {err}")
        finally:
            tmp.unlink(missing_ok=True)
    where = remote.urls[0] if remote.urls else f"the seqlab package's bundled/{remote.bundled}"
    raise DownloadError(
        f"Could not download dataset {remote.dataset!r} ({remote.filename}); every source failed:\n"
        + "\n".join(failures)
        + f"\nIf you are offline, download the file on a machine with internet "
        f"({where}{', see ' + remote.homepage if remote.homepage else ''}) and place it "
        f"at:\n  {path}\nIts {remote.digest.split(':')[0]} must be {remote.digest.split(':')[1]}. "
        "Or set SEQLAB_DATA to a folder that already holds it. Without a copy, use the toy data "
        "instead: load_corpus('toy-lm') or load_parallel('toy-mt')."
    )
