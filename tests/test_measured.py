"""What the library ships as measured once: the records the robustness sweeps and full-mode runs
write, read back as the lectures read them, and each shipped record consistent with itself:
a sweep covers every seed and thread count and every claim held in every run; a full-mode run
was a full-mode run and its claims held. (That a lecture's claims are still those of its
shipped sweep is checked where the lecture runs, in test_notebooks.py.)"""

import itertools
import json

import pytest

from seqlab import measured
from seqlab.results import Check

SHIPPED = sorted(measured.FOLDER.glob("*.json"))


def _run(seed, threads, lstm, rnn=None, error=None):
    """One run as a robustness sweep returns it: its results file under "records"."""
    claims = {"LSTM agreement accuracy": {"value": lstm, "op": ">", "threshold": 0.9}}
    if seed == 0:  # a claim made only with SEED = 0
        claims["seed 0 only"] = {"value": 1.0, "op": "<", "threshold": 2}
    records = {"claims": claims} if rnn is None else {
        "claims": claims, "agreement_accuracy": {"tanh RNN": rnn}}
    return {"seed": seed, "threads": threads, "error": error, "records": records}


def _headline(records):
    accuracy = records.get("agreement_accuracy", {})
    return {"agreement, tanh RNN": accuracy["tanh RNN"]} if accuracy else {}


def test_a_sweep_record_reads_back_as_the_lecture_prints_it(tmp_path, capsys):
    runs = [_run(0, 1, 0.95, 0.5), _run(1, 1, 1.0, 0.93), _run(0, 2, 0.97)]
    path = measured.write(measured.sweep_record("02_demo", runs, _headline, "a sweep"), tmp_path)
    assert path.name == "02_demo.sweep.json" and path.stat().st_mode & 0o777 == 0o644
    sweep = measured.sweep("02_demo", tmp_path)
    assert sweep.spread("LSTM agreement accuracy") == (0.95, 1.0)
    assert sweep.held("LSTM agreement accuracy") == (3, 3)
    assert sweep.held("seed 0 only") == (2, 2)  # made in two of the three runs
    assert sweep.spread("agreement, tanh RNN") == (0.5, 0.93)  # a headline number, not a claim
    with pytest.raises(KeyError, match="has no 'nothing'; it has: LSTM agreement"):
        sweep.values("nothing")
    sweep.show()
    out = capsys.readouterr().out
    assert "seeds 0, 1 x 1, 2 torch threads (3 runs)" in out
    assert "3/3       0.95          1  LSTM agreement accuracy > 0.9" in out
    assert "agreement, tanh RNN" not in out  # show() lists the claims unless told otherwise


def test_a_full_mode_record_reads_back(tmp_path):
    results = {"claims": {"full: gap": {"value": 3.0, "op": ">", "threshold": 1},
                          "full: broken": {"value": 0.0, "op": ">", "threshold": 1}},
               "toy_ngram_perplexity": {"2": 8.5}}
    measured.write(measured.full_record("01_demo", results, 41.7, "a full run"), tmp_path)
    full = measured.full_mode("01_demo", tmp_path)
    assert full.records["toy_ngram_perplexity"] == {"2": 8.5}
    assert full.claim("full: gap") == 3.0
    with pytest.raises(AssertionError, match="did not hold"):
        full.claim("full: broken")
    assert "a full run" in full.describe()
    assert full.record["measured"]["seconds"] == 41.7


def test_missing_or_mislabelled_records_are_refused(tmp_path):
    with pytest.raises(measured.NotMeasured, match="no sweep record of 09_none in"):
        measured.sweep("09_none", tmp_path)
    record = measured.full_record("01_demo", {}, 1.0, "a full run")
    (tmp_path / "01_demo.sweep.json").write_text(json.dumps(record))
    with pytest.raises(ValueError, match="kind must be 'sweep', got 'full'"):
        measured.sweep("01_demo", tmp_path)
    with pytest.raises(ValueError, match="kind must be one of"):
        measured.load("01_demo", "fast", tmp_path)
    with pytest.raises(ValueError, match="kind must be one of"):
        measured.write({**record, "kind": "guess"}, tmp_path)


def test_the_library_ships_records():
    assert SHIPPED, f"no records in {measured.FOLDER}"


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: p.stem)
def test_a_shipped_record_is_whole_and_every_claim_in_it_held(path):
    notebook, kind = path.stem.split(".")
    record = measured.load(notebook, kind)
    assert {"date", "machine", "torch", "command"} <= set(record["measured"])
    if kind == "full":
        claims = record["records"].get("claims", {})
        failed = [n for n, c in claims.items()
                  if not Check(n, c["op"], c["threshold"]).holds(float(c["value"]))]
        assert claims and not failed, failed
        return
    runs = record["runs"]
    assert sorted((r["seed"], r["threads"]) for r in runs) == sorted(
        itertools.product(measured.SEEDS, measured.THREADS)), "a sweep covers seeds 0-4 x 1, 2, 4"
    assert [r for r in runs if r["error"]] == [], f"{notebook}: runs where a claim failed"
    sweep = measured.Sweep(record)
    for name, made in record["claims"].items():
        assert len(made["values"]) == len(runs)
        k, n = sweep.held(name)
        assert k == n > 0, f"{name} held in {k} of {n} runs"
    for name, values in record["numbers"].items():
        assert len(values) == len(runs), name
