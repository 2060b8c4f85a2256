"""Results measured once and shipped with the library, for what one run of a lecture cannot show:
how each of its claims spreads over seeds and thread counts, and what full mode gives while you
run FAST.

``data/measured/*.sweep.json`` holds a lecture's FAST-mode sweep: every ``seqlab.claim``
it made and a few headline numbers, in each of 15 runs (seeds 0-4, 1, 2 and 4 torch threads).
``data/measured/*.full.json`` holds what one full-mode run recorded. Both are written by
the runs that measured them (``sweep_record`` and ``full_record``, through ``write``), never by
hand, and say where, when and with which torch. A lecture reads them with ``sweep`` and
``full_mode`` and prints that provenance next to the numbers.
"""

from __future__ import annotations

import datetime
import json
import os
import platform
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from .results import Check

FOLDER = Path(__file__).resolve().parent / "data" / "measured"
SEEDS, THREADS = (0, 1, 2, 3, 4), (1, 2, 4)  # what a shipped sweep covers
KINDS = ("sweep", "full")


class NotMeasured(FileNotFoundError):
    """A lecture asked for a record the library does not hold."""


def provenance() -> dict[str, str]:
    """Where and with what a measurement runs: date, machine, torch and Python."""
    import torch

    machine = f"{platform.machine()} CPU, {os.cpu_count()} cores"
    if torch.cuda.is_available():
        machine += f", GPU {torch.cuda.get_device_name(0)}"
    return {"date": datetime.date.today().isoformat(), "machine": machine,
            "torch": torch.__version__, "python": platform.python_version()}


def _number(value):
    """A recorded value as a float (``record`` stores NaN and infinities as strings)."""
    return None if value is None else float(value)


def sweep_record(notebook: str, runs: list[dict], numbers: Callable[[dict], dict],
                 command: str) -> dict:
    """The record of a sweep over ``runs``, each ``{"seed", "threads", "error", "records"}``
    (``records``: what the run's results file held): every claim's value per run (``None``
    where a run did not make it), and the headline ``numbers(records)`` per run."""
    claims: dict[str, dict] = {}
    table: dict[str, list] = {}
    for i, run in enumerate(runs):
        for name, made in run["records"].get("claims", {}).items():
            entry = claims.setdefault(name, {"op": made["op"], "threshold": made["threshold"],
                                             "values": [None] * len(runs)})
            entry["values"][i] = made["value"]
        for key, value in numbers(run["records"]).items():
            table.setdefault(key, [None] * len(runs))[i] = value
    return {"notebook": notebook, "kind": "sweep", "mode": "FAST",
            "measured": {**provenance(), "command": command},
            "runs": [{"seed": r["seed"], "threads": r["threads"], "error": r["error"]}
                     for r in runs],
            "claims": dict(sorted(claims.items())), "numbers": table}


def full_record(notebook: str, results: dict, seconds: float, command: str) -> dict:
    """The record of one full-mode run of ``notebook``: everything its results file held."""
    return {"notebook": notebook, "kind": "full", "mode": "full",
            "measured": {**provenance(), "command": command, "seconds": round(seconds, 1)},
            "records": results}


def write(record: dict, folder: Path | str = FOLDER) -> Path:
    """Write ``record`` to ``folder/<notebook>.<kind>.json`` atomically; return the path."""
    if record.get("kind") not in KINDS:
        raise ValueError(f"record kind must be one of {KINDS}, got {record.get('kind')!r}")
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{record['notebook']}.{record['kind']}.json"
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=path.name, suffix=".tmp")
    with os.fdopen(fd, "w") as handle:
        json.dump(record, handle, indent=1, sort_keys=True)
        handle.write("\n")
    os.chmod(tmp, 0o644)  # package data: readable by everyone, as the library's other files
    os.replace(tmp, path)
    return path


