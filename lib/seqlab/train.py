"""One training loop for every topic: progress bar, clipping, autocast, learning-rate schedules,
evaluation, early stopping, checkpoints.

A topic supplies ``loss_fn(model, batch) -> losses.TokenLoss`` (the mean over the batch's
targets and their count); the loop does the rest the same way everywhere, so students read it
once.
"""

from __future__ import annotations

import copy
import math
import os
import tempfile
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

import torch

from .device import autocast, get_device, grad_scaler, precision
from .progress import progress_bar
from .tensors import evaluating, map_tensors
from .validate import integer, number


@dataclass
class History:
    """What ``fit`` measured: mean loss per epoch, loss and learning rate per step, validation
    loss per epoch (and ``(step, loss)`` pairs when evaluating every N steps), the best epoch."""

    train_loss: list[float] = field(default_factory=list)
    valid_loss: list[float] = field(default_factory=list)
    step_loss: list[float] = field(default_factory=list)
    learning_rate: list[float] = field(default_factory=list)
    valid_steps: list[tuple[int, float]] = field(default_factory=list)
    best_epoch: int | None = None
    stopped_early: bool = False


def lr_schedule(optimizer: torch.optim.Optimizer, warmup: int = 0, kind: str = "constant",
                total_steps: int | None = None) -> torch.optim.lr_scheduler.LambdaLR:
    """Linear warmup over ``warmup`` steps, then ``kind``:

    - ``"constant"``: the optimizer's learning rate;
    - ``"inverse_sqrt"``: lr * sqrt(warmup / step) (Vaswani et al. 2017, rescaled so the peak is
      the optimizer's lr);
    - ``"cosine"``: down to 0 at ``total_steps`` along half a cosine.

    Post-LN Transformers need the warmup; pre-LN ones mostly do not (lecture 05).
    """
    integer("warmup", warmup, 0)
    if kind not in ("constant", "inverse_sqrt", "cosine"):
        raise ValueError(f"kind must be 'constant', 'inverse_sqrt' or 'cosine', got {kind!r}")
    if kind == "cosine" and (not isinstance(total_steps, int) or total_steps <= warmup):
        raise ValueError(f"a cosine schedule needs total_steps > warmup ({warmup}), got "
                         f"{total_steps!r}")

    def factor(step: int) -> float:  # step = optimizer steps taken so far
        if step < warmup:
            return (step + 1) / warmup
        if kind == "inverse_sqrt":
            return math.sqrt(max(warmup, 1) / (step + 1))
        if kind == "cosine":
            progress = min(1.0, (step - warmup) / (total_steps - warmup))
            return 0.5 * (1.0 + math.cos(math.pi * progress))
        return 1.0

    return torch.optim.lr_scheduler.LambdaLR(optimizer, factor)


def _token_loss(result, loss_fn) -> tuple[torch.Tensor, int | torch.Tensor]:
    """``loss_fn``'s (mean, count), or a ``TypeError`` that says what a loss must return."""
    if (isinstance(result, tuple) and len(result) == 2 and isinstance(result[0], torch.Tensor)
            and result[0].dim() == 0):
        return result
    name = getattr(loss_fn, "__name__", None) or repr(loss_fn)
    raise TypeError(f"loss_fn {name} must return (mean loss as a 0-dim tensor, number of targets "
                    f"averaged), e.g. seqlab.losses.TokenLoss, got {type(result).__name__}"
                    + (f" of shape {tuple(result.shape)}" if isinstance(result, torch.Tensor)
                       else ""))


def to_device(batch, device: torch.device):
    """Move every tensor in a (nested) tuple, list or dict to ``device``."""
    return map_tensors(lambda t: t.to(device, non_blocking=True), batch)


def _batches(data) -> Iterable:
    """``data`` is a re-iterable of batches or a zero-argument callable returning one per epoch."""
    return data() if callable(data) else data


@torch.no_grad()
def evaluate(model: torch.nn.Module, data, loss_fn: Callable, device=None) -> float:
    """Mean loss per target over ``data`` (each batch's mean weighted by its count of targets),
    in eval mode, without gradients."""
    device = device or next(model.parameters()).device
    setting, total, count = precision(), 0.0, 0
    with evaluating(model):
        for batch in _batches(data):
            with autocast(device, setting=setting):
                mean, n = _token_loss(loss_fn(model, to_device(batch, device)), loss_fn)
            n = int(n)
            if n:  # a batch with no targets has a NaN mean and adds nothing
                total += float(mean) * n
                count += n
    if count == 0:
        raise ValueError("evaluate got no batches (or no targets)")
    return total / count


