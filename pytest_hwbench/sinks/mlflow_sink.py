"""MLflow sink: one parent run per session, one child run per record, in the layout of
`mlflow_layout`, written and read back.

Everything goes through one `MlflowClient` with explicit run ids: the fluent API's global active
run breaks under concurrency and beside a user's own run (mlflow #159, #9235). ``mlflow`` is
imported lazily.
"""

from __future__ import annotations

import contextlib
import json
import operator
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
from pytest_hwbench.sinks import mlflow_layout as layout
from pytest_hwbench.sinks import mlflow_uri
from pytest_hwbench.sinks._fields import epoch_ms, to_text
from pytest_hwbench.sinks.base import Sink, normalize_status, register_sink
from pytest_hwbench.sinks.mlflow_migration import retry_migration, store_init_lock
from pytest_hwbench.sinks.redact import redact_uri
from pytest_hwbench.vocabulary import DEFAULT_EXPERIMENT

if TYPE_CHECKING:
    from mlflow.entities import Run
    from mlflow.tracking import MlflowClient

#: Searches in flight at once against an MLflow server (`MlflowSink.existing_ids`, import).
SEARCH_THREADS = 4


class MlflowStoreError(RuntimeError):
    """An MLflow call failed; raised in place of MLflow's error when that one quoted credentials."""


