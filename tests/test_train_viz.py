import math

import matplotlib.pyplot as plt
import pytest
import torch

from seqlab import seed_everything
from seqlab.train import fit, load_checkpoint, save_checkpoint
from seqlab.viz import bar_distribution, heatmap, plot_history


def _data(n=256, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 4, generator=g)
    y = (x @ torch.tensor([1.0, -2.0, 0.5, 3.0]) > 0).long()
    return [(x[i : i + 32], y[i : i + 32]) for i in range(0, n, 32)]


def _loss(model, batch):
    x, y = batch
    return torch.nn.functional.cross_entropy(model(x), y)


def _run(epochs=5, **kw):
    seed_everything(0)
    model = torch.nn.Linear(4, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.5)
    return model, opt, fit(model, opt, _data(), _loss, epochs=epochs, device=torch.device("cpu"),
                           progress=False, **kw)


def test_fit_learns_and_is_deterministic():
    _, _, h1 = _run(valid_data=_data(seed=1), clip=1.0)
    _, _, h2 = _run(valid_data=_data(seed=1), clip=1.0)
    assert h1.step_loss == h2.step_loss
    assert h1.train_loss[-1] < 0.5 * h1.train_loss[0] and len(h1.valid_loss) == 5
    assert h1.valid_loss[-1] < math.log(2)


def test_max_steps_stops_inside_an_epoch():
    _, _, h = _run(epochs=10, max_steps=11)
    assert len(h.step_loss) == 11 and len(h.train_loss) == 2


def test_early_stopping_restores_the_best_weights():
    # validation data with flipped labels: it gets worse as training improves
    flipped = [(x, 1 - y) for x, y in _data(seed=1)]
    model, _, h = _run(epochs=20, valid_data=flipped, patience=2)
    assert h.stopped_early and len(h.valid_loss) == h.best_epoch + 3
    from seqlab.train import evaluate

    assert evaluate(model, flipped, _loss) == pytest.approx(min(h.valid_loss), rel=1e-6)


def test_checkpoint_roundtrip(tmp_path):
    model, opt, h = _run(epochs=2, checkpoint=tmp_path / "ck.pt")
    other = torch.nn.Linear(4, 2)
    other_opt = torch.optim.SGD(other.parameters(), lr=0.5)
    restored = load_checkpoint(tmp_path / "ck.pt", other, other_opt)
    assert restored.step_loss == h.step_loss
    assert torch.equal(other.weight, model.weight)
    save_checkpoint(tmp_path / "again.pt", other)
    assert [p.name for p in tmp_path.iterdir() if p.suffix == ".tmp"] == []


def test_bad_arguments_and_diverging_loss():
    model = torch.nn.Linear(4, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with pytest.raises(ValueError, match="epochs"):
        fit(model, opt, _data(), _loss, epochs=0)
    with pytest.raises(ValueError, match="patience"):
        fit(model, opt, _data(), _loss, patience=2)
    with pytest.raises(FloatingPointError, match="learning rate"):
        fit(model, opt, _data(), lambda m, b: _loss(m, b) * float("nan"), progress=False)


def test_plots_are_labelled():
    _, _, h = _run(epochs=2, valid_data=_data(seed=1))
    ax = plot_history(h)
    assert ax.get_title() and ax.get_xlabel() and ax.get_ylabel()
    assert len(ax.get_legend().get_texts()) == 3
    ax = heatmap([[0.9, 0.1], [0.2, 0.8]], ["le", "chat"], ["the", "cat"], title="attention")
    assert [t.get_text() for t in ax.get_xticklabels()] == ["the", "cat"]
    with pytest.raises(ValueError, match="does not match"):
        heatmap([[1.0, 0.0]], ["a", "b"], ["c", "d"])
    ax = bar_distribution(["a", "b", "c"], [0.2, 0.5, 0.3], title="p(next)")
    assert [t.get_text() for t in ax.get_xticklabels()] == ["b", "c", "a"]
    plt.close("all")
