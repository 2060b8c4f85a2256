import json
import os
import random
import subprocess
import sys

import numpy as np
import pytest
import torch

import seqlab
from seqlab import autocast, get_device, record, seed_everything

no_cuda = pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without CUDA")


@no_cuda
def test_default_device_is_cpu_without_accelerators():
    assert get_device().type in ("cpu", "mps")


def test_env_override_to_cpu(monkeypatch):
    monkeypatch.setenv("SEQLAB_DEVICE", "cpu")
    assert get_device() == torch.device("cpu")


@no_cuda
def test_asking_for_missing_cuda_says_so(monkeypatch):
    monkeypatch.setenv("SEQLAB_DEVICE", "cuda")
    with pytest.raises(RuntimeError, match="CUDA is not available"):
        get_device()


def test_bad_device_names():
    with pytest.raises(ValueError, match="not a device name"):
        get_device("gpu0")
    with pytest.raises(TypeError, match="name must be a str"):
        get_device(3)


def test_autocast_is_a_noop_on_cpu():
    a = torch.randn(4, 4)
    with autocast("cpu"):
        assert (a @ a).dtype == torch.float32
    with pytest.raises(TypeError):
        autocast(3)


@pytest.mark.parametrize("capability,bf16,expected", [((7, 5), False, torch.float16),
                                                      ((8, 0), True, torch.bfloat16),
                                                      ((9, 0), True, torch.bfloat16)])
def test_mixed_precision_fits_the_gpu(monkeypatch, capability, bf16, expected):
    """A T4 (7.5) gets float16 with a gradient scaler; Ampere and later get bfloat16."""
    from seqlab.device import autocast_dtype, grad_scaler

    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: capability)
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: bf16)
    assert autocast_dtype("cuda") == expected
    assert autocast_dtype("cpu") is None and autocast_dtype("mps") is None
    assert not grad_scaler("cpu").is_enabled()


def _draw():
    return random.random(), float(np.random.rand()), torch.rand(3).tolist()


def test_same_seed_same_numbers():
    seed_everything(123)
    first = _draw()
    seed_everything(123)
    assert _draw() == first
    seed_everything(124)
    assert _draw() != first


@pytest.mark.parametrize("bad", [-1, 2**32, 1.5, "1", True])
def test_bad_seeds(bad):
    with pytest.raises((TypeError, ValueError), match="seed"):
        seed_everything(bad)


def test_record_does_nothing_without_results_folder(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    record("ppl", 3.0)
    assert list(tmp_path.iterdir()) == []


def test_record_appends_to_the_notebook_file(tmp_path, monkeypatch):
    monkeypatch.setenv("SEQLAB_RESULTS", str(tmp_path / "res"))
    monkeypatch.setenv("SEQLAB_NOTEBOOK", "01_language_models")
    record("ppl", np.float64(3.5))
    record("curve", {"3-10": torch.tensor(1.0), "11-20": float("inf")})
    data = json.loads((tmp_path / "res" / "01_language_models.json").read_text())
    assert data == {"ppl": 3.5, "curve": {"3-10": 1.0, "11-20": "inf"}}
    assert [p.name for p in (tmp_path / "res").iterdir()] == ["01_language_models.json"]


def test_record_rejects_objects(monkeypatch, tmp_path):
    monkeypatch.setenv("SEQLAB_RESULTS", str(tmp_path))
    with pytest.raises(TypeError, match="record"):
        record("model", object())
    with pytest.raises(TypeError, match="name"):
        record("", 1)


def test_a_claim_is_asserted_and_recorded_with_its_threshold(monkeypatch, tmp_path):
    monkeypatch.setenv("SEQLAB_RESULTS", str(tmp_path))
    monkeypatch.setenv("SEQLAB_NOTEBOOK", "02_rnn_backprop")
    seqlab.claim("LSTM agreement", np.float64(0.95), ">", 0.9)
    with pytest.raises(AssertionError, match=r"tanh RNN agreement: got 0.55, expected > 0.9"):
        seqlab.claim("tanh RNN agreement", 0.55, ">", 0.9)
    record("ppl", 3.0)  # records and claims live side by side
    data = json.loads((tmp_path / "02_rnn_backprop.json").read_text())
    assert data["claims"] == {  # a failed claim is recorded too: the sweep shows by how much
        "LSTM agreement": {"value": 0.95, "op": ">", "threshold": 0.9},
        "tanh RNN agreement": {"value": 0.55, "op": ">", "threshold": 0.9}}
    assert data["ppl"] == 3.0
    with pytest.raises(ValueError, match="op must be one of"):
        seqlab.claim("x", 1.0, "=>", 0.5)
    with pytest.raises(TypeError, match="value must be a number, got str"):
        seqlab.claim("x", "high", ">", 0.5)
    with pytest.raises(AssertionError, match="no sentence: got nan, expected < 0.5"):
        seqlab.claim("no sentence", np.float64("nan"), "<", 0.5)  # a share over no sentences
    claims = json.loads((tmp_path / "02_rnn_backprop.json").read_text())["claims"]
    assert claims["no sentence"]["value"] == "nan"


def test_show_source_shows_the_real_code():
    from seqlab.source import source_of

    assert source_of(seed_everything).startswith("def seed_everything(seed: int)")
    seqlab.show_source(seed_everything)
    with pytest.raises(TypeError, match="show_source needs"):
        seqlab.show_source(3)


def test_fast_mode_by_default_without_a_gpu(monkeypatch, capsys):
    from seqlab import fast_mode

    monkeypatch.delenv("SEQLAB_FAST", raising=False)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert fast_mode() is True
    assert "FAST mode (no CUDA GPU here)" in capsys.readouterr().out
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert fast_mode() is False
    assert "full mode (a CUDA GPU is present)" in capsys.readouterr().out
    monkeypatch.setenv("SEQLAB_FAST", "1")
    assert fast_mode(announce=False) is True
    monkeypatch.setenv("SEQLAB_FAST", "0")
    assert fast_mode(announce=False) is False
    monkeypatch.setenv("SEQLAB_FAST", "maybe")
    with pytest.raises(ValueError, match="SEQLAB_FAST"):
        fast_mode()


def test_seqlab_gives_torch_one_thread_unless_told_otherwise(monkeypatch):
    """``import seqlab`` sets ``OMP_NUM_THREADS=1`` before torch loads (``seqlab.threads``);
    a count already in the environment is kept, and a torch loaded earlier is set too."""
    from seqlab import threads

    code = ("import os, seqlab, torch\n"
            "print(os.environ.get('OMP_NUM_THREADS'), torch.get_num_threads())\n")
    env = {k: v for k, v in os.environ.items() if k != "OMP_NUM_THREADS"}
    for extra, expected in (({}, ["1", "1"]), ({"OMP_NUM_THREADS": "2"}, ["2", "2"])):
        out = subprocess.run([sys.executable, "-c", code], env={**env, **extra},
                             capture_output=True, text=True, check=True).stdout.split()
        assert out == expected
    monkeypatch.setenv("OMP_NUM_THREADS", "3")
    assert not threads.configure()
    monkeypatch.delenv("OMP_NUM_THREADS")
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(2)
        assert threads.configure() and torch.get_num_threads() == 1  # torch was loaded first
        assert os.environ["OMP_NUM_THREADS"] == "1"
    finally:
        torch.set_num_threads(before)
