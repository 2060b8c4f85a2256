import functools
import math

import matplotlib.pyplot as plt
import numpy as np
import pytest
import torch

from seqlab import seed_everything
from seqlab.losses import TokenLoss, token_cross_entropy
from seqlab.train import evaluate, fit, load_checkpoint, save_checkpoint
from seqlab.viz import bar_distribution, heatmap, plot_history


def _data(n=256, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 4, generator=g)
    y = (x @ torch.tensor([1.0, -2.0, 0.5, 3.0]) > 0).long()
    return [(x[i : i + 32], y[i : i + 32]) for i in range(0, n, 32)]


def _loss(model, batch):
    x, y = batch
    return token_cross_entropy(model(x), y)


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
        fit(model, opt, _data(), lambda m, b: TokenLoss(_loss(m, b).mean * float("nan"), 32),
            progress=False)


def test_plots_are_labelled():
    _, _, h = _run(epochs=2, valid_data=_data(seed=1))
    ax = plot_history(h)
    assert ax.get_title() and ax.get_xlabel() and ax.get_ylabel()
    assert len(ax.get_legend().get_texts()) == 3
    _, _, one_epoch = _run(epochs=1)
    labels = [t.get_text() for t in plot_history(one_epoch).get_legend().get_texts()]
    assert labels == ["train (per step)"]  # one epoch's mean would be a lone dot
    ax = plot_history(one_epoch, window=3)
    assert [t.get_text() for t in ax.get_legend().get_texts()][1] == \
        "train (mean of the last 3 steps)"
    assert np.isclose(ax.get_lines()[1].get_ydata()[-1], np.mean(one_epoch.step_loss[-3:]))
    with pytest.raises(ValueError, match="window must be an int >= 1"):
        plot_history(one_epoch, window=0)
    ax = heatmap([[0.9, 0.1], [0.2, 0.8]], ["le", "chat"], ["the", "cat"], title="attention")
    assert [t.get_text() for t in ax.get_xticklabels()] == ["the", "cat"]
    with pytest.raises(ValueError, match="does not match"):
        heatmap([[1.0, 0.0]], ["a", "b"], ["c", "d"])
    ax = bar_distribution(["a", "b", "c"], [0.2, 0.5, 0.3], title="p(next)")
    assert [t.get_text() for t in ax.get_xticklabels()] == ["b", "c", "a"]
    plt.close("all")


def test_lr_schedule_warmup_then_decay():
    from seqlab.train import lr_schedule

    model = torch.nn.Linear(2, 2)
    for kind in ("constant", "inverse_sqrt", "cosine"):
        opt = torch.optim.SGD(model.parameters(), lr=1.0)
        sched = lr_schedule(opt, warmup=4, kind=kind, total_steps=12)
        lrs = []
        for _ in range(12):
            lrs.append(opt.param_groups[0]["lr"])
            opt.step()
            sched.step()
        assert lrs[:4] == pytest.approx([0.25, 0.5, 0.75, 1.0])
        if kind == "constant":
            assert lrs[4:] == pytest.approx([1.0] * 8)
        elif kind == "inverse_sqrt":
            assert lrs[8] == pytest.approx(math.sqrt(4 / 9))
        else:
            assert lrs[4] == pytest.approx(1.0) and lrs[-1] < 0.05
    with pytest.raises(ValueError, match="total_steps"):
        lr_schedule(opt, warmup=4, kind="cosine")
    with pytest.raises(ValueError, match="kind"):
        lr_schedule(opt, kind="linear")


