"""What else the machine was doing while a case was timed, and one verdict: ``clean`` or ``noisy``.

`InterferenceMonitor` brackets a timed loop and reads other processes' CPU time on our cores,
stolen time, our own load, a reference kernel before and after (``host_speed``), and NVML clocks
and processes on NVIDIA GPUs; `judge` gives the verdict and its reason in words.
"""

from __future__ import annotations

import functools
import json
import math
import os
import statistics
import time
from collections.abc import Mapping
from contextlib import suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import psutil

Noise = Literal["clean", "noisy"]

#: Other processes' mean load on our cores above which a record is noisy. The floor absorbs the
#: kernel, the shell and pytest's own helpers (about 0.02-0.1 core on an idle runner).
MAX_OTHER_CORES = 0.25
#: Share of the window the hypervisor may steal before a record is noisy.
MAX_STEAL_SHARE = 0.05
#: NVML clock-event reasons (nvmlClocksEventReasons) that mean the GPU was slowed by something
#: other than the case itself.
GPU_SLOWDOWN_REASONS: dict[int, str] = {0x8: "hardware slowdown", 0x20: "software thermal slowdown",
                                         0x40: "hardware thermal slowdown", 0x80: "power brake slowdown"}

#: A record is noisy when the reference kernel before and after the loop disagree by more than
#: this factor and the loop itself moved the same way by more than `MAX_TREND`.
MAX_REFERENCE_CHANGE = 1.2
#: The loop's trend (``readings["rounds_trend"]``) within this factor, or against the kernel's
#: direction: the change of host speed did not reach the timed loop, and its figure stands.
#: 1.1 is the smallest change `hwbench compare` counts.
MAX_TREND = 1.1
#: Reference readings kept per host in the baseline file (the most recent ones).
RECENT_READINGS = 64
#: Percentile of the recent reference times that is the host's baseline: its fast end, robust to a
#: single lucky reading.
BASELINE_PERCENTILE = 10.0
#: Side of the float32 matrix the reference kernel multiplies, and products per sample, shared by
#: torch's intra-op threads as a model's kernels are (about 0.45 ms per sample on a 2-core EPYC).
REFERENCE_SIZE = 128
REFERENCE_PRODUCTS = 20

