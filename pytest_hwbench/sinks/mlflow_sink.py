"""MLflow sink: one parent run per session, one child run per record, in the layout of
`mlflow_layout`, written and read back.

Everything goes through one `MlflowClient` with explicit run ids: the fluent API's global active
run breaks under concurrency and beside a user's own run (mlflow #159, #9235). ``mlflow`` is
imported lazily.
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
import time
import uuid
import warnings
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pytest_hwbench.errors import HwbenchWarning
from pytest_hwbench.record import BenchmarkRecord, SessionInfo
from pytest_hwbench.sinks._fields import epoch_ms, to_text
from pytest_hwbench.sinks.base import Sink, normalize_status, register_sink
from pytest_hwbench.sinks.mlflow_calls import call_env
from pytest_hwbench.sinks.mlflow_layout import (
    CASE_RUN_STATUS,
    EXPERIMENT_KIND,
    EXPERIMENT_KIND_TAG,
    KIND_TAG,
    PARENT_TAG,
    RECORD_TAG,
    RECORDS_ARTIFACT_DIR,
    RUN_STATUS,
    SESSION_STATUS,
    SESSION_TAG,
    TERMINAL,
    quoted,
    record_data,
    record_tags,
    records_filter,
    run_duration_ms,
    session_from_tags,
    session_run_name,
    session_tags,
)
from pytest_hwbench.sinks.mlflow_migration import retry_migration, store_init_lock
from pytest_hwbench.sinks.mlflow_uri import (
    is_http,
    require_existing,
    resolve_tracking_uri,
    sqlite_path,
    validate_tracking_uri,
)
from pytest_hwbench.sinks.redact import redact_uri
from pytest_hwbench.vocabulary import DEFAULT_EXPERIMENT

if TYPE_CHECKING:
    from mlflow.entities import Run
    from mlflow.tracking import MlflowClient

#: Searches in flight at once against an MLflow server (`MlflowSink.existing_ids`, import).
SEARCH_THREADS = 4


class MlflowSink(Sink):
    """Writes records to an MLflow tracking store, in the layout of `mlflow_layout`.

    Construction only resolves and validates the URI; the client is made on first use.

    Args:
        tracking_uri: store URI; None means ``$MLFLOW_TRACKING_URI`` or the local SQLite default.
        experiment: experiment name, created on first use.
        artifact_location: artifact root for a newly created experiment. For SQLite stores it
            defaults to ``<directory of the .db>/artifacts``; for servers the server decides.
        store_dir: directory of the local default store (``mlruns/`` in the current directory).
        http_max_retries: retries per HTTP request (MLflow's own default of 7 with exponential
            backoff blocks about 4 minutes per call when a server is down; the spool and `replay`
            are our retry, so we fail fast). ``$MLFLOW_HTTP_REQUEST_MAX_RETRIES`` wins if set.
        http_timeout_s: seconds per HTTP request (``$MLFLOW_HTTP_REQUEST_TIMEOUT`` wins if set).
    """

    name = "mlflow"

    def __init__(
        self,
        tracking_uri: str | None = None,
        experiment: str = DEFAULT_EXPERIMENT,
        artifact_location: str | None = None,
        *,
        store_dir: str | os.PathLike[str] | None = None,
        http_max_retries: int = 2,
        http_timeout_s: int = 30,
    ) -> None:
        self.tracking_uri = validate_tracking_uri(resolve_tracking_uri(tracking_uri, store_dir))
        if not experiment:
            raise ValueError("MLflow experiment name is empty")
        self.experiment = experiment
        self._is_sqlite = self.tracking_uri.lower().startswith("sqlite:")
        self._is_http = is_http(self.tracking_uri)
        if artifact_location is None and self._is_sqlite:
            # Without this MLflow puts artifacts in ./mlruns of whatever the cwd is.
            artifact_location = (sqlite_path(self.tracking_uri).resolve().parent / "artifacts").as_uri()
        self.artifact_location = artifact_location
        if http_max_retries < 0 or http_timeout_s < 1:
            raise ValueError(
                f"http_max_retries must be >= 0 and http_timeout_s >= 1, got {http_max_retries}, {http_timeout_s}"
            )
        self.http_max_retries = http_max_retries
        self.http_timeout_s = http_timeout_s
        self._client_obj: MlflowClient | None = None
        self._experiment_id: str | None = None
        self._parent_run_id: str | None = None
        self._session_id: str | None = None
        self._written: list[dict[str, Any]] = []
        # record_id -> run ids of child runs left RUNNING by an interrupted write; replaced on write.
        self._stale: dict[str, list[str]] = {}

    def __repr__(self) -> str:
        return f"MlflowSink({self.shown_uri!r}, experiment={self.experiment!r})"

    @property
    def shown_uri(self) -> str:
        """The tracking URI with its credentials masked: the only form to print or log."""
        return redact_uri(self.tracking_uri)

    def browse(self) -> str | None:
        """Where a person sees this sink's runs: the experiment's runs table (session runs only) in
        MLflow's UI, once the experiment is known (None before); for a local store, how to start
        ``mlflow ui`` first."""
        from urllib.parse import quote

        if self._experiment_id is None:
            return None
        base = self.shown_uri.rstrip("/") if self._is_http else "http://127.0.0.1:5000"
        # MLflow 3.17's UI opens an experiment on its GenAI overview unless the address asks for the
        # model-training view; a session's records are its child runs: one row per night, not 469.
        sessions = quote(f"tags.`{KIND_TAG}` = 'session'", safe="")
        how = "" if self._is_http else f"`mlflow ui --backend-store-uri {self.shown_uri}`, then "
        return (f"runs table: {how}{base}/#/experiments/{self._experiment_id}?workflowType=machine_learning"
                f"&searchFilter={sessions}")

    def where(self) -> str:
        """The store, credentials masked; a local store not created yet says so, so that the wait
        for its tables reads as a first use, not as a failing server."""
        if not self._is_http and self.tracking_uri.lower().startswith("sqlite:///"):
            path = sqlite_path(self.tracking_uri)
            if not path.exists():
                return f"a new store at {path}, first use: creating its tables"
        return self.shown_uri

    # -- plumbing ---------------------------------------------------------------------------
    def _mlflow_env(self) -> contextlib.AbstractContextManager[None]:
        """Our calls' MLflow variables, and errors with credentials masked (`mlflow_calls.call_env`)."""
        return call_env(http=self._is_http, max_retries=self.http_max_retries, timeout_s=self.http_timeout_s)

    def _client(self) -> MlflowClient:
        if self._client_obj is None:
            from mlflow.tracking import MlflowClient

            if self._is_sqlite:
                path = sqlite_path(self.tracking_uri)
                path.parent.mkdir(parents=True, exist_ok=True)
                # MlflowClient creates and migrates a new SQLite store when it is constructed,
                # without a lock: two runs starting together on a new store raced ("Online
                # migration expected to match one row", "duplicate column name: step"). One process at a time creates it; the next finds it migrated.
                with store_init_lock(path.parent):
                    self._client_obj = retry_migration(lambda: MlflowClient(tracking_uri=self.tracking_uri))
            else:
                self._client_obj = MlflowClient(tracking_uri=self.tracking_uri)
        return self._client_obj

    def _experiment(self, create: bool = True) -> str | None:
        """The experiment id (cached); None if it does not exist and `create` is False."""
        if self._experiment_id is not None:
            return self._experiment_id
        from mlflow.exceptions import MlflowException

        client = self._client()
        experiment = client.get_experiment_by_name(self.experiment)
        if experiment is None:
            if not create:
                return None
            try:
                self._experiment_id = client.create_experiment(
                    self.experiment, artifact_location=self.artifact_location,
                    tags={EXPERIMENT_KIND_TAG: EXPERIMENT_KIND},
                )
            except MlflowException:
                experiment = client.get_experiment_by_name(self.experiment)  # created meanwhile?
                if experiment is None:
                    raise
                self._experiment_id = experiment.experiment_id
            return self._experiment_id
        if experiment.lifecycle_stage == "deleted":
            raise RuntimeError(
                f"MLflow experiment {self.experiment!r} at {self.shown_uri} is deleted; restore it "
                f"(mlflow experiments restore --experiment-id {experiment.experiment_id}) "
                "or choose another experiment name"
            )
        if create and EXPERIMENT_KIND_TAG not in (experiment.tags or {}):
            # Made by an older hwbench (or by hand): mark it, once, unless it says its own kind.
            client.set_experiment_tag(experiment.experiment_id, EXPERIMENT_KIND_TAG, EXPERIMENT_KIND)
        self._experiment_id = experiment.experiment_id
        return self._experiment_id

    def has_experiment(self) -> bool:
        """Whether the store holds this sink's experiment (creates nothing)."""
        with self._mlflow_env():
            return self._experiment(create=False) is not None

    def _search(self, filter_string: str) -> list[Run]:
        """Every run of the experiment that `filter_string` finds, page by page."""
        from mlflow.utils import get_results_from_paginated_fn

        experiment_id = self._experiment(create=False)
        if experiment_id is None:
            return []
        client = self._client()
        return get_results_from_paginated_fn(  # type: ignore[no-any-return]
            lambda size, token: client.search_runs([experiment_id], filter_string, max_results=size,
                                                   page_token=token), 1000)

    def _session_parent(self, session_id: str) -> str | None:
        """The run id of the parent run that `keep_one_copy` keeps for `session_id` (the smallest
        of its parent runs not deleted), or None when it has none."""
        runs = self._search(f"tags.`{KIND_TAG}` = 'session' AND tags.`{SESSION_TAG}` = '{session_id}'")
        return min((run.info.run_id for run in runs), default=None)

    # -- Sink protocol ----------------------------------------------------------------------
    def open_session(self, session: SessionInfo) -> None:
        """Create the session's parent run, or reuse the one already tagged with its id."""
        sid = session.session_id
        if not sid or "'" in sid or "`" in sid:
            raise ValueError(f"session_id {sid!r} is empty or contains a quote")
        with self._mlflow_env():
            client = self._client()
            experiment_id = self._experiment()
            assert experiment_id is not None
            run_id = self._session_parent(sid)
            if run_id is None:
                run_id = client.create_run(
                    experiment_id,
                    start_time=epoch_ms(session.started_at),
                    tags=session_tags(session),
                    run_name=session_run_name(session),
                ).info.run_id
        self._parent_run_id = run_id
        self._session_id = sid
        self._written = []

    def write(self, records: Sequence[BenchmarkRecord]) -> None:
        """One child run per record: create_run (with tags), one log_batch, set_terminated."""
        if self._parent_run_id is None:
            raise RuntimeError("MlflowSink.write called before open_session; open a session first")
        from mlflow.entities import Metric, Param

        with self._mlflow_env():
            client = self._client()
            experiment_id = self._experiment()
            assert experiment_id is not None
            for record in records:
                if record.session_id != self._session_id:
                    raise ValueError(
                        f"record {record.record_id} belongs to session {record.session_id!r}, "
                        f"but session {self._session_id!r} is open"
                    )
                for stale in self._stale.pop(record.record_id, ()):
                    with contextlib.suppress(Exception):  # cosmetic: the new run supersedes it
                        client.delete_run(stale)
                created = epoch_ms(record.created_at) or int(time.time() * 1000)
                run = client.create_run(
                    experiment_id,
                    start_time=created - run_duration_ms(record),
                    tags=record_tags(record, self._parent_run_id),
                    run_name=record.run_name,
                )
                run_id = run.info.run_id
                try:
                    client.log_batch(
                        run_id,
                        metrics=[
                            Metric(key, float(value), created, 0)
                            for key, value in record.metrics().items()
                            if value is not None
                        ],
                        params=[Param(key, to_text(key, value)) for key, value in record.params().items()],
                    )
                    client.set_terminated(run_id, CASE_RUN_STATUS[record.status], end_time=created)
                except BaseException:
                    # Half-written run: delete it when this record is written again.
                    self._stale.setdefault(record.record_id, []).append(run_id)
                    raise
                self._written.append(record.to_dict())

    def existing_ids(self, record_ids: Iterable[str] | Mapping[str, BenchmarkRecord]) -> set[str]:
        """Record ids with a finished child run in the experiment.

        The cost follows the records asked about, not the experiment's size: one bounded search
        per session (its child runs, by the ``hwbench.session_id`` tag) when the records are
        given as a mapping record_id -> record (what `replay_each` passes) or a session is open;
        else one search per record id (MLflow cannot search tags with IN). Child runs left
        RUNNING by an interrupted write do not count; they are remembered and deleted when the
        record is written again.
        """
        if isinstance(record_ids, Mapping):
            sessions: dict[str, str | None] = {
                rid: getattr(record, "session_id", None) for rid, record in record_ids.items()
            }
        else:
            sessions = dict.fromkeys(record_ids, self._session_id)
        if not sessions:
            return set()
        by_session = sorted({sid for sid in sessions.values() if sid})
        alone = sorted(rid for rid, sid in sessions.items() if not sid)
        filters = [records_filter(sid) for sid in by_session]
        filters += [f"tags.`{RECORD_TAG}` = '{quoted(rid, 'record_id')}'" for rid in alone]
        found: set[str] = set()
        stale: dict[str, list[str]] = {}
        with self._mlflow_env():
            if self._experiment(create=False) is None:
                return set()
            for runs in self._search_each(filters):
                for run in runs:
                    record_id = run.data.tags.get(RECORD_TAG)
                    if record_id not in sessions:
                        continue
                    if run.info.status in TERMINAL:
                        found.add(record_id)
                    else:
                        stale.setdefault(record_id, []).append(run.info.run_id)
        self._stale = {rid: runs for rid, runs in stale.items() if rid not in found}
        return found

    def _search_each(self, filters: Sequence[str]) -> Iterator[list[Run]]:
        """The runs each filter finds (a list per filter, in order). Against a server, up to
        `SEARCH_THREADS` searches are in flight at once: each is one bounded query, and a server
        a few milliseconds away spends most of a search waiting on the network."""
        if not self._is_http or len(filters) < 2:
            yield from map(self._search, filters)
            return
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(max_workers=SEARCH_THREADS, thread_name_prefix="hwbench-mlflow-search") as pool:
            yield from pool.map(self._search, filters)

    def close(self, status: str) -> None:
        """Log the records written since `open_session` as a JSON artifact; terminate the parent;
        then keep one copy of each run that writers of the same session at the same time made
        (`mlflow_copies.keep_one_copy`). A parent that another writer deleted meanwhile (it had
        copied its artifacts to the run it kept) gets no artifact: the kept parent gets it."""
        if self._parent_run_id is None:
            return
        run_status = RUN_STATUS[normalize_status(status)]
        parent, written, session_id = self._parent_run_id, self._written, self._session_id
        assert session_id is not None  # open_session sets it with the parent
        self._parent_run_id, self._session_id, self._written = None, None, []
        with self._mlflow_env():
            client = self._client()
            part = f"{RECORDS_ARTIFACT_DIR}/part-{time.strftime('%Y%m%dT%H%M%S', time.gmtime())}-{uuid.uuid4().hex[:8]}.json"
            text = json.dumps(written, sort_keys=True, default=str)
            target: str | None = parent
            try:
                for _ in range(3):  # another writer of the session may delete a parent it settled
                    try:
                        if written:
                            client.log_text(target, text, part)
                        break
                    except Exception:
                        if client.get_run(target).info.lifecycle_stage != "deleted":
                            raise
                        target = self._session_parent(session_id)
                        if target is None:
                            raise
            finally:
                try:
                    client.set_terminated(parent, run_status)
                except Exception:
                    if client.get_run(parent).info.lifecycle_stage != "deleted":
                        raise
            from .mlflow_copies import keep_one_copy

            try:
                keep_one_copy(client, self._search, session_id)
                if written and target is not None and client.get_run(target).info.lifecycle_stage == "deleted":
                    # deleted after our part landed, perhaps after its artifacts were copied:
                    # the kept parent gets the part too (readers key the records by id)
                    keeper = self._session_parent(session_id)
                    if keeper is not None:
                        client.log_text(keeper, text, part)
            except Exception as exc:  # the records are written; only extra copies may remain
                warnings.warn(f"hwbench: session {session_id}: extra copies of its runs in {self.shown_uri} "
                              f"were not removed ({redact_uri(repr(exc))}); `hwbench replay` of its spool "
                              "removes them", HwbenchWarning, stacklevel=2)

    # -- reading back -----------------------------------------------------------------------
    def read_sessions(self) -> list[tuple[SessionInfo, str]]:
        """(session, status) for every parent run; status is finished/failed/killed/running."""
        with self._mlflow_env():
            return [(session_from_tags(run.data.tags), SESSION_STATUS.get(run.info.status, "running"))
                    for run in self._search(f"tags.`{KIND_TAG}` = 'session'")]

    def read_records(self, *, with_timings: bool = True,
                     session_ids: Iterable[str] | None = None) -> list[BenchmarkRecord]:
        """Rebuild the records of every finished child run (params cast back from text), or,
        with `session_ids`, of those sessions only (one bounded search per session).

        Raw timings are not in child runs; with `with_timings` they are read from the parent
        runs' ``hwbench_records/`` artifacts where those exist (best effort: an unreadable
        artifact store gives an `HwbenchWarning` and records without timings).
        """
        if session_ids is None:
            filters = [f"tags.`{KIND_TAG}` = 'record'"]
        else:
            filters = [records_filter(sid) for sid in dict.fromkeys(session_ids)]
        rows: list[tuple[dict[str, Any], str]] = []
        with self._mlflow_env():
            for runs in self._search_each(filters):
                for run in runs:
                    if run.info.status not in TERMINAL or RECORD_TAG not in run.data.tags:
                        continue
                    rows.append((record_data(run.data.params, run.data.metrics, run.data.tags, run.info.status), run.data.tags.get(PARENT_TAG, "")))
            full: dict[str, dict[str, Any]] = {}
            if with_timings and rows:
                full = self._artifact_records({parent for _, parent in rows if parent})
        records: list[BenchmarkRecord] = []
        for data, _ in rows:
            original = full.get(data["record_id"], {})
            if original:
                data["timings_ms"] = original.get("timings_ms") or ()
            if data.get("extra") is None:  # the tag was cut at TAG_VALUE_LIMIT (or is missing)
                data["extra"] = original.get("extra") or {}
            try:
                records.append(BenchmarkRecord.from_dict(data))
            except (TypeError, ValueError) as exc:
                warnings.warn(
                    f"hwbench: MLflow run of record {data.get('record_id')} in {self.shown_uri} "
                    f"cannot be read back: {redact_uri(exc)}",
                    HwbenchWarning,
                    stacklevel=2,
                )
        return records

    def _artifact_records(self, parent_run_ids: Iterable[str]) -> dict[str, dict[str, Any]]:
        """record_id -> full record dict from the parents' ``hwbench_records/*.json`` artifacts."""
        client = self._client()
        out: dict[str, dict[str, Any]] = {}
        for parent in sorted(parent_run_ids):
            try:
                if not client.list_artifacts(parent, RECORDS_ARTIFACT_DIR):
                    continue
                with tempfile.TemporaryDirectory(prefix="hwbench-mlflow-") as tmp:
                    local = Path(client.download_artifacts(parent, RECORDS_ARTIFACT_DIR, tmp))
                    for part in sorted(local.glob("*.json")):
                        for item in json.loads(part.read_text(encoding="utf-8")):
                            if isinstance(item, dict) and "record_id" in item:
                                out[str(item["record_id"])] = item
            except Exception as exc:  # best effort: records stay usable without raw timings
                warnings.warn(
                    f"hwbench: cannot read the records artifact of MLflow run {parent} "
                    f"({self.shown_uri}): {redact_uri(repr(exc))}; importing without raw timings",
                    HwbenchWarning,
                    stacklevel=3,
                )
        return out


def _reader(target: str | None, /, *, experiment: str | None = None, with_timings: bool = False,
            choose: Callable[[Sequence[str]], Sequence[str] | None] | None = None,
            **options: Any) -> list[BenchmarkRecord]:
    """The records of the store; with `choose`, of the sessions it picks among the session runs'
    ids (newest first; None: every session), searched session by session."""
    if target is not None:
        require_existing(target)
    sink = MlflowSink(target, experiment or DEFAULT_EXPERIMENT, **options)
    chosen = None
    if choose is not None:
        sessions = sorted(sink.read_sessions(), key=lambda item: (item[0].started_at, item[0].session_id), reverse=True)
        chosen = choose(list(dict.fromkeys(info.session_id for info, _ in sessions)))
    return sink.read_records(with_timings=with_timings, session_ids=chosen)


register_sink(
    "mlflow",
    MlflowSink,
    schemes=("sqlite", "http", "https", "postgresql", "mysql", "mssql", "databricks"),
    reader=_reader,
)

__all__ = ["SEARCH_THREADS", "MlflowSink"]
