"""The `Sink` protocol, the sink registry and `open_sink`.

Every sink module, ours and third parties', is listed under the entry-point group
``pytest_hwbench.sinks`` and calls `register_sink` when imported (with a reader where it can be
read back, `read_sink`); this module never names an implementation.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence
from pathlib import PurePath
from typing import Any, Protocol, runtime_checkable

from pytest_hwbench._plugins import SINKS_GROUP, Registry, implementing
from pytest_hwbench.record import BenchmarkRecord, SessionInfo

#: Session statuses every sink understands, and the words that mean them.
SESSION_STATUSES: tuple[str, ...] = ("finished", "failed", "killed")
_STATUS_ALIASES: dict[str, str] = {
    word: status
    for status, words in {"finished": ("passed", "ok", "success"), "failed": ("failure", "error"),
                          "killed": ("interrupted", "aborted")}.items()
    for word in (status, *words)
}


def normalize_status(status: str) -> str:
    """The canonical session status (``finished``, ``failed`` or ``killed``) for `status`, which
    may be a pytest-ish word too (``passed``, ``interrupted``); raises ValueError otherwise."""
    canonical = _STATUS_ALIASES.get(str(status).strip().lower())
    if canonical is None:
        raise ValueError(f"session status {status!r} is not one of {SESSION_STATUSES} "
                         f"(aliases: {sorted(k for k in _STATUS_ALIASES if k not in SESSION_STATUSES)})")
    return canonical


@runtime_checkable
class Sink(Protocol):
    """Somewhere records are stored, called from one thread of one process (the controller):
    `open_session` once, `write` any number of times, `close` once; `existing_ids` at any time,
    also without a session. A sink raises on failure (the `Recorder` spools and retries later).
    The members with a default are optional: a sink that subclasses `Sink` inherits them."""

    #: Short stable name, used as the key in reports and replay results (``mlflow``, ``duckdb``).
    name: str

    def open_session(self, session: SessionInfo) -> None:
        """Start (or resume, if the sink already holds it) the session the next records belong to."""
        ...

    def write(self, records: Sequence[BenchmarkRecord]) -> None:
        """Store `records` (all of the open session). Either all are stored or the call raises."""
        ...

    def existing_ids(self, record_ids: Iterable[str]) -> set[str]:
        """Which of `record_ids` the sink already holds completely (for idempotent replay)."""
        ...

    def close(self, status: str) -> None:
        """End the open session with `status` (see `normalize_status`); no-op without one."""
        ...

    def where(self) -> str:
        """The store, for messages, credentials masked ("": nothing to show)."""
        return ""

    def browse(self) -> str | None:
        """How a person looks at the session's records (an address and how to open it), once
        known; None where the sink has no such view."""
        return None


@runtime_checkable
class SessionSource(Protocol):
    """A sink that lists its sessions and reads its records back by session: what `hwbench
    import-mlflow` and `hwbench export` copy from, and how they learn what a target already holds."""

    #: The sink's name (`Sink.name`).
    name: str

    def read_sessions(self) -> list[tuple[SessionInfo, str]]:
        """(session, status) for every session held; status is one of `SESSION_STATUSES` or
        ``running``."""
        ...

    def read_records(self, *, with_timings: bool = True,
                     session_ids: Iterable[str] | None = None) -> list[BenchmarkRecord]:
        """The records held (of `session_ids` only, where given)."""
        ...


class SinkFactory(Protocol):
    """Builds a sink from a target (a URI or a path; None for the sink's default) and options."""

    def __call__(self, target: str | None, /, **options: Any) -> Sink: ...


#: Registered sinks: name -> factory. Filled by the sink modules when they are imported.
_SINKS: Registry[SinkFactory] = Registry(SINKS_GROUP, "sink")
SINKS = _SINKS.items
_SCHEMES: dict[str, str] = {}
_SUFFIXES: dict[str, str] = {}


#: A sink's reader: (target or None for its default, **options) -> the records it holds. Options
#: a reader does not use it ignores (``experiment`` means nothing to a DuckDB file).
SinkReader = Callable[..., "list[BenchmarkRecord]"]
READERS: dict[str, SinkReader] = {}


def register_sink(name: str, factory: SinkFactory, *, schemes: Iterable[str] = (),
                  suffixes: Iterable[str] = (), reader: SinkReader | None = None) -> None:
    """Make a sink available to `open_sink` as `name`, by URI `schemes` and by file `suffixes`
    (again: it replaces the earlier one); a sink that can be read back gives `read_sink` its `reader`."""
    if not re.fullmatch(r"[a-z][a-z0-9_+.-]*", name):
        raise ValueError(f"sink name {name!r} must be lowercase letters, digits, '_', '+', '.', '-'")
    _SINKS.register(name, factory)
    if reader is not None:
        READERS[name] = reader
    for scheme in schemes:
        _SCHEMES[scheme.lower()] = name
    for suffix in suffixes:
        _SUFFIXES[suffix.lower()] = name


def registered_sinks() -> dict[str, SinkFactory]:
    """Every sink by name, ours and the entry-point group's (imported once)."""
    return dict(_SINKS.loaded())


def accepted_forms() -> str:
    names = ", ".join(sorted(SINKS)) or "(none registered)"
    schemes = ", ".join(f"{s}://..." for s in sorted(_SCHEMES))
    suffixes = ", ".join(f"PATH{s}" for s in sorted(_SUFFIXES))
    return f"a sink name ({names}), NAME:TARGET, a URI ({schemes}) or a file ({suffixes})"


def resolve_sink(uri_or_name: str) -> tuple[str, str | None]:
    """(sink name, its target or None for its default) for `uri_or_name`, the first of: a
    registered name alone (``"duckdb"``: its default target); ``NAME:TARGET``
    (``"mlflow:sqlite:///m.db"``); a URI whose scheme a sink registered (``"http://host:5000"``);
    a path whose suffix a sink registered (``"bench.duckdb"``). Raises ValueError naming the
    value and the accepted forms."""
    _SINKS.loaded()
    text = str(uri_or_name).strip()
    if text in SINKS:
        return text, None
    prefix, sep, rest = text.partition(":")
    # A one-letter "scheme" is a Windows drive (C:\...), not a sink name or URI scheme.
    if sep and len(prefix) > 1:
        if prefix in SINKS:
            return prefix, rest or None
        # "postgresql+psycopg2://..." is the postgresql scheme with a driver.
        scheme = prefix.lower().split("+", 1)[0]
        if scheme in _SCHEMES:
            return _SCHEMES[scheme], text
    suffix = PurePath(text).suffix.lower()
    if suffix and suffix in _SUFFIXES:
        return _SUFFIXES[suffix], text
    raise ValueError(f"no sink for {uri_or_name!r}: expected {accepted_forms()}")


def open_sink(uri_or_name: str, **options: Any) -> Sink:
    """Build the sink that `uri_or_name` names (forms: `resolve_sink`). Nothing is connected
    until the sink is used. `options` go to the factory (e.g. ``experiment="hwbench"`` for MLflow).
    """
    name, target = resolve_sink(uri_or_name)
    return check_sink(SINKS[name](target, **options), f"sink {name!r}")


def check_sink(sink: Any, source: str) -> Sink:
    """`sink` when it implements the `Sink` protocol, else TypeError naming what it lacks and
    where it came from (`source`)."""
    return implementing(sink, Sink, "pytest_hwbench.sinks.Sink", source=source)


def read_sink(uri_or_name: str, **options: Any) -> list[BenchmarkRecord]:
    """The records the sink that `uri_or_name` names holds, through its registered reader."""
    name, target = resolve_sink(uri_or_name)
    reader = READERS.get(name)
    if reader is None:
        readable = ", ".join(sorted(READERS)) or "none"
        raise ValueError(f"sink {name!r} cannot be read back; readable sinks: {readable}")
    return reader(target, **options)


__all__ = ["SESSION_STATUSES", "SINKS", "SessionSource", "Sink", "SinkFactory", "check_sink",
           "normalize_status", "open_sink", "read_sink", "register_sink", "registered_sinks", "resolve_sink"]