_PROC_STAT = Path("/proc/stat")
_CLOCK_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def allowed_cores() -> tuple[int, ...]:
    """The CPU ids this process may run on (all online CPUs where affinity cannot be read)."""
    try:
        return tuple(sorted(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return tuple(range(os.cpu_count() or 1))


def _per_core_seconds(stat: str | None = None) -> dict[int, tuple[float, float]]:
    """CPU id -> (busy seconds, stolen seconds) since boot, from ``/proc/stat`` (or its text `stat`)
    by the id each line names (psutil numbers CPUs by position, wrong after an offline one)."""
    out: dict[int, tuple[float, float]] = {}
    if stat is None:
        try:
            stat = _PROC_STAT.read_text()
        except OSError:
            return out
    for line in stat.splitlines():
        if line.startswith("cpu") and not line.startswith("cpu "):
            name, *fields = line.split()
            user, nice, system, _idle, _iowait, irq, softirq, steal = (int(v) for v in fields[:8])
            # guest time is already inside user and nice (proc(5)), so it is not added again
            out[int(name[3:])] = ((user + nice + system + irq + softirq) / _CLOCK_TICKS, steal / _CLOCK_TICKS)
    return out


def _cpu_seconds(pids: tuple[int, ...] = ()) -> float:
    """CPU seconds used by this process and by `pids` (processes doing the case's work; one gone counts 0)."""
    total = 0.0
    for pid in (os.getpid(), *pids):
        with suppress(psutil.NoSuchProcess, psutil.AccessDenied):
            cpu = psutil.Process(pid).cpu_times()
            total += cpu.user + cpu.system
    return total


def busiest_processes(exclude: tuple[int, ...] = ()) -> list[str]:
    """The five processes other than this one (and `exclude`) that used the most CPU over a tenth
    of a second, as ``"python3 (pid 1234) 0.98 cores"``; only those above a tenth of a core."""
    skip = {os.getpid(), *exclude}
    procs = [p for p in psutil.process_iter(["name"]) if p.pid not in skip]
    for proc in procs:
        with suppress(psutil.Error):
            proc.cpu_percent()  # the first call starts each process's window
    time.sleep(0.1)
    used = []
    for proc in procs:
        try:
            cores = proc.cpu_percent() / 100
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
        if cores >= 0.1:
            used.append((cores, f"{proc.info.get('name') or '?'} (pid {proc.pid}) {cores:.2f} cores"))
    return [text for _, text in sorted(used, reverse=True)[:5]]


def _cpu_mhz(cores: tuple[int, ...]) -> float | None:
    """Mean current clock of `cores` in MHz (cpufreq), None where the kernel does not expose it."""
    values = []
    for core in cores:
        try:
            values.append(int(Path(f"/sys/devices/system/cpu/cpu{core}/cpufreq/scaling_cur_freq").read_text()) / 1e3)
        except (OSError, ValueError):
            continue
    return round(sum(values) / len(values), 1) if values else None


@functools.cache
def _reference_matrix() -> Any:
    import torch

    return torch.rand(REFERENCE_SIZE, REFERENCE_SIZE, generator=torch.Generator().manual_seed(0))


def reference_us(repeats: int = 7) -> float:
    """Median microseconds of `REFERENCE_PRODUCTS` fixed float32 matrix products on torch's
    intra-op threads (the CPU), now. Why: on a virtual machine, a neighbour on the same physical
    cores slows multi-threaded code without showing in ``/proc/stat`` or steal time."""
    import torch

    matrix = _reference_matrix()
    times = []
    with torch.inference_mode():
        for _ in range(repeats):
            start = time.perf_counter()
            for _ in range(REFERENCE_PRODUCTS):
                torch.mm(matrix, matrix)
            times.append(time.perf_counter() - start)
    return statistics.median_high(times) * 1e6


def _host_key() -> str:
    """This host, the cores we may use and torch's thread count: the kernel's speed depends on each."""
    import platform

    import torch

    return (f"{platform.node()}|{platform.processor() or platform.machine()}|{len(allowed_cores())}"
            f"|{torch.get_num_threads()}")


class ReferenceBaseline:
    """This host's last `RECENT_READINGS` reference-kernel times, kept across runs in `path` (one
    list per `_host_key`; None: in memory only), and their `BASELINE_PERCENTILE` percentile, the
    baseline: the fast end of how this host has run lately, not the fastest it ever ran."""

    def __init__(self, path: Path | None = None) -> None:
        self.path = path
        self.recent = _stored(path)[1][-RECENT_READINGS:] if path is not None else []

    @property
    def baseline_us(self) -> float | None:
        """The `BASELINE_PERCENTILE` percentile of the recent readings (None before the first)."""
        import numpy as np

        return float(np.percentile(self.recent, BASELINE_PERCENTILE)) if self.recent else None

    def host_speed(self, measured_us: float, *, remember: bool = True) -> float | None:
        """The baseline over `measured_us` (below 1: slower than lately; None before any reading),
        after adding `measured_us` to the recent readings if `remember` (not for a crowded one)."""
        if not measured_us > 0:
            raise ValueError(f"measured_us must be > 0 microseconds, got {measured_us!r}")
        if remember:
            self.recent = [*self.recent, float(measured_us)][-RECENT_READINGS:]
            self._save()
        baseline = self.baseline_us
        return None if baseline is None else baseline / measured_us

    def _save(self) -> None:
        if self.path is None:
            return
        known, stored = _stored(self.path)
        # other processes (xdist workers) append too: keep theirs, then this process's newest
        merged = [v for v in stored if v not in self.recent] + self.recent
        known[_host_key()] = {"recent": merged[-RECENT_READINGS:]}
        tmp = self.path.with_suffix(f".{os.getpid()}.tmp")
        with suppress(OSError):  # a read-only home: the in-process readings still work
            self.path.parent.mkdir(parents=True, exist_ok=True)
            tmp.write_text(json.dumps(known))
            tmp.replace(self.path)  # atomic: concurrent workers never read half a file


def _stored(path: Path) -> tuple[dict[str, Any], list[float]]:
    """A baseline file's content (host key -> its readings; {} unreadable) and this host's readings."""
    try:
        known = json.loads(path.read_text())
    except (OSError, ValueError):
        known = {}
    known = known if isinstance(known, dict) else {}
    mine = known.get(_host_key())
    recent = mine.get("recent") if isinstance(mine, dict) else None
    if not isinstance(recent, list):
        return known, []
    return known, [float(v) for v in recent if isinstance(v, (int, float)) and v > 0]


@dataclass(frozen=True)
class HostSnapshot:
    """Counters at one instant: wall clock, per-core busy and steal seconds, own CPU seconds."""

    wall_s: float
    cores: tuple[int, ...]
    per_core: Mapping[int, tuple[float, float]]
    own_cpu_s: float

    @classmethod
    def take(cls, own_pids: tuple[int, ...] = ()) -> HostSnapshot:
        """Read the counters now; `own_pids` are processes whose CPU time is the case's own."""
        return cls(time.monotonic(), allowed_cores(), _per_core_seconds(), _cpu_seconds(own_pids))


def host_readings(start: HostSnapshot, end: HostSnapshot) -> dict[str, Any]:
    """What happened on the cores of `start` between the two snapshots (the record's readings)."""
    wall = max(end.wall_s - start.wall_s, 1e-9)
    cores = start.cores
    readable = [c for c in cores if c in start.per_core and c in end.per_core]
    busy = sum(end.per_core[c][0] - start.per_core[c][0] for c in readable)
    steal = sum(end.per_core[c][1] - start.per_core[c][1] for c in readable)
    own = max(0.0, end.own_cpu_s - start.own_cpu_s)
    readings: dict[str, Any] = {
        "window_s": round(wall, 4),
        "cores_allowed": len(cores),
        "cores_online": os.cpu_count() or len(cores),
        "own_cores": round(own / wall, 3),
        "load_avg_1m": round(os.getloadavg()[0], 2) if hasattr(os, "getloadavg") else None,
        "cpu_mhz": _cpu_mhz(cores),
    }
    if readable:
        # /proc/stat counts in clock ticks (10 ms): a share below one tick per window is noise.
        readings["other_cores"] = round(max(0.0, busy - own) / wall, 3)
        readings["steal_cores"] = round(max(0.0, steal) / wall, 3)
    return readings


def gpu_readings(device_index: int) -> dict[str, Any]:
    """NVML readings of cuda:`device_index` now (SM clocks, clock-event reasons, processes); {} unreadable."""
    from .energy import nvml_handle

    pynvml, handle = nvml_handle(device_index)
    if handle is None:
        return {}
    out: dict[str, Any] = {}
    with suppress(pynvml.NVMLError):
        out["gpu_sm_clock_mhz"] = int(pynvml.nvmlDeviceGetClockInfo(handle, pynvml.NVML_CLOCK_SM))
        out["gpu_sm_clock_max_mhz"] = int(pynvml.nvmlDeviceGetMaxClockInfo(handle, pynvml.NVML_CLOCK_SM))
    reasons = getattr(pynvml, "nvmlDeviceGetCurrentClocksEventReasons", None) or getattr(
        pynvml, "nvmlDeviceGetCurrentClocksThrottleReasons", None)
    with suppress(pynvml.NVMLError):
        if reasons is not None:
            out["gpu_clock_event_reasons"] = int(reasons(handle))
    with suppress(pynvml.NVMLError):
        procs = pynvml.nvmlDeviceGetComputeRunningProcesses(handle)
        out["gpu_process_pids"] = sorted({int(p.pid) for p in procs})
    return out


def tick_error(readings: Mapping[str, Any]) -> float:
    """How far `other_cores` may be off from the counters' granularity alone: two clock ticks
    (of 10 ms) per core and window, so a window of a few milliseconds shows no interference."""
    window = float(readings.get("window_s") or 0.0)
    cores = int(readings.get("cores_allowed") or 1)
    return 2.0 * cores / (_CLOCK_TICKS * window) if window > 0 else float("inf")


def reference_change(readings: Mapping[str, Any]) -> float:
    """How far the reference kernel before and after the loop disagree, a factor >= 1 (1.0 unread)."""
    before, after = readings.get("reference_before_us"), readings.get("reference_after_us")
    if not (isinstance(before, (int, float)) and isinstance(after, (int, float)) and before > 0 and after > 0):
        return 1.0
    return max(before, after) / min(before, after)


def cpu_crowded(readings: Mapping[str, Any], threads: int | None = None) -> list[str]:
    """What other work held the CPU the case needed, each in words: other processes on the cores
    its `threads` needed (every allowed core without `threads`), stolen time. Empty when nothing did."""
    reasons: list[str] = []
    cores = readings.get("cores_allowed") or 0
    other = readings.get("other_cores")
    left_free = max(0, cores - threads) if threads and cores else 0
    if other is not None and other > left_free + MAX_OTHER_CORES + tick_error(readings):
        busiest = readings.get("busiest") or ()
        named = f" (busiest: {', '.join(busiest)})" if busiest else ""
        reasons.append(f"{other:.1f} of {cores} cores busy with other processes{named}")
    steal = readings.get("steal_cores")
    if steal is not None and cores and steal > MAX_STEAL_SHARE * cores:
        reasons.append(f"{steal:.2f} cores stolen by the hypervisor")
    return reasons


def crowded(readings: Mapping[str, Any], threads: int | None = None, own_pids: set[int] | None = None) -> list[str]:
    """What other work held what the case needed, each in words: the CPU (`cpu_crowded`), other
    processes on its GPU; empty when nothing did. A wait before a retry can clear this."""
    reasons = cpu_crowded(readings, threads)
    pids = readings.get("gpu_process_pids")
    if pids:
        others = sorted(set(pids) - (own_pids if own_pids is not None else {os.getpid()}))
        if others:
            shown = ", ".join(str(p) for p in others[:5])
            reasons.append(f"{len(others)} other process{'es' if len(others) > 1 else ''} on the GPU (pid {shown})")
    return reasons


def host_changed(readings: Mapping[str, Any]) -> str:
    """Why the host changed speed during the case, in words, or "" where it did not: the reference
    kernel before and after the loop disagree by more than `MAX_REFERENCE_CHANGE` and the loop's
    ``rounds_trend``, where read, moved the same way by more than `MAX_TREND`."""
    change = reference_change(readings)
    if change <= MAX_REFERENCE_CHANGE:
        return ""
    before, after = readings.get("reference_before_us"), readings.get("reference_after_us")
    slower_after = (after or 0) > (before or 0)
    trend = readings.get("rounds_trend")
    if isinstance(trend, (int, float)) and trend > 0:
        moved = trend if slower_after else 1.0 / trend  # > 1: the loop moved the kernel's way
        if moved <= MAX_TREND:
            return ""
        shown = f", and the timed loop ended {max(trend, 1 / trend):.2f}x {'slower' if trend > 1 else 'faster'}"
    else:
        shown = ""
    when = "after the case than before" if slower_after else "before the case than after"
    return f"the host changed speed during the case: a reference kernel ran {change:.2f}x slower {when}{shown}"


def judge(readings: Mapping[str, Any], *, own_pids: set[int] | None = None,
          threads: int | None = None) -> tuple[Noise, str]:
    """``("clean", "")`` or ``("noisy", reason)`` for one record's readings (see `host_readings`,
    `gpu_readings`), reasons joined with ``; ``: other work on what the case needed (`crowded`, not
    on cores its `threads` left free), the host changing speed during the case (`host_changed`), or
    a GPU slowed by heat or power. A steadily slow host (``host_speed`` < 1) is not noisy."""
    reasons = crowded(readings, threads, own_pids)
    changed = host_changed(readings)
    if changed:
        reasons.append(changed)
    event = readings.get("gpu_clock_event_reasons")
    if event:
        slow = [name for bit, name in GPU_SLOWDOWN_REASONS.items() if event & bit]
        if slow:
            clock, top = readings.get("gpu_sm_clock_mhz"), readings.get("gpu_sm_clock_max_mhz")
            at = f" (SM clock {clock} of {top} MHz)" if clock and top else ""
            reasons.append(f"GPU clocks reduced by {', '.join(slow)}{at}")
    return ("noisy", "; ".join(reasons)) if reasons else ("clean", "")


def free_cores(readings: Mapping[str, Any]) -> int:
    """Cores of ours that other processes left free in that window (at least 1)."""
    cores = int(readings.get("cores_allowed") or 1)
    other = float(readings.get("other_cores") or 0.0)
    return max(1, min(cores, int(cores - other + 0.5)))


def severity(readings: Mapping[str, Any], threads: int | None = None) -> float:
    """How much the case was disturbed, in cores; orders the tries of a case (least is kept): our
    `threads` (else the cores we kept busy) plus others' load and stolen time beyond the cores we
    may use, a little for a host that changed speed, one core for a slowed or shared GPU."""
    cores = float(readings.get("cores_allowed") or 1)
    demand = float(threads) if threads else float(readings.get("own_cores") or 0.0)
    other = float(readings.get("other_cores") or 0.0) + float(readings.get("steal_cores") or 0.0)
    value = max(0.0, min(demand, cores) + other - cores) + 0.01 * other  # ties: the quieter window
    # a tenth of a core per 100 % slower: never outweighs threads that had no core of their own
    value += 0.1 * (reference_change(readings) - 1.0)
    if any(bit & int(readings.get("gpu_clock_event_reasons") or 0) for bit in GPU_SLOWDOWN_REASONS):
        value += 1.0
    if set(readings.get("gpu_process_pids") or ()) - {os.getpid()}:
        value += 1.0
    return value


@dataclass
class InterferenceMonitor:
    """Brackets a timed loop: ``with InterferenceMonitor() as monitor: ...`` then
    `monitor.readings` (the host's, plus the GPU's on NVIDIA devices when `gpu_index` is given).
    `own_pids` do the measured work besides this process (their CPU time is not "other"); when
    others held more than `MAX_OTHER_CORES`, the busiest are named in ``readings["busiest"]``.
    """

    gpu_index: int | None = None
    own_pids: tuple[int, ...] = ()
    reference: ReferenceBaseline | None = None
    readings: dict[str, Any] = field(default_factory=dict, init=False)

    def __enter__(self) -> InterferenceMonitor:
        self._reference_before = reference_us() if self.reference is not None else None
        self._start = HostSnapshot.take(self.own_pids)
        return self

    def __exit__(self, *exc: object) -> None:
        self.readings = host_readings(self._start, HostSnapshot.take(self.own_pids))
        if self.reference is not None and self._reference_before is not None:
            before, after = self._reference_before, reference_us()
            middle = math.sqrt(before * after)  # stands for the window; their disagreement: `judge`
            self.readings["reference_before_us"] = round(before, 2)
            self.readings["reference_after_us"] = round(after, 2)
            self.readings["reference_us"] = round(middle, 2)
            import torch

            # beside other work on the kernel's cores, its time is the crowding's, not the host's
            crowding = cpu_crowded(self.readings, torch.get_num_threads())
            speed = self.reference.host_speed(middle, remember=not crowding)
            if speed is not None:
                self.readings["host_speed"] = float(f"{speed:.3g}")  # 3 significant digits: 0.00843
            baseline = self.reference.baseline_us
            if baseline is not None:
                self.readings["reference_baseline_us"] = round(baseline, 2)
        if self.gpu_index is not None:
            self.readings.update(gpu_readings(self.gpu_index))
        if (self.readings.get("other_cores") or 0.0) > MAX_OTHER_CORES + tick_error(self.readings):
            with suppress(Exception):  # naming them is a courtesy; the verdict stands without it
                self.readings["busiest"] = busiest_processes(exclude=self.own_pids)


__all__ = ["MAX_OTHER_CORES", "HostSnapshot", "InterferenceMonitor", "ReferenceBaseline", "Noise",
           "cpu_crowded", "crowded", "free_cores", "gpu_readings", "host_readings", "judge", "reference_us",
           "tick_error", "severity"]
