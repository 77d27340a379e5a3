"""One side of `hwbench ab`: what the side runs (`Side`), the long-lived worker process that
measures its cases (an execnet gateway running `_worker`, as pytest-xdist starts its workers) and
the controller's handle on it (`SideWorker`).

On the channel: the controller sends the setup (environment, `sys.path`, settings, cases as dicts,
pair, label, session id, threads); the worker answers with its `SideEnvironment`, then each
``(round, case number)`` with that case's record as JSON; ``None`` ends the worker.
"""

from __future__ import annotations

import contextlib
import os
import sys
from dataclasses import dataclass, field, fields
from typing import Any

from .record import BenchmarkRecord

#: Defaults of a side: a short timed loop per round. Many short rounds beat few long ones for the
#: same time: more of the host's drift cancels, and the paired test gets more pairs
#: (`benchmarks/gate_quality.py` measures it).
DEFAULT_SIDE = {"warmup_iterations": 2, "min_iterations": 5, "min_time_s": 0.1, "noise_retries": 0}
#: Seconds a side's worker may take to start, and to measure one case (`--side-timeout`).
DEFAULT_SIDE_TIMEOUT_S = 600.0


@dataclass(frozen=True)
class Side:
    """One variant: its label, python, environment additions and measurement settings."""

    label: str
    python: str = sys.executable
    env: dict[str, str] = field(default_factory=dict)
    settings: dict[str, Any] = field(default_factory=lambda: dict(DEFAULT_SIDE))
    options_text: str = ""

    def describe(self) -> str:
        """The variant in words, e.g. ``python .venv/bin/python, HWBENCH_X=1, --hwbench-min-time 0.5``."""
        parts = [] if self.python == sys.executable else [f"python {self.python}"]
        parts += [f"{k}={v}" for k, v in sorted(self.env.items())]
        if self.options_text:
            parts.append(self.options_text)
        return ", ".join(parts) or "as the controller"


@dataclass(frozen=True)
class SideEnvironment:
    """What a side's worker runs, as it reports it: its python (path and version), the package
    versions a pytest session reports (distribution -> version) and its hardware summary."""

    python: str
    python_version: str
    package_versions: dict[str, str]
    hardware_summary: str


def _worker(channel: Any) -> None:  # runs in the side's process (execnet): self-contained
    import os
    import platform
    import site
    import sys as _sys
    import traceback

    setup = channel.receive()
    os.environ.update(setup["env"])
    # The side's own packages first; the controller's paths after them, as site directories so
    # their .pth files (an editable install's finder) work here too.
    for path in setup["sys_path"]:
        if path not in _sys.path:
            site.addsitedir(path)
    from pytest_hwbench.case import BenchCase
    from pytest_hwbench.hardware import detect_hardware
    from pytest_hwbench.plugin_api import core_versions
    from pytest_hwbench.result import failed_record
    from pytest_hwbench.runner import Runner
    from pytest_hwbench.trackers import TimingConfig

    settings = setup["settings"]
    if setup.get("threads"):
        import torch

        torch.set_num_threads(int(setup["threads"]))  # before any model loads: backends read it
    cases = [BenchCase(**c) for c in setup["cases"]]
    timing = TimingConfig(warmup_iterations=settings["warmup_iterations"],
                          min_iterations=settings["min_iterations"], min_time_s=settings["min_time_s"])
    runner = Runner(timing, cache_size=max(1, len(cases)), energy_min_time_s=0,
                    noise_retries=settings["noise_retries"])
    hardware = ["cpu", *sorted({case.hardware for case in cases})]
    channel.send({"python": _sys.executable, "python_version": platform.python_version(),
                  "package_versions": core_versions(),
                  "hardware_summary": detect_hardware(targets=hardware).summary()})
    while True:
        message = channel.receive()
        if message is None:
            break
        index, which = message
        case = cases[which]
        extra = {"ab_pair": setup["pair"], "ab_side": setup["label"], "ab_round": index}
        try:
            record = runner.run(case).to_record(setup["session_id"], extra=extra)
        except Exception as exc:  # a failed case is a record too
            record = failed_record(case, setup["session_id"], f"{type(exc).__name__}: {exc}\n"
                                   f"{traceback.format_exc(limit=3)}")
        channel.send(record.to_json())
    runner.close(collect=False)


class SideWorker:
    """A side's gateway and channel; every wait on the worker is bounded by `timeout_s`."""

    def __init__(self, side: Side, cases: list[dict[str, Any]], pair: str, session_id: str,
                 threads: int | None = None, timeout_s: float = DEFAULT_SIDE_TIMEOUT_S) -> None:
        from ._deadline import call_with_deadline

        self.side, self.timeout_s = side, timeout_s
        self.group: Any = None
        self.channel: Any = None
        hello = call_with_deadline(
            lambda: self._start(cases, pair, session_id, threads), timeout_s, name=f"hwbench-ab-start-{side.label}",
            on_wait=lambda left: print(f"hwbench ab: waiting for side {side.label}'s worker to start (at most "
                                       f"{left:.0f} s more, --side-timeout)", file=sys.stderr, flush=True),
            on_deadline=self._gave_up)
        self.environment = SideEnvironment(**{f.name: hello[f.name] for f in fields(SideEnvironment)})

    def _gave_up(self) -> TimeoutError:
        """The start's deadline: end the worker's process if it has one by now."""
        if self.group is not None:
            self.group.terminate(timeout=1.0)
        return TimeoutError(f"did not start within {self.timeout_s:g} s (--side-timeout)")

    def _start(self, cases: list[dict[str, Any]], pair: str, session_id: str, threads: int | None) -> Any:
        import inspect
        import subprocess

        import execnet

        # The interpreter alone first: one that hangs is killed here, just before the deadline,
        # where a gateway still bootstrapping could not be (its process is execnet's, not yet ours).
        try:
            subprocess.run([self.side.python, "-c", "pass"], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL, timeout=0.9 * self.timeout_s, check=True)
        except subprocess.TimeoutExpired:
            raise self._gave_up() from None
        self.group = execnet.Group()
        gateway = self.group.makegateway(f"popen//python={self.side.python}")
        # as source text: the worker function plus its call (execnet runs it with `channel` bound)
        self.channel = gateway.remote_exec(f"{inspect.getsource(_worker)}\n_worker(channel)\n")
        self.channel.send({"env": self.side.env, "sys_path": [p for p in sys.path if p and os.path.isdir(p)],
                           "settings": self.side.settings, "cases": cases, "pair": pair, "label": self.side.label,
                           "session_id": session_id, "threads": threads})
        return self.channel.receive()

    def measure(self, index: int, which: int) -> BenchmarkRecord:
        """Case number `which` of round `index`, measured by this side's worker."""
        import json

        self.channel.send((index, which))
        try:
            answer = self.channel.receive(timeout=self.timeout_s)
        except self.channel.TimeoutError:
            raise TimeoutError(f"did not answer a case within {self.timeout_s:g} s (--side-timeout)") from None
        return BenchmarkRecord.from_dict(json.loads(answer))

    def close(self) -> None:
        """Ask the worker to end, then end its process whatever state it is in."""
        if self.channel is not None:
            with contextlib.suppress(Exception):  # a worker that died is gone already
                self.channel.send(None)
                self.channel.waitclose(timeout=60)
        if self.group is not None:
            self.group.terminate(timeout=5.0)


__all__ = ["DEFAULT_SIDE", "DEFAULT_SIDE_TIMEOUT_S", "Side", "SideEnvironment", "SideWorker"]