def load(notebook: str, kind: str, folder: Path | str = FOLDER) -> dict:
    """The shipped record of ``notebook`` (``"02_rnn_backprop"``) of ``kind``, checked."""
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {KINDS}, got {kind!r}")
    path = Path(folder) / f"{notebook}.{kind}.json"
    if not path.is_file():
        raise NotMeasured(f"no {kind} record of {notebook} in {path.parent}: the course ships "
                          f"one for each lecture that prints it")
    record = json.loads(path.read_text())
    expected = {"notebook": notebook, "kind": kind, "mode": "FAST" if kind == "sweep" else "full"}
    for key, value in expected.items():
        if record.get(key) != value:
            raise ValueError(f"{path.name}: {key} must be {value!r}, got {record.get(key)!r}")
    return record


def _seeds(seeds: list[int]) -> str:
    seeds = sorted(set(seeds))
    if len(seeds) > 2 and seeds == list(range(seeds[0], seeds[-1] + 1)):
        return f"{seeds[0]}-{seeds[-1]}"
    return ", ".join(map(str, seeds))


@dataclass(frozen=True)
class Sweep:
    """A lecture's FAST-mode sweep: each claim and headline number over every run."""

    record: dict

    @property
    def runs(self) -> list[dict]:
        return self.record["runs"]

    def describe(self) -> str:
        m = self.record["measured"]
        threads = ", ".join(map(str, sorted({r["threads"] for r in self.runs})))
        return (f"FAST mode, seeds {_seeds([r['seed'] for r in self.runs])} x {threads} torch "
                f"threads ({len(self.runs)} runs), measured {m['date']} on {m['machine']}, "
                f"torch {m['torch']}")

    def values(self, name: str) -> list[float]:
        """The values of a claim or headline number over the runs that have it."""
        table = self.record["claims"].get(name, {}).get("values") or \
            self.record["numbers"].get(name)
        if table is None:
            known = sorted([*self.record["claims"], *self.record["numbers"]])
            raise KeyError(f"{self.record['notebook']}'s sweep has no {name!r}; it has: "
                           + "; ".join(known))
        return [_number(v) for v in table if v is not None]

    def spread(self, name: str) -> tuple[float, float]:
        """(smallest, largest) value of a claim or headline number over the runs."""
        values = self.values(name)
        return min(values), max(values)

    def held(self, name: str) -> tuple[int, int]:
        """(runs where the claim held, runs that made it)."""
        made = self.record["claims"][name]
        check = Check(name, made["op"], made["threshold"])
        values = self.values(name)
        return sum(check.holds(v) for v in values), len(values)

    def show(self, names: list[str] | None = None) -> None:
        """Print the spread of ``names`` (default: every claim) over the runs, with where the
        runs were made."""
        print(self.describe())
        print(f"{'held':>7s} {'min':>10s} {'max':>10s}  claim or number")
        for name in names or list(self.record["claims"]):
            lo, hi = self.spread(name)
            made = self.record["claims"].get(name)
            if made:
                k, n = self.held(name)
                label = f"{name} {made['op']} {made['threshold']:g}"
                held = f"{k}/{n}"
            else:
                label, held = name, ""
            print(f"{held:>7s} {lo:10.4g} {hi:10.4g}  {label}")


@dataclass(frozen=True)
class Full:
    """What one full-mode run of a lecture recorded."""

    record: dict

    @property
    def records(self) -> dict:
        return self.record["records"]

    def claim(self, name: str) -> float:
        """The value of a claim that the full-mode run made (it held there)."""
        made = self.records.get("claims", {}).get(name)
        if made is None:
            raise KeyError(f"{self.record['notebook']}'s full-mode run made no claim {name!r}")
        value = _number(made["value"])
        if not Check(name, made["op"], made["threshold"]).holds(value):
            raise AssertionError(f"{name} did not hold in the recorded full-mode run: {value:g}")
        return value

    def describe(self) -> str:
        m = self.record["measured"]
        return (f"full mode, as one run measured it ({m['command']}): {m['date']}, "
                f"{m['machine']}, torch {m['torch']}")


def sweep(notebook: str, folder: Path | str = FOLDER) -> Sweep:
    """The shipped FAST-mode sweep of ``notebook`` (``"02_rnn_backprop"``)."""
    return Sweep(load(notebook, "sweep", folder))


def full_mode(notebook: str, folder: Path | str = FOLDER) -> Full:
    """What the shipped full-mode run of ``notebook`` recorded."""
    return Full(load(notebook, "full", folder))

