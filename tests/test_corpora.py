import hashlib
import shutil
import zipfile
from dataclasses import replace

import pytest

from seqlab.data import DownloadError, corpora, load_corpus, load_parallel, parse_tatoeba
from seqlab.data.download import cache_path, data_home


def test_unknown_names_and_splits_list_the_known_ones():
    with pytest.raises(ValueError, match="known: toy-lm, tinyshakespeare, wikitext-2"):
        load_corpus("ptb")
    with pytest.raises(ValueError, match="known: toy-mt, tatoeba-fra-eng"):
        load_parallel("multi30k")
    with pytest.raises(ValueError, match="expected one of train, valid, test"):
        load_corpus("toy-lm", split="dev")
    with pytest.raises(TypeError, match="name must be a str"):
        load_corpus(None)


def test_toy_corpora_are_deterministic_and_split():
    train, test = load_corpus("toy-lm"), load_corpus("toy-lm", "test")
    assert train == load_corpus("toy-lm") and len(train) == 20000 and len(test) == 2000
    assert train[:100] != test[:100]
    pairs = load_parallel("toy-mt", "valid")
    assert pairs == load_parallel("toy-mt", "valid") and len(pairs) == 1000
    assert all(isinstance(s, str) and isinstance(t, str) for s, t in pairs)


def test_tinyshakespeare_from_the_cache(shared_file):
    src = shared_file("tinyshakespeare/input.txt")
    dest = cache_path(corpora.TINYSHAKESPEARE, data_home())
    dest.parent.mkdir(parents=True)
    shutil.copy(src, dest)
    train, valid, test = (load_corpus("tinyshakespeare", s) for s in ("train", "valid", "test"))
    assert train[0] == "First Citizen:"
    total = len(train) + len(valid) + len(test)
    assert len(valid) == int(0.05 * total) and abs(len(train) / total - 0.9) < 0.001
    assert train[-1] != valid[0]


def test_tinyshakespeare_downloaded_from_a_mirror(shared_file, server, monkeypatch, tmp_path):
    """The real loader, fed by a local HTTP mirror serving the real file after a dead one."""
    import http.server
    import threading
    from functools import partial

    src = shared_file("tinyshakespeare/input.txt")
    handler = partial(http.server.SimpleHTTPRequestHandler, directory=str(src.parent))
    handler.log_message = lambda *a: None
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        mirror = f"http://127.0.0.1:{httpd.server_address[1]}/input.txt"
        remote = replace(corpora.TINYSHAKESPEARE, urls=(f"{server}/gone.txt", mirror))
        monkeypatch.setattr(corpora, "TINYSHAKESPEARE", remote)
        lines = load_corpus("tinyshakespeare", "test")
    finally:
        httpd.shutdown()
    assert lines and cache_path(remote, data_home()).read_bytes() == src.read_bytes()


def test_offline_without_cache_names_the_file_and_the_toy_alternative(closed_port, monkeypatch):
    remote = replace(corpora.WIKITEXT2["valid"], urls=(f"{closed_port}/valid.txt",))
    monkeypatch.setitem(corpora.WIKITEXT2, "valid", remote)
    with pytest.raises(DownloadError) as err:
        load_corpus("wikitext-2", "valid")
    message = str(err.value)
    assert "'wikitext-2'" in message and str(cache_path(remote, data_home())) in message
    assert "toy" in message


@pytest.mark.parametrize("split", ["valid", "test"])
def test_wikitext2_official_splits_from_the_cache(shared_file, split):
    src = shared_file(f"wikitext-2/{split}.txt")
    dest = cache_path(corpora.WIKITEXT2[split], data_home())
    dest.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy(src, dest)
    lines = load_corpus("wikitext-2", split)
    assert lines[0].startswith("= ") and all(line == line.strip() and line for line in lines)
    tokens = sum(len(line.split()) for line in lines)
    assert 200_000 < tokens < 300_000  # WikiText-2 valid/test hold about 217k / 245k tokens


def test_wikitext2_train_is_read_from_the_release_archive(monkeypatch, tmp_path):
    archive = tmp_path / "wikitext-2-v1.zip"
    with zipfile.ZipFile(archive, "w") as zf:
        zf.writestr("wikitext-2/wiki.train.tokens", " \n = Title = \n \n Some text . \n")
    digest = "sha1:" + hashlib.sha1(archive.read_bytes()).hexdigest()
    remote = replace(corpora.WIKITEXT2["train"], digest=digest, urls=(archive.as_uri(),))
    monkeypatch.setitem(corpora.WIKITEXT2, "train", remote)
    assert load_corpus("wikitext-2", "train") == ["= Title =", "Some text ."]


def test_tatoeba_two_and_three_column_exports(shared_file, tmp_path):
    pairs = parse_tatoeba("Go.\tVa !\nHi.\tSalut\u202f!\tCC-BY 2.0 (France) Attribution: x\n")
    assert pairs == [("Go.", "Va !"), ("Hi.", "Salut !")]
    with pytest.raises(ValueError, match="line 1 .* 1 tab-separated"):
        parse_tatoeba("no tabs here\n")

    src = shared_file("tatoeba-fra-eng/fra.txt")
    splits = {s: load_parallel("tatoeba-fra-eng", s, path=src) for s in ("train", "valid", "test")}
    assert sum(map(len, splits.values())) == 18066
    assert splits["train"] == load_parallel("tatoeba-fra-eng", "train", path=src)
    assert ("Go.", "Va !") in splits["train"] + splits["valid"] + splits["test"]
    three = tmp_path / "fra3.txt"
    three.write_text("".join(f"{line}\tCC-BY 2.0 (France) Attribution: tatoeba.org\n"
                             for line in src.read_text(encoding="utf-8").splitlines()))
    assert load_parallel("tatoeba-fra-eng", "test", path=three) == splits["test"]


def test_tatoeba_through_the_verified_archive(shared_file, monkeypatch, tmp_path):
    src = shared_file("tatoeba-fra-eng/fra.txt")
    archive = tmp_path / "fra-eng.zip"
    with zipfile.ZipFile(archive, "w") as zf:
        zf.write(src, "fra-eng/fra.txt")
    digest = "sha1:" + hashlib.sha1(archive.read_bytes()).hexdigest()
    monkeypatch.setattr(corpora, "TATOEBA",
                        replace(corpora.TATOEBA, digest=digest, urls=(archive.as_uri(),)))
    assert load_parallel("tatoeba-fra-eng", "valid") == load_parallel(
        "tatoeba-fra-eng", "valid", path=src
    )


def test_bundled_tinyshakespeare_is_the_canonical_file(shared_file):
    """The package's copy unpacks to the very file the download verifies (same bytes)."""
    src = shared_file("tinyshakespeare/input.txt")
    assert load_corpus("tinyshakespeare", "train")[0] == "First Citizen:"
    assert cache_path(corpora.TINYSHAKESPEARE, data_home()).read_bytes() == src.read_bytes()


def test_bundled_tatoeba_sample_is_split_like_the_download():
    splits = {s: load_parallel("tatoeba-fra-eng-small", s) for s in ("train", "valid", "test")}
    total = sum(map(len, splits.values()))
    assert total == 18065 and len(splits["valid"]) == int(0.05 * total)
    every = parse_tatoeba(cache_path(corpora.TATOEBA_SMALL, data_home()).read_text("utf-8"))
    assert sorted(p for pairs in splits.values() for p in pairs) == sorted(every)  # a partition
    assert all(e and f for e, f in every)
