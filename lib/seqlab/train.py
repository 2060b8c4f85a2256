"""One training loop for every topic: progress bar, clipping, autocast, early stopping, checkpoints.

A topic supplies ``loss_fn(model, batch) -> scalar loss``; the loop does the rest the same way
everywhere, so students read it once.
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
from tqdm.auto import tqdm

from .device import autocast, get_device


@dataclass
class History:
    """What ``fit`` measured: mean loss per epoch, loss per step, and the best epoch."""

    train_loss: list[float] = field(default_factory=list)
    valid_loss: list[float] = field(default_factory=list)
    step_loss: list[float] = field(default_factory=list)
    best_epoch: int | None = None
    stopped_early: bool = False


def to_device(batch, device: torch.device):
    """Move every tensor in a (nested) tuple, list or dict to ``device``."""
    if isinstance(batch, torch.Tensor):
        return batch.to(device, non_blocking=True)
    if isinstance(batch, dict):
        return {k: to_device(v, device) for k, v in batch.items()}
    if isinstance(batch, (list, tuple)):
        return type(batch)(to_device(v, device) for v in batch)
    return batch


def _batches(data) -> Iterable:
    """``data`` is a re-iterable of batches or a zero-argument callable returning one per epoch."""
    return data() if callable(data) else data


@torch.no_grad()
def evaluate(model: torch.nn.Module, data, loss_fn: Callable, device=None) -> float:
    """Mean of ``loss_fn`` over the batches of ``data``, in eval mode, without gradients."""
    device = device or next(model.parameters()).device
    was_training = model.training
    model.eval()
    total, count = 0.0, 0
    for batch in _batches(data):
        with autocast(device):
            total += float(loss_fn(model, to_device(batch, device)))
        count += 1
    model.train(was_training)
    if count == 0:
        raise ValueError("evaluate got no batches")
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
) -> History:
    """Train ``model`` and return its ``History``.

    - ``clip``: clip the global gradient norm to this value (RNNs need it).
    - ``max_steps``: stop after this many optimizer steps in total (FAST mode uses it).
    - ``patience``: with ``valid_data``, stop once validation loss has not improved for this many
      epochs, and restore the best weights.
    - ``checkpoint``: save model, optimizer and history there after every epoch.
    - On CUDA the forward pass runs under bf16 autocast; elsewhere in float32.
    """
    if isinstance(epochs, bool) or not isinstance(epochs, int) or epochs < 1:
        raise ValueError(f"epochs must be an int >= 1, got {epochs!r}")
    if clip is not None and not clip > 0:
        raise ValueError(f"clip must be a positive float or None, got {clip!r}")
    if patience is not None and valid_data is None:
        raise ValueError("patience (early stopping) needs valid_data to watch")
    device = device or get_device()
    model.to(device)
    history, best_loss, best_state, bad_epochs, steps = History(), math.inf, None, 0, 0
    for epoch in range(epochs):
        model.train()
        epoch_total, epoch_count = 0.0, 0
        batches = _batches(train_data)
        total = len(batches) if hasattr(batches, "__len__") else None
        bar = tqdm(batches, total=total, desc=f"epoch {epoch + 1}/{epochs}", disable=not progress,
                   leave=False)
        for batch in bar:
            with autocast(device):
                loss = loss_fn(model, to_device(batch, device))
            if not torch.isfinite(loss):
                raise FloatingPointError(
                    f"loss became {loss.item()} at step {steps}; lower the learning rate or set "
                    "clip (gradient clipping)"
                )
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            if clip is not None:
                torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
            optimizer.step()
            steps += 1
            history.step_loss.append(loss.item())
            epoch_total += history.step_loss[-1]
            epoch_count += 1
            # refresh=False: a redraw per step makes Jupyter, not training, the bottleneck
            bar.set_postfix(loss=f"{history.step_loss[-1]:.3f}", refresh=False)
            if max_steps is not None and steps >= max_steps:
                break
        history.train_loss.append(epoch_total / max(epoch_count, 1))
        if valid_data is not None:
            valid = evaluate(model, valid_data, loss_fn, device)
            history.valid_loss.append(valid)
            if valid < best_loss:
                best_loss, history.best_epoch, bad_epochs = valid, epoch, 0
                if patience is not None:
                    best_state = copy.deepcopy(model.state_dict())
            else:
                bad_epochs += 1
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