class MlflowSink(Sink):
    """Writes records to an MLflow tracking store, in the layout of `mlflow_layout`. Construction
    only resolves and validates the URI; the client is made on first use.

    Args:
        tracking_uri: store URI; None means ``$MLFLOW_TRACKING_URI`` or the local SQLite default.
        experiment: experiment name, created on first use.
        artifact_location: artifact root for a newly created experiment. For SQLite stores it
            defaults to ``<directory of the .db>/artifacts``; for servers the server decides.
        http_max_retries: retries per HTTP request (MLflow's 7 block about 4 minutes per call on a
            server that is down; the spool is our retry). ``$MLFLOW_HTTP_REQUEST_MAX_RETRIES`` wins.
        http_timeout_s: seconds per HTTP request (``$MLFLOW_HTTP_REQUEST_TIMEOUT`` wins if set).
    """

    name = "mlflow"

    def __init__(self, tracking_uri: str | None = None, experiment: str = DEFAULT_EXPERIMENT,
                 artifact_location: str | None = None, *, http_max_retries: int = 2,
                 http_timeout_s: int = 30) -> None:
        self.tracking_uri = mlflow_uri.validate_tracking_uri(mlflow_uri.resolve_tracking_uri(tracking_uri))
        #: the tracking URI with its credentials masked: the only form to print or log
        self.shown_uri = redact_uri(self.tracking_uri)
        if not experiment:
            raise ValueError("MLflow experiment name is empty")
        self.experiment = experiment
        self._is_sqlite = self.tracking_uri.lower().startswith("sqlite:")
        self._is_http = mlflow_uri.is_http(self.tracking_uri)
        if artifact_location is None and self._is_sqlite:
            # Without this MLflow puts artifacts in ./mlruns of whatever the cwd is.
            artifact_location = (mlflow_uri.sqlite_path(self.tracking_uri).resolve().parent
                                 / "artifacts").as_uri()
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
        sessions = quote(layout.runs_filter("session"), safe="")
        how = "" if self._is_http else f"`mlflow ui --backend-store-uri {self.shown_uri}`, then "
        return (f"runs table: {how}{base}/#/experiments/{self._experiment_id}?workflowType=machine_learning"
                f"&searchFilter={sessions}")

    def where(self) -> str:
        """The store, credentials masked; a local store not created yet says so, so that the wait
        for its tables reads as a first use, not as a failing server."""
        if not self._is_http and self.tracking_uri.lower().startswith("sqlite:///"):
            path = mlflow_uri.sqlite_path(self.tracking_uri)
            if not path.exists():
                return f"a new store at {path}, first use: creating its tables"
        return self.shown_uri

    # -- plumbing ---------------------------------------------------------------------------
    @contextlib.contextmanager
    def _mlflow_env(self) -> Iterator[None]:
        """Fail fast and quietly: some of MLflow's variables set for our calls only (MLflow reads
        them on every call and has no per-client setting; the user's own are left alone), and an
        error that quotes credentials raised again masked, as `MlflowStoreError`."""
        wanted = {"MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR": "false"}  # a tqdm bar amid pytest's output
        if self._is_http:
            wanted |= {
                "MLFLOW_HTTP_REQUEST_MAX_RETRIES": str(self.http_max_retries),
                # Retries (connection errors, 429, 5xx) wait 1, 2, 4... s plus up to 1 s at
                # random, so runners that a busy server turned away do not all return at once.
                "MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR": "1",
                "MLFLOW_HTTP_REQUEST_BACKOFF_JITTER": "1.0",
                "MLFLOW_HTTP_REQUEST_TIMEOUT": str(int(self.http_timeout_s)),
                # Else set_terminated fetches the run again (one more request per record)
                # just to print "View run ... at: URL" to stdout.
                "MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT": "true",
            }
        added = {key: value for key, value in wanted.items() if key not in os.environ}
        os.environ.update(added)
        try:
            yield
        except Exception as exc:
            # MLflow quotes the URI it was given ("API request to http://alice:SECRET@host/...
            # failed"): masked, and without the original as context, so no traceback shows it.
            safe = redact_uri(exc)
            if safe == str(exc):
                raise
            raise MlflowStoreError(f"{type(exc).__name__}: {safe}") from None
        finally:
            for key in added:
                os.environ.pop(key, None)

    def _client(self) -> MlflowClient:
        if self._client_obj is None:
            from mlflow.tracking import MlflowClient

            if self._is_sqlite:
                path = mlflow_uri.sqlite_path(self.tracking_uri)
                path.parent.mkdir(parents=True, exist_ok=True)
                # MlflowClient creates and migrates a new SQLite store, without a lock: two runs
                # starting together raced ("duplicate column name: step"). One at a time.
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
                    tags={layout.EXPERIMENT_KIND_TAG: layout.EXPERIMENT_KIND},
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
        if create and layout.EXPERIMENT_KIND_TAG not in (experiment.tags or {}):
            # Made by an older hwbench (or by hand): mark it, once, unless it says its own kind.
            client.set_experiment_tag(experiment.experiment_id, layout.EXPERIMENT_KIND_TAG,
                                      layout.EXPERIMENT_KIND)
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
        """The run id of the parent run that `_keep_one_copy` keeps for `session_id` (the smallest
        of its parent runs not deleted), or None when it has none."""
        runs = self._search(layout.runs_filter("session", session_id))
        return min((run.info.run_id for run in runs), default=None)

    def _keep_one_copy(self, session_id: str) -> None:
        """Delete the extra copies of `session_id`'s parent run and of its records' child runs,
        keeping the smallest run id of each: MLflow has no unique key on a tag, so writers of one
        session starting together each make their own runs. A copy still being written is its
        writer's to settle; a parent deleted gives its records artifacts to the one kept."""
        client = self._client()
        run_id = operator.attrgetter("info.run_id")
        parents = sorted(self._search(layout.runs_filter("session", session_id)), key=run_id)
        if not parents:
            return
        keeper = parents[0].info.run_id
        by_record: dict[str, list[Run]] = {}
        for run in self._search(layout.runs_filter("record", session_id)):
            if run.info.status in layout.TERMINAL:
                by_record.setdefault(run.data.tags.get(layout.RECORD_TAG, ""), []).append(run)
        for kept, *extras in (sorted(copies, key=run_id) for copies in by_record.values()):
            for extra in extras:
                client.delete_run(extra.info.run_id)
            if kept.data.tags.get(layout.PARENT_TAG) != keeper:
                client.set_tag(kept.info.run_id, layout.PARENT_TAG, keeper)
        for loser in (run.info.run_id for run in parents[1:] if run.info.status in layout.TERMINAL):
            if client.list_artifacts(loser, layout.RECORDS_ARTIFACT_DIR):
                with tempfile.TemporaryDirectory(prefix="hwbench-mlflow-") as tmp:
                    local = client.download_artifacts(loser, layout.RECORDS_ARTIFACT_DIR, tmp)
                    client.log_artifacts(keeper, local, layout.RECORDS_ARTIFACT_DIR)
            client.delete_run(loser)

    # -- Sink protocol ----------------------------------------------------------------------
    def open_session(self, session: SessionInfo) -> None:
        """Create the session's parent run, or reuse the one already tagged with its id."""
        sid = session.session_id
        if not layout.quoted(sid, "session_id"):
            raise ValueError("session_id is empty")
        with self._mlflow_env():
            client = self._client()
            experiment_id = self._experiment()
            assert experiment_id is not None
            run_id = self._session_parent(sid)
            if run_id is None:
                run_id = client.create_run(experiment_id, start_time=epoch_ms(session.started_at),
                                           tags=layout.session_tags(session),
                                           run_name=layout.session_run_name(session)).info.run_id
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
                    raise ValueError(f"record {record.record_id} belongs to session {record.session_id!r}, "
                                     f"but session {self._session_id!r} is open")
                for stale in self._stale.pop(record.record_id, ()):
                    with contextlib.suppress(Exception):  # cosmetic: the new run supersedes it
                        client.delete_run(stale)
                created = epoch_ms(record.created_at) or int(time.time() * 1000)
                run_id = client.create_run(experiment_id, start_time=created - layout.run_duration_ms(record),
                                           tags=layout.record_tags(record, self._parent_run_id),
                                           run_name=record.run_name).info.run_id
                try:
                    metrics = [Metric(key, float(value), created, 0)
                               for key, value in record.metrics().items() if value is not None]
                    params = [Param(key, to_text(key, value)) for key, value in record.params().items()]
                    client.log_batch(run_id, metrics=metrics, params=params)
                    client.set_terminated(run_id, layout.CASE_RUN_STATUS[record.status], end_time=created)
                except BaseException:
                    # Half-written run: delete it when this record is written again.
                    self._stale.setdefault(record.record_id, []).append(run_id)
                    raise
                self._written.append(record.to_dict())

    def existing_ids(self, record_ids: Iterable[str] | Mapping[str, BenchmarkRecord]) -> set[str]:
        """Record ids with a finished child run in the experiment: one bounded search per session
        when the records are given as a mapping record_id -> record (what `replay_each` passes) or
        a session is open, else one per record id (MLflow cannot search tags with IN). Child runs
        left RUNNING by an interrupted write do not count; they are deleted when written again."""
        sessions: dict[str, str | None]
        if isinstance(record_ids, Mapping):
            sessions = {rid: getattr(record, "session_id", None) for rid, record in record_ids.items()}
        else:
            sessions = dict.fromkeys(record_ids, self._session_id)
        if not sessions:
            return set()
        by_session = sorted({sid for sid in sessions.values() if sid})
        alone = sorted(rid for rid, sid in sessions.items() if not sid)
        filters = [layout.runs_filter("record", sid) for sid in by_session]
        filters += [f"tags.`{layout.RECORD_TAG}` = '{layout.quoted(rid, 'record_id')}'" for rid in alone]
        found: set[str] = set()
        stale: dict[str, list[str]] = {}
        with self._mlflow_env():
            if self._experiment(create=False) is None:
                return set()
            for runs in self._search_each(filters):
                for run in runs:
                    record_id = run.data.tags.get(layout.RECORD_TAG)
                    if record_id not in sessions:
                        continue
                    if run.info.status in layout.TERMINAL:
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
        then `_keep_one_copy`. A parent that another writer deleted meanwhile (it had copied its
        artifacts to the run it kept) gets no artifact: the kept parent gets it."""
        if self._parent_run_id is None:
            return
        run_status = layout.RUN_STATUS[normalize_status(status)]
        parent, written, session_id = self._parent_run_id, self._written, self._session_id
        assert session_id is not None  # open_session sets it with the parent
        self._parent_run_id, self._session_id, self._written = None, None, []
        with self._mlflow_env():
            client = self._client()
            stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime())
            part = f"{layout.RECORDS_ARTIFACT_DIR}/part-{stamp}-{uuid.uuid4().hex[:8]}.json"
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
            try:
                self._keep_one_copy(session_id)
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
            return [(layout.session_from_tags(run.data.tags),
                     layout.SESSION_STATUS.get(run.info.status, "running"))
                    for run in self._search(layout.runs_filter("session"))]

    def read_records(self, *, with_timings: bool = True,
                     session_ids: Iterable[str] | None = None) -> list[BenchmarkRecord]:
        """Rebuild the records of every finished child run (params cast back from text), or,
        with `session_ids`, of those sessions only (one bounded search per session).

        Raw timings are not in child runs; with `with_timings` they are read from the parent
        runs' ``hwbench_records/`` artifacts where those exist (best effort: an unreadable
        artifact store gives an `HwbenchWarning` and records without timings).
        """
        if session_ids is None:
            filters = [layout.runs_filter("record")]
        else:
            filters = [layout.runs_filter("record", sid) for sid in dict.fromkeys(session_ids)]
        rows: list[tuple[dict[str, Any], str]] = []
        with self._mlflow_env():
            for run in (run for runs in self._search_each(filters) for run in runs):
                if run.info.status in layout.TERMINAL and layout.RECORD_TAG in run.data.tags:
                    data = layout.record_data(run.data.params, run.data.metrics, run.data.tags, run.info.status)
                    rows.append((data, run.data.tags.get(layout.PARENT_TAG, "")))
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
                warnings.warn(f"hwbench: MLflow run of record {data.get('record_id')} in {self.shown_uri} "
                              f"cannot be read back: {redact_uri(exc)}", HwbenchWarning, stacklevel=2)
        return records

    def _artifact_records(self, parent_run_ids: Iterable[str]) -> dict[str, dict[str, Any]]:
        """record_id -> full record dict from the parents' ``hwbench_records/*.json`` artifacts."""
        client = self._client()
        out: dict[str, dict[str, Any]] = {}
        for parent in sorted(parent_run_ids):
            try:
                if not client.list_artifacts(parent, layout.RECORDS_ARTIFACT_DIR):
                    continue
                with tempfile.TemporaryDirectory(prefix="hwbench-mlflow-") as tmp:
                    local = Path(client.download_artifacts(parent, layout.RECORDS_ARTIFACT_DIR, tmp))
                    for part in sorted(local.glob("*.json")):
                        for item in json.loads(part.read_text(encoding="utf-8")):
                            if isinstance(item, dict) and "record_id" in item:
                                out[str(item["record_id"])] = item
            except Exception as exc:  # best effort: records stay usable without raw timings
                warnings.warn(f"hwbench: cannot read the records artifact of MLflow run {parent} "
                              f"({self.shown_uri}): {redact_uri(repr(exc))}; importing without raw timings",
                              HwbenchWarning, stacklevel=3)
        return out


def _reader(target: str | None, /, *, experiment: str | None = None, with_timings: bool = False,
            choose: Callable[[Sequence[str]], Sequence[str] | None] | None = None,
            **options: Any) -> list[BenchmarkRecord]:
    """The records of the store; with `choose`, of the sessions it picks among the session runs'
    ids (newest first; None: every session), searched session by session."""
    if target is not None:
        mlflow_uri.require_existing(target)
    sink = MlflowSink(target, experiment or DEFAULT_EXPERIMENT, **options)
    chosen = None
    if choose is not None:
        infos = sorted((info for info, _ in sink.read_sessions()), key=lambda i: (i.started_at, i.session_id),
                       reverse=True)
        chosen = choose(list(dict.fromkeys(info.session_id for info in infos)))
    return sink.read_records(with_timings=with_timings, session_ids=chosen)


register_sink("mlflow", MlflowSink, reader=_reader,
              schemes=("sqlite", "http", "https", "postgresql", "mysql", "mssql", "databricks"))

__all__ = ["SEARCH_THREADS", "MlflowSink", "MlflowStoreError"]