def fit(
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    train_data,
    loss_fn: Callable,
    *,
    epochs: int = 1,
    valid_data=None,
    clip: float | None = None,
    max_steps: int | None = None,
    patience: int | None = None,
    checkpoint: str | Path | None = None,
    device: torch.device | None = None,
    progress: bool = True,
    scheduler: torch.optim.lr_scheduler.LRScheduler | None = None,
    eval_every: int | None = None,
    on_step: Callable | None = None,
    on_epoch: Callable | None = None,
) -> History:
    """Train ``model`` on ``loss_fn(model, batch) -> (mean, count)`` (any callable: a
    ``functools.partial`` of a loss too; see ``seqlab.losses``) and return its ``History``.

    - ``clip``: clip the global gradient norm to this value (RNNs need it).
    - ``max_steps``: stop after this many optimizer steps in total (FAST mode uses it).
    - ``scheduler``: stepped after every optimizer step (see ``lr_schedule``).
    - ``valid_data``: evaluated (per target token) after every epoch, and every ``eval_every``
      steps when given (``history.valid_steps``).
    - ``patience``: with ``valid_data``, stop once validation loss has not improved for this many
      epochs, and restore the best weights.
    - ``on_step(step, loss)`` after every optimizer step and ``on_epoch(epoch, history)`` after
      every epoch: hooks for schedules of your own (scheduled sampling's teacher-forcing rate).
    - ``checkpoint``: save model, optimizer and history there after every epoch.
    - The forward pass runs under ``seqlab.device.autocast``: by default (``SEQLAB_PRECISION``
      unset or "auto") bfloat16 on a CUDA GPU that has it natively, float16 with a gradient
      scaler on older ones, float32 on CPU and MPS; "bf16", "fp16" or "fp32" force a type on
      every device (the CPU too).
    """
    integer("epochs", epochs, 1)
    if clip is not None:
        number("clip", clip, 0, low_open=True)
    if patience is not None and valid_data is None:
        raise ValueError("patience (early stopping) needs valid_data to watch")
    if eval_every is not None:
        integer("eval_every", eval_every, 1)
        if valid_data is None:
            raise ValueError("eval_every (evaluating every N steps) needs valid_data")
    device = device or get_device()
    model.to(device)
    setting = precision()  # read once: a run trains in one precision
    scaler = grad_scaler(device, setting=setting)
    # On a GPU, reading the loss (.item()) makes the CPU wait for the GPU; do it every
    # `sync_every` steps, not every step, so the GPU always has the next step queued.
    sync_every = 1 if device.type != "cuda" or on_step is not None else 25
    history, best_loss, best_state, bad_epochs, steps = History(), math.inf, None, 0, 0
    for epoch in range(epochs):
        model.train()
        epoch_start = len(history.step_loss)
        pending: list[torch.Tensor] = []
        batches = _batches(train_data)
        total = len(batches) if hasattr(batches, "__len__") else None
        bar = progress_bar(batches, total=total, desc=f"epoch {epoch + 1}/{epochs}",
                           disable=not progress, leave=False)
        for batch in bar:
            with autocast(device, setting=setting):
                loss, _ = _token_loss(loss_fn(model, to_device(batch, device)), loss_fn)
            optimizer.zero_grad(set_to_none=True)
            scaler.scale(loss).backward()
            if clip is not None:
                scaler.unscale_(optimizer)
                torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
            scaler.step(optimizer)
            scaler.update()
            history.learning_rate.append(optimizer.param_groups[0]["lr"])
            if scheduler is not None:
                scheduler.step()
            steps += 1
            pending.append(loss.detach())
            last_batch = max_steps is not None and steps >= max_steps
            if len(pending) >= sync_every or last_batch:
                _record_losses(history, pending, steps)
                # refresh=False: a redraw per step makes Jupyter, not training, the bottleneck
                bar.set_postfix(loss=f"{history.step_loss[-1]:.3f}", refresh=False)
            if eval_every is not None and steps % eval_every == 0:
                history.valid_steps.append((steps, evaluate(model, valid_data, loss_fn, device)))
            if on_step is not None:
                on_step(steps, history.step_loss[-1])
            if last_batch:
                break
        _record_losses(history, pending, steps)
        epoch_losses = history.step_loss[epoch_start:]
        history.train_loss.append(sum(epoch_losses) / max(len(epoch_losses), 1))
        if valid_data is not None:
            valid = evaluate(model, valid_data, loss_fn, device)
            history.valid_loss.append(valid)
            if valid < best_loss:
                best_loss, history.best_epoch, bad_epochs = valid, epoch, 0
                if patience is not None:
                    best_state = copy.deepcopy(model.state_dict())
            else:
                bad_epochs += 1
        if on_epoch is not None:
            on_epoch(epoch, history)
        if checkpoint is not None:
            save_checkpoint(checkpoint, model, optimizer, history)
        if patience is not None and bad_epochs >= patience:
            history.stopped_early = True
            break
        if max_steps is not None and steps >= max_steps:
            break
    if best_state is not None:
        model.load_state_dict(best_state)
    return history


def _record_losses(history: History, pending: list[torch.Tensor], steps: int) -> None:
    """Copy the losses of the last steps to the host at once; stop on the first non-finite."""
    if not pending:
        return
    values = torch.stack(pending).float().cpu().tolist()
    for i, value in enumerate(values):
        if not math.isfinite(value):
            raise FloatingPointError(
                f"loss became {value} at step {steps - len(values) + i}; lower the learning "
                "rate or set clip (gradient clipping)")
    history.step_loss.extend(values)
    pending.clear()


def save_checkpoint(path, model, optimizer=None, history: History | None = None) -> None:
    """Write model (and optimizer, history) state atomically: a crash never leaves half a file."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    state = {
        "model": model.state_dict(),
        "optimizer": optimizer.state_dict() if optimizer is not None else None,
        "history": vars(history) if history is not None else None,
    }
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name, suffix=".tmp")
    os.close(fd)
    torch.save(state, tmp)
    os.replace(tmp, path)


def load_checkpoint(path, model, optimizer=None) -> History | None:
    """Restore a checkpoint written by ``save_checkpoint``; return its history."""
    state = torch.load(Path(path), map_location="cpu", weights_only=False)
    model.load_state_dict(state["model"])
    if optimizer is not None and state["optimizer"] is not None:
        optimizer.load_state_dict(state["optimizer"])
    return History(**state["history"]) if state["history"] is not None else None
