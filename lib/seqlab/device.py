"""Pick the compute device once, the same way in every notebook.

Order: CUDA, then Apple MPS, then CPU. ``SEQLAB_DEVICE`` (``cpu``, ``cuda``, ``cuda:1``, ``mps``)
overrides the choice, and asking for a device that is not there is an error rather than a silent
fallback: a lecturer who asked for the GPU should learn at once that they are not on one.
"""

from __future__ import annotations

import contextlib
import os

import torch

_KINDS = ("cpu", "cuda", "mps")


def _mps_available() -> bool:
    mps = getattr(torch.backends, "mps", None)
    return bool(mps is not None and mps.is_available())


def get_device(name: str | None = None) -> torch.device:
    """Return the device to compute on.

    ``name`` (or, when it is None, the ``SEQLAB_DEVICE`` environment variable) forces a device;
    without either, the best available one is chosen.
    """
    if name is not None and not isinstance(name, str):
        raise TypeError(f"name must be a str such as 'cpu' or 'cuda', got {type(name).__name__}")
    requested = name if name is not None else os.environ.get("SEQLAB_DEVICE", "").strip()
    if not requested or requested == "auto":
        if torch.cuda.is_available():
            return torch.device("cuda")
        if _mps_available():
            return torch.device("mps")
        return torch.device("cpu")
    try:
        device = torch.device(requested)
    except RuntimeError as err:
        raise ValueError(
            f"device {requested!r} is not a device name; expected one of {', '.join(_KINDS)}, "
            "'cuda:N' or 'auto'"
        ) from err
    if device.type not in _KINDS:
        raise ValueError(f"device {requested!r} is not supported; expected one of {_KINDS}")
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise RuntimeError(
                f"device {requested!r} was requested (SEQLAB_DEVICE or argument) but CUDA is not "
                "available here. On Colab: Runtime > Change runtime type > GPU. Otherwise unset "
                "SEQLAB_DEVICE or set it to 'cpu'."
            )
        if device.index is not None and device.index >= torch.cuda.device_count():
            raise RuntimeError(
                f"device {requested!r} was requested but only {torch.cuda.device_count()} CUDA "
                "device(s) exist"
            )
    if device.type == "mps" and not _mps_available():
        raise RuntimeError(
            f"device {requested!r} was requested but Apple MPS is not available here; "
            "unset SEQLAB_DEVICE or set it to 'cpu'"
        )
    return device


def fast_mode(announce: bool = True) -> bool:
    """Whether a notebook runs in FAST mode (small data, few steps) or full mode.

    ``SEQLAB_FAST=1`` or ``0`` decides; otherwise FAST unless a CUDA GPU is present, so a laptop
    or a Colab CPU runtime never starts a long full-mode run by surprise. With ``announce``,
    prints the mode, why, and how to switch.
    """
    setting = os.environ.get("SEQLAB_FAST", "").strip().lower()
    if setting in ("1", "true", "yes"):
        fast, why = True, "SEQLAB_FAST=1"
    elif setting in ("0", "false", "no"):
        fast, why = False, "SEQLAB_FAST=0"
    elif setting in ("", "auto"):
        fast = not torch.cuda.is_available()
        why = "no CUDA GPU here" if fast else "a CUDA GPU is present"
    else:
        raise ValueError(f"SEQLAB_FAST must be 1, 0 or auto, got {setting!r}")
    if announce:
        switch = ("set SEQLAB_FAST=0 (or FAST = False below) for full mode, meant for a GPU"
                  if fast else "set SEQLAB_FAST=1 (or FAST = True below) for FAST mode")
        print(f"{'FAST' if fast else 'full'} mode ({why}); {switch}")
    return fast


PRECISIONS = ("auto", "fp32", "bf16", "fp16")
_HALF = {"fp32": None, "bf16": torch.bfloat16, "fp16": torch.float16}


def precision(setting: str | None = None) -> str:
    """The training precision asked for: ``setting``, else ``SEQLAB_PRECISION``, else "auto".

    One of ``PRECISIONS``: "auto" (the device decides, see ``autocast_dtype``), "fp32" (no
    autocast), "bf16" or "fp16" (autocast in that type on any device, the CPU included: how
    tests run the GPU's half-precision paths on a machine without one).
    """
    if setting is not None and not isinstance(setting, str):
        raise TypeError(f"precision must be a str, one of {', '.join(PRECISIONS)}, got "
                        f"{type(setting).__name__}")
    name = "precision" if setting is not None else "SEQLAB_PRECISION"
    value = setting if setting is not None else os.environ.get("SEQLAB_PRECISION", "")
    chosen = value.strip().lower() or "auto"
    if chosen not in PRECISIONS:
        raise ValueError(f"{name} must be one of {', '.join(PRECISIONS)}, got {value!r}")
    return chosen


def autocast_dtype(device: torch.device | str, setting: str | None = None) -> torch.dtype | None:
    """The half-precision type autocast computes in on ``device``, or None for plain float32.

    ``setting`` (else ``SEQLAB_PRECISION``, see ``precision``) "auto": bfloat16 where the GPU
    computes it natively (compute capability 8.0 and up: A100, H100, L4, RTX 30xx); float16 on
    older CUDA GPUs such as Colab's free T4 (7.5), which needs a gradient scaler
    (``grad_scaler``) because float16 gradients underflow; none on CPU and MPS, so results there
    are float32. "bf16", "fp16" and "fp32" choose the type on every device.
    """
    device = torch.device(device) if isinstance(device, str) else device
    if not isinstance(device, torch.device):
        raise TypeError(f"device must be a torch.device or str, got {type(device).__name__}")
    chosen = precision(setting)
    if chosen != "auto":
        return _HALF[chosen]
    if device.type != "cuda":
        return None
    major, _ = torch.cuda.get_device_capability(device)
    return torch.bfloat16 if major >= 8 and torch.cuda.is_bf16_supported() else torch.float16


def autocast(device: torch.device | str, enabled: bool = True, setting: str | None = None):
    """Mixed precision as ``autocast_dtype`` decides; a no-op context under float32."""
    dtype = autocast_dtype(device, setting)
    if enabled and dtype is not None:
        return torch.autocast(device_type=torch.device(device).type, dtype=dtype)
    return contextlib.nullcontext()


def grad_scaler(device: torch.device | str, enabled: bool = True, setting: str | None = None
                ) -> torch.amp.GradScaler:
    """A gradient scaler, active only when ``autocast`` computes in float16 (whose small
    gradients would underflow to 0); a no-op otherwise."""
    on = enabled and autocast_dtype(device, setting) == torch.float16
    return torch.amp.GradScaler(torch.device(device).type, enabled=on)
