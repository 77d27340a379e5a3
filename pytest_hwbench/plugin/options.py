"""The ``--hwbench-*`` options and their strict parsers (a `pytest.UsageError` naming the option,
the value and what is accepted), the markers, and the checks that need the zoo and the registries."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import pytest

from .. import hookspecs
from ..backends.base import BACKENDS, registered_backends
from ..case import DEFAULT_NEW_TOKENS
from ..facts import marker_docs
from ..models import FAMILIES, get_model, load_model_set, register_model
from ..plugin_api import MAX_CASE_SECONDS, positive_option
from ..scenarios import SCENARIOS, registered_modes, registered_scenarios
from ..vocabulary import DEFAULT_MODE, DEFAULT_NOISE_RETRIES, MAX_ITERATIONS, MODE_DOCS, MODES, PRECISIONS
from .grid import hardware_targets

OTHER_MARKERS: dict[str, str] = {
    "quick": "tiny model variants, for CI smoke runs",
    "hwbench(models=, families=, backends=, precisions=, batch_sizes=, hardware=, modes=, new_tokens=, "
    "input_lengths=)": "narrow the hwbench_case grid of one test",
}


def _split(value: str) -> list[str]:
    return [v.strip() for v in value.split(",") if v.strip()]


def _names(option: str, what: str, allowed: Iterable[str] | Callable[[], Iterable[str]] | None = None) -> Any:
    """A parser of a comma-separated list of `what`, from `allowed` where given (a callable: asked
    when a value is parsed, so that a registry loads only when the option is given). An empty
    list is refused: it would otherwise mean the whole default grid."""

    def parse(value: str) -> tuple[str, ...]:
        items = _split(value)
        if not items:
            raise pytest.UsageError(f"{option}: empty list; name one or more {what}, comma-separated")
        accepted = tuple(allowed() if callable(allowed) else allowed) if allowed is not None else items
        bad = ", ".join(repr(v) for v in items if v not in accepted)
        if bad:
            raise pytest.UsageError(f"{option}: {bad} not accepted; accepted: {', '.join(accepted)}")
        return tuple(dict.fromkeys(items))

    return parse


def _positive_ints(option: str, what: str, example: str) -> Any:
    """A parser of a comma-separated list of positive integers; errors name `option`."""

    def parse(value: str) -> tuple[int, ...]:
        hint = f"give positive integers, e.g. {example}"
        numbers = []
        for item in _split(value):
            try:
                number = int(item)
            except ValueError:
                raise pytest.UsageError(f"{option}: {item!r} is not an integer; {hint}") from None
            if number < 1:
                raise pytest.UsageError(f"{option}: {number} is not a valid {what}; {hint}")
            numbers.append(number)
        if not numbers:
            raise pytest.UsageError(f"{option}: empty list; {hint}")
        return tuple(dict.fromkeys(numbers))

    return parse


#: Upper bounds of the other numeric options (besides `MAX_CASE_SECONDS` and `MAX_ITERATIONS`, the
#: most iterations a timer keeps): beyond them a run would take days while saying nothing.
MAX_PROGRESS_SECONDS = 86400.0
MAX_CACHED_MODELS = 64
MAX_NOISE_RETRIES = 10


def pytest_addhooks(pluginmanager: pytest.PytestPluginManager) -> None:
    pluginmanager.add_hookspecs(hookspecs)


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("hwbench", "hardware benchmarks (pytest-hwbench)")
    group.addoption("--hwbench-models", dest="hwbench_models", type=_names("--hwbench-models", "zoo models"),
                    metavar="NAMES", help="comma-separated zoo models to run (default: all; see `hwbench models`)")
    group.addoption("--hwbench-families", dest="hwbench_families", metavar="NAMES",
                    type=_names("--hwbench-families", "families", FAMILIES),
                    help=f"model families to run: {', '.join(FAMILIES)}")
    group.addoption("--hwbench-batch-sizes", dest="hwbench_batch_sizes", metavar="N,..",
                    type=_positive_ints("--hwbench-batch-sizes", "batch size", "1,8,32"), help="batch sizes (default: 1,8,32)")
    group.addoption("--hwbench-hardware", dest="hwbench_hardware", type=_names("--hwbench-hardware", "hardware"),
                    metavar="NAMES", help="hardware targets to run, e.g. cpu or cuda (default: every target the backends address)")
    group.addoption("--hwbench-precisions", dest="hwbench_precisions", metavar="P,..",
                    type=_names("--hwbench-precisions", "precisions", PRECISIONS),
                    help=f"precisions: {', '.join(PRECISIONS)} (default: fp32 plus what the hardware runs natively)")
    group.addoption("--hwbench-modes", dest="hwbench_modes", metavar="M,..",
                    type=_names("--hwbench-modes", "modes", registered_modes),
                    help=f"modes: {', '.join(MODES)} or a plug-in's (default: {DEFAULT_MODE}, or what the test's "
                         "hwbench marker names)")
    group.addoption("--hwbench-new-tokens", dest="hwbench_new_tokens", metavar="N,..",
                    type=_positive_ints("--hwbench-new-tokens", "number of new tokens", "32,128"),
                    help=f"generate mode: tokens generated per sequence (default {DEFAULT_NEW_TOKENS})")
    group.addoption("--hwbench-input-lengths", dest="hwbench_input_lengths", metavar="N,..",
                    type=_positive_ints("--hwbench-input-lengths", "input length", "128,512"),
                    help="text input (prompt) lengths in tokens (default: each model's own)")
    group.addoption("--hwbench-backends", dest="hwbench_backends", type=_names("--hwbench-backends", "backends"),
                    metavar="NAMES", help="backends to run (default: all installed: torch, onnxruntime, openvino, ...)")
    group.addoption("--hwbench-model-set", dest="hwbench_model_sets", action="append", default=[],
                    metavar="PATH", help="add models from a TOML/JSON model-set file or a directory with config.json")
    group.addoption("--hwbench-warmup", dest="hwbench_warmup", type=positive_option("--hwbench-warmup", int, MAX_ITERATIONS),
                    default=3, metavar="N", help=f"warm-up iterations per case, 0 to {MAX_ITERATIONS} (default 3)")
    group.addoption("--hwbench-min-iterations", dest="hwbench_min_iterations",
                    type=positive_option("--hwbench-min-iterations", int, MAX_ITERATIONS), default=10, metavar="N",
                    help=f"minimum timed iterations per case, 0 to {MAX_ITERATIONS} (default 10)")
    group.addoption("--hwbench-min-time", dest="hwbench_min_time", type=positive_option("--hwbench-min-time", float, MAX_CASE_SECONDS),
                    default=1.0, metavar="SECONDS", help=f"minimum timed duration per case, 0 to {MAX_CASE_SECONDS:g} (default 1.0)")
    group.addoption("--hwbench-energy-time", dest="hwbench_energy_time",
                    type=positive_option("--hwbench-energy-time", float, MAX_CASE_SECONDS), default=1.0, metavar="SECONDS",
                    help="seconds of an extra loop that reads the GPU energy counter (NVML) per case; 0 turns "
                         "energy off (default 1.0; CPU cases never measure energy)")
    group.addoption("--hwbench-noise-retries", dest="hwbench_noise_retries", default=DEFAULT_NOISE_RETRIES, metavar="N",
                    type=positive_option("--hwbench-noise-retries", int, MAX_NOISE_RETRIES),
                    help="measure a case again, up to N more times, when its record is noisy (other processes held its "
                         "cores or GPU, or the host changed speed while it was timed); the cleanest try is kept "
                         f"(0 to {MAX_NOISE_RETRIES}, default {DEFAULT_NOISE_RETRIES})")
    group.addoption("--hwbench-cache-size", dest="hwbench_cache_size",
                    type=positive_option("--hwbench-cache-size", int, MAX_CACHED_MODELS), default=1, metavar="N",
                    help="loaded models kept for reuse across batch sizes (default 1)")
    group.addoption("--hwbench-progress-interval", dest="hwbench_progress_interval", default=60.0, metavar="SECONDS",
                    type=positive_option("--hwbench-progress-interval", float, MAX_PROGRESS_SECONDS),
                    help="print 'case k of n, elapsed, about T left' at most once per SECONDS (default 60; 0: after every case)")


def register_markers(config: pytest.Config) -> None:
    """Hardware, mode, ``quick`` and ``hwbench`` markers (and ``xdist_group`` without xdist). The
    backend and scenario registries load only when someone else's are there, for their markers:
    ours bring none beyond the target table's (`facts.marker_docs`) and `MODE_DOCS`."""
    foreign = BACKENDS.has_foreign() or SCENARIOS.has_foreign()
    modes = {mode: scenario.description for mode, scenario in registered_scenarios().items()} if foreign else MODE_DOCS
    markers = {**marker_docs(), **modes, **OTHER_MARKERS}
    for backend in registered_backends().values() if foreign else ():  # markers a backend brings
        for hardware in backend.hardware:
            for name in backend.markers(hardware):
                markers.setdefault(name, backend.marker_docs.get(name, f"cases of the {backend.name} backend on {hardware}"))
    for name, doc in markers.items():
        config.addinivalue_line("markers", f"{name}: {doc}")
    if not config.pluginmanager.hasplugin("xdist"):
        # Cases carry xdist_group for `--dist loadgroup`; without xdist nobody registers it.
        config.addinivalue_line("markers", "xdist_group(name): keep cases of one loaded model on one xdist worker")


def apply_options(config: pytest.Config) -> None:
    """Check what the parsers cannot (the zoo and the registries are known only now) and the
    environment's settings (`pytest_hwbench.env_settings`); register the model sets."""
    from ..env_settings import check_env_settings

    try:
        check_env_settings()
    except ValueError as exc:
        raise pytest.UsageError(str(exc)) from None
    for path in config.getoption("hwbench_model_sets"):
        try:
            for spec in load_model_set(path):
                register_model(spec, replace_existing=True)
        except ValueError as exc:
            raise pytest.UsageError(f"--hwbench-model-set: {exc}") from None
    for name in config.getoption("hwbench_models") or ():
        try:
            get_model(name)
        except KeyError as exc:
            raise pytest.UsageError(f"--hwbench-models: {exc.args[0]}") from None
    for key, word, known in (("backends", "backend", registered_backends), ("hardware", "hardware", hardware_targets)):
        for name in config.getoption(f"hwbench_{key}") or ():
            if name not in known():
                raise pytest.UsageError(f"--hwbench-{key}: unknown {word} {name!r}; accepted: {', '.join(known())}")


__all__ = ["OTHER_MARKERS", "apply_options", "pytest_addhooks", "pytest_addoption", "register_markers"]
