"""The download layer against a real HTTP server on 127.0.0.1: mirrors, checksums, offline."""

import hashlib
import time
from dataclasses import replace

import pytest
from helpers import BODY, Handler

from seqlab.data import ChecksumError, DownloadError, RemoteFile, corpora, ensure
from seqlab.data.download import cache_path

DIGEST = "sha256:" + hashlib.sha256(BODY).hexdigest()


def remote(*urls, digest=DIGEST):
    return RemoteFile("demo", "demo.txt", digest, tuple(urls), homepage="https://example.org")


def test_download_then_cache_hit(server, tmp_path):
    Handler.hits.clear()
    path = ensure(remote(f"{server}/ok.txt"), root=tmp_path)
    assert path == tmp_path / "demo" / "demo.txt" and path.read_bytes() == BODY
    ensure(remote(f"{server}/ok.txt"), root=tmp_path)
    assert Handler.hits == ["/ok.txt"]  # the second call is a verified cache hit


def test_404_then_next_mirror(server, tmp_path):
    path = ensure(remote(f"{server}/missing.txt", f"{server}/ok.txt"), root=tmp_path)
    assert path.read_bytes() == BODY


def test_truncated_body_falls_through_to_next_mirror(server, tmp_path):
    path = ensure(remote(f"{server}/truncated.txt", f"{server}/ok.txt"), root=tmp_path)
    assert path.read_bytes() == BODY


def test_wrong_checksum_everywhere_fails_and_leaves_nothing(server, tmp_path):
    with pytest.raises(DownloadError) as err:
        ensure(remote(f"{server}/other.txt", f"{server}/truncated.txt"), root=tmp_path)
    message = str(err.value)
    assert "failed its checksum" in message and "truncated download" in message
    assert list((tmp_path / "demo").iterdir()) == []  # no partial or unverified file


def test_offline_error_says_what_to_do(closed_port, tmp_path):
    start = time.monotonic()
    with pytest.raises(DownloadError) as err:
        ensure(remote(f"{closed_port}/ok.txt"), root=tmp_path)
    assert time.monotonic() - start < 10
    message = str(err.value)
    assert "'demo'" in message
    assert str(cache_path(remote("x"), tmp_path)) in message  # the exact file to place
    assert f"{closed_port}/ok.txt" in message and "https://example.org" in message
    assert "load_corpus('toy-lm')" in message  # the toy alternative


def test_a_hanging_server_times_out(server, tmp_path):
    start = time.monotonic()
    with pytest.raises(DownloadError, match="timed out"):
        ensure(remote(f"{server}/slow.txt"), root=tmp_path, timeout=0.5)
    assert time.monotonic() - start < 3


def test_corrupted_cache_is_refused(server, tmp_path):
    path = ensure(remote(f"{server}/ok.txt"), root=tmp_path)
    path.write_bytes(BODY[:-1] + b"?")
    with pytest.raises(ChecksumError, match="failed its checksum"):
        ensure(remote(f"{server}/ok.txt"), root=tmp_path)


def test_sha1_digests_are_supported(server, tmp_path):
    sha1 = "sha1:" + hashlib.sha1(BODY).hexdigest()
    assert ensure(remote(f"{server}/ok.txt", digest=sha1), root=tmp_path).read_bytes() == BODY


def test_bad_remote_specs():
    with pytest.raises(ValueError, match="digest"):
        remote("http://x", digest="md5:abc")
    with pytest.raises(ValueError, match="a url or a bundled copy"):
        RemoteFile("demo", "demo.txt", DIGEST, ())


def test_bundled_copy_needs_no_network(closed_port, tmp_path):
    """The package's own copy is unpacked and verified like a download, without a connection."""
    for shipped in (corpora.TINYSHAKESPEARE, corpora.TATOEBA_SMALL):
        offline = replace(shipped, urls=(f"{closed_port}/nothing.txt",))
        path = ensure(offline, root=tmp_path)
        assert path == cache_path(offline, tmp_path) and path.stat().st_size > 500_000
        assert not [p for p in path.parent.iterdir() if p.name.endswith(".part")]


def test_bundled_copy_with_the_wrong_checksum_falls_through_to_the_urls(server, tmp_path):
    wrong = replace(corpora.TINYSHAKESPEARE, dataset="demo", filename="demo.txt", digest=DIGEST,
                    urls=(f"{server}/ok.txt",))
    assert ensure(wrong, root=tmp_path).read_bytes() == BODY  # the bundled bytes differ