def test_fit_runs_schedules_hooks_and_evaluates_every_n_steps():
    from seqlab.train import lr_schedule

    seed_everything(0)
    model = torch.nn.Linear(4, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.5)
    steps, epochs = [], []
    history = fit(model, opt, _data(), _loss, epochs=2, device=torch.device("cpu"),
                  progress=False, scheduler=lr_schedule(opt, warmup=3), valid_data=_data(seed=1),
                  eval_every=5, on_step=lambda s, loss: steps.append(s),
                  on_epoch=lambda e, h: epochs.append(e))
    assert history.learning_rate[:4] == pytest.approx([0.5 / 3, 1 / 3, 0.5, 0.5])
    assert [s for s, _ in history.valid_steps] == [5, 10, 15]
    assert steps == list(range(1, 17)) and epochs == [0, 1]
    assert model.training  # evaluation put it back in training mode
    with pytest.raises(ValueError, match="eval_every"):
        fit(model, opt, _data(), _loss, eval_every=5, progress=False)


def _tiny_seq2seq():
    from seqlab.seq2seq import build_model, seq2seq_batch

    seed_everything(0)
    model = build_model(8, 9, bos_id=1, eos_id=2, attention=True, embed_dim=8, hidden_dim=8)
    long = seq2seq_batch([([4, 5, 6, 7], [4, 5, 6, 7, 8, 3]), ([5, 6, 7, 4], [5, 6, 7, 8, 4, 3])],
                         1, 2)
    short = seq2seq_batch([([4], [5]), ([6, 7], [4, 3, 8])], 1, 2)  # padded targets
    return model, [long, short]


def test_evaluate_of_a_partial_is_the_token_mean_by_hand():
    """Lecture 03's scheduled sampling passes a partial of the loss to fit: the loss per target
    token over all batches, not a mean of batch means (the short batch has 6 targets, the long
    one 14)."""
    from seqlab.seq2seq import seq2seq_loss

    model, batches = _tiny_seq2seq()
    partial = functools.partial(seq2seq_loss, teacher_forcing=1.0)
    nll, tokens = [], 0
    with torch.no_grad():
        for src, lengths, tgt_in, tgt_out in batches:
            logp = model(src, lengths, tgt_in).log_softmax(-1)
            real = tgt_out != model.pad_id
            nll.append(-logp.gather(2, tgt_out[..., None])[..., 0][real].sum().item())
            tokens += int(real.sum())
    assert tokens == 20
    by_hand = sum(nll) / tokens
    assert evaluate(model, batches, partial) == pytest.approx(by_hand, rel=1e-6)
    assert evaluate(model, batches, lambda m, b: seq2seq_loss(m, b)) == \
        pytest.approx(by_hand, rel=1e-6)
    assert by_hand != pytest.approx(sum(n / t for n, t in zip(nll, (14, 6))) / 2, rel=1e-3)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.0)  # fit evaluates the partial alike
    history = fit(model, optimizer, batches, partial, valid_data=batches, progress=False,
                  device=torch.device("cpu"))
    assert history.valid_loss == [pytest.approx(by_hand, rel=1e-6)]


def test_a_loss_that_returns_a_bare_mean_fails_loudly():
    model, batches = _tiny_seq2seq()

    def bare_mean(model, batch):
        return TokenLoss(*token_cross_entropy(model(*batch[:3]), batch[3], 0)).mean

    with pytest.raises(TypeError, match="loss_fn bare_mean must return .mean loss as a 0-dim "
                                        "tensor, number of targets"):
        evaluate(model, batches, bare_mean)
    with pytest.raises(TypeError, match="got Tensor"):
        fit(model, torch.optim.SGD(model.parameters(), lr=0.1), batches, bare_mean,
            progress=False, device=torch.device("cpu"))


def test_token_cross_entropy_checks_shapes():
    with pytest.raises(ValueError, match=r"logits \(2, 3, 5\) and targets \(2, 4\)"):
        token_cross_entropy(torch.zeros(2, 3, 5), torch.zeros(2, 4, dtype=torch.long))


def test_progress_is_plain_text_in_headless_runs(monkeypatch):
    from tqdm.std import tqdm as text_bar

    from seqlab.progress import progress_bar

    monkeypatch.setenv("SEQLAB_NOTEBOOK", "05_transformer")
    bar = progress_bar(range(3), leave=False, disable=True)
    assert type(bar) is text_bar and bar.leave  # the final state stays in the saved notebook
