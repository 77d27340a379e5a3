"""MLflow sink: one parent run per session, one child run per record.

Everything goes through one `MlflowClient` with explicit run ids; the fluent API's global active
run is never touched (mlflow #159, #9235: hidden global state breaks under concurrency and when a
user's own code has a run open).

Layout in the experiment (default ``hwbench``):

- the experiment carries ``mlflow.experimentKind=custom_model_development``, so MLflow's UI
  opens it as a model-development experiment (the runs table), not a GenAI one (traces);
- parent run named for what it holds (`session_run_name`: suite and marker expression, host,
  commit, start time): tags ``hwbench.kind=session``, ``hwbench.session_id``,
  git commit/branch (also as ``mlflow.source.git.*``), host, runner label, hardware summary,
  package versions; on `close`, an artifact ``hwbench_records/part-*.json`` holding the full
  records written (with their raw timings, which child runs do not carry);
- child run ``record.run_name``: tag ``mlflow.parentRunId``, ``hwbench.kind=record``,
  ``hwbench.record_id``, ``hwbench.session_id`` and every other context field as
  ``hwbench.<field>``; params = `record.params()` (every name always present, None spelled
  ``none``, each field always the same type); metrics = `record.metrics()` minus the Nones;
  status FINISHED for passed records, FAILED (with ``hwbench.error``) for failed ones, KILLED
  for crashed ones.

Per record the critical path is create_run + one log_batch + set_terminated on a cached client
and experiment id; searches happen only in `open_session` (once) and `existing_ids` (replay).

``mlflow`` is imported inside the functions that need it: `validate_tracking_uri` and `ping` are
cheap and usable without it.

Length: over 500 lines because the sink writes and reads back one layout (tags, params and
metrics per record); writer and reader in one module keep that layout in one place.
"""

from __future__ import annotations

import contextlib
import datetime
import json
import os
import tempfile
import time
import uuid
import warnings
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from pytest_hwbench.errors import HwbenchWarning
from pytest_hwbench.record import METRIC_FIELDS, PARAM_FIELDS, BenchmarkRecord, SessionInfo
from pytest_hwbench.sinks._fields import FIELDS, epoch_ms, from_text, to_text, truncate
from pytest_hwbench.sinks.base import Sink, normalize_status, register_sink
from pytest_hwbench.sinks.redact import redact_uri, split_credentials
from pytest_hwbench.vocabulary import DEFAULT_EXPERIMENT, DEFAULT_STORE_DIR

if TYPE_CHECKING:
    from mlflow.entities import Run
    from mlflow.tracking import MlflowClient

KIND_TAG = "hwbench.kind"
SESSION_TAG = "hwbench.session_id"
RECORD_TAG = "hwbench.record_id"
PARENT_TAG = "mlflow.parentRunId"
RECORDS_ARTIFACT_DIR = "hwbench_records"
#: The experiment tag MLflow 3's UI reads for an experiment's kind (its `ExperimentKind` values:
#: ``genai_development``, ``custom_model_development``, ...); without it the UI opens the
#: ``hwbench`` experiment on its GenAI overview ("Traces 0", "No data").
EXPERIMENT_KIND_TAG = "mlflow.experimentKind"
EXPERIMENT_KIND = "custom_model_development"
#: Searches in flight at once against an MLflow server (`MlflowSink.existing_ids`, import).
SEARCH_THREADS = 4
#: Seconds a local SQLite store's first open waits for another process creating the same store.
STORE_INIT_WAIT_S = 120.0

#: MLflow allows 8000 characters per tag value; stay clear of it (the spool keeps the full text).
TAG_VALUE_LIMIT = 5000

ACCEPTED_FORMS = (
    "sqlite:///PATH/mlflow.db (relative) or sqlite:////ABS/PATH/mlflow.db, "
    "http(s)://HOST:PORT (an `mlflow server`), postgresql://USER:PASS@HOST:PORT/DB, "
    "mysql://..., mssql://..., databricks"
)
_SQL_SCHEMES = frozenset({"postgresql", "mysql", "mssql"})
_HTTP_SCHEMES = frozenset({"http", "https"})
# Context fields (neither params, metrics nor raw timings) travel as tags ``hwbench.<field>``.
_CONTEXT_FIELDS: tuple[str, ...] = tuple(
    name for name in FIELDS if name not in PARAM_FIELDS and name not in METRIC_FIELDS and name != "timings_ms"
)
_RUN_STATUS = {"finished": "FINISHED", "failed": "FAILED", "killed": "KILLED"}
#: record status -> child run status, and back (a crashed case's process was killed)
_CASE_RUN_STATUS = {"passed": "FINISHED", "failed": "FAILED", "crashed": "KILLED"}
_CASE_STATUS = {run: case for case, run in _CASE_RUN_STATUS.items()}
_SESSION_STATUS = {v: k for k, v in _RUN_STATUS.items()}
_TERMINAL = frozenset({"FINISHED", "FAILED", "KILLED"})


class MlflowStoreError(RuntimeError):
    """An MLflow call failed; raised in place of MLflow's error when that one quoted credentials."""


def resolve_tracking_uri(
    tracking_uri: str | None = None, store_dir: str | os.PathLike[str] | None = None
) -> str:
    """The tracking URI to use: `tracking_uri`, else ``$MLFLOW_TRACKING_URI``, else the local default.

    The local default is ``sqlite:///<store_dir>/mlflow.db`` with `store_dir` defaulting to
    ``mlruns/`` in the current directory (made absolute here, so a later chdir does not move it).
    """
    if tracking_uri:
        return tracking_uri
    env = os.environ.get("MLFLOW_TRACKING_URI", "").strip()
    if env:
        return env
    store = Path(store_dir if store_dir is not None else DEFAULT_STORE_DIR).resolve()
    return f"sqlite:///{store / 'mlflow.db'}"


def sqlite_path(uri: str) -> Path:
    """The database file of a ``sqlite:///`` URI (``sqlite:////abs`` is absolute)."""
    return Path(uri[len("sqlite:///") :].split("?", 1)[0])


#: The first bytes of every SQLite 3 database file.
_SQLITE_HEADER = b"SQLite format 3\x00"


def _file_head(path: Path) -> bytes:
    try:
        with path.open("rb") as f:
            return f.read(len(_SQLITE_HEADER))
    except OSError:
        return _SQLITE_HEADER  # unreadable here: MLflow says why when it opens it


def validate_tracking_uri(uri: str) -> str:
    """Check that MLflow 3 can use `uri` as a tracking store; return it stripped.

    Side-effect free: nothing is created or contacted (an existing SQLite file's first bytes are
    read). Raises ValueError naming the URI and the accepted forms. Plain paths and ``file:`` URIs are refused: MLflow 3 raises on the file store
    unless ``MLFLOW_ALLOW_FILE_STORE=true`` (see FACTS.md), so we say so up front.
    """
    text = str(uri).strip()
    shown = redact_uri(text)  # for the messages: a password in the URI must not reach a terminal
    hint = f"accepted forms: {ACCEPTED_FORMS}"
    if not text:
        raise ValueError(f"MLflow tracking URI is empty; {hint}")
    if text.lower() == "databricks":  # MLflow's name for the workspace in the environment
        return text
    parsed = urlsplit(text)
    scheme = parsed.scheme.lower()
    base = scheme.split("+", 1)[0]
    if base == "sqlite":
        if not text.lower().startswith("sqlite:///") or not sqlite_path(text).name or ":memory:" in text:
            raise ValueError(
                f"MLflow tracking URI {shown!r} names no database file; use sqlite:///PATH/mlflow.db; {hint}"
            )
        path = sqlite_path(text)
        if path.is_dir():
            raise ValueError(f"MLflow tracking URI {shown!r} names a directory; use sqlite:///{path / 'mlflow.db'}")
        if path.is_file() and path.stat().st_size and _file_head(path) != _SQLITE_HEADER:
            raise ValueError(f"MLflow tracking URI {shown!r}: {path} is not an SQLite database; name another "
                             "file (it is made on first use)")
        return text
    if base in _HTTP_SCHEMES:
        if not parsed.hostname:
            raise ValueError(f"MLflow tracking URI {shown!r} has no host; use http://HOST:PORT; {hint}")
        try:
            parsed.port  # noqa: B018  (raises ValueError on a non-numeric port)
        except ValueError as exc:
            raise ValueError(f"MLflow tracking URI {shown!r} has a bad port ({redact_uri(exc)}); {hint}") from None
        return text
    if base in _SQL_SCHEMES:
        if not parsed.netloc:
            raise ValueError(f"MLflow tracking URI {shown!r} has no host; {hint}")
        return text
    if base == "databricks":
        return text
    if base in ("", "file") or len(scheme) == 1:  # "" or a Windows drive letter: a plain path
        path = parsed.path if base == "file" else text
        suggestion = f"sqlite:///{Path(path) / 'mlflow.db'}"
        raise ValueError(
            f"MLflow tracking URI {shown!r} is a file store, which MLflow 3 refuses; "
            f"use a SQLite store instead, e.g. {suggestion!r}; {hint}"
        )
    raise ValueError(f"MLflow tracking URI {shown!r} has an unsupported scheme {scheme!r}; {hint}")


#: What `ping` says of a server that refuses the credentials it was given (HTTP 401 or 403): a
#: usage error (another URI or other credentials fix it), not a server to wait for.
REFUSED_CREDENTIALS = "refuses these credentials"


def ping(uri: str, timeout: float = 2.0) -> str | None:
    """Why `uri` is not usable right now, or None if it looks fine.

    For ``http(s)://`` asks the server's ``/health`` endpoint, then its tracking API (a search
    for one experiment, so that a server whose ``/health`` answers while its store hangs, or
    that refuses the credentials, is caught here), each within `timeout` seconds. A refusal of
    the credentials says `REFUSED_CREDENTIALS`. Other stores have nothing to reach over the
    network: None. Never raises; the caller decides whether an unreachable server is fatal (the
    recorder spools either way).
    """
    try:
        text = validate_tracking_uri(uri)
    except ValueError as exc:
        return str(exc)
    if urlsplit(text).scheme.lower() not in _HTTP_SCHEMES:
        return None
    plain, headers = split_credentials(text)  # user-info goes as basic auth, as MLflow's client sends it
    base, shown_base = plain.rstrip("/"), redact_uri(text.rstrip("/"))  # credentials masked in what is shown
    import urllib.error  # with urllib.request, ssl and http.client: 18 ms that only a ping needs
    import urllib.request

    for path in ("/health", "/api/2.0/mlflow/experiments/search?max_results=1"):
        shown = shown_base + path.split("?", 1)[0]
        try:
            with urllib.request.urlopen(urllib.request.Request(base + path, headers=headers),  # noqa: S310 (http(s))
                                        timeout=timeout) as response:
                if response.status != 200:
                    return f"{shown} answered HTTP {response.status}"
        except urllib.error.HTTPError as exc:
            if exc.code in (401, 403):
                return (f"{shown} answered HTTP {exc.code} {exc.reason}: the server {REFUSED_CREDENTIALS}; give "
                        "them as user:password@ in the URI or in MLFLOW_TRACKING_USERNAME and "
                        "MLFLOW_TRACKING_PASSWORD")
            return f"{shown} answered HTTP {exc.code} {exc.reason}"
        except urllib.error.URLError as exc:
            return f"cannot reach {shown}: {redact_uri(str(exc.reason))}"
        except (TimeoutError, OSError) as exc:
            return f"cannot reach {shown} within {timeout:g} s: {redact_uri(str(exc))}"
    return None


def _run_duration_ms(record: BenchmarkRecord) -> int:
    """Rough wall time of the case before its record was made (load + timed iterations)."""
    total = sum(record.timings_ms) + 1000.0 * (record.load_time_s or 0.0)
    return max(0, int(total))


class MlflowSink(Sink):
    """Writes records to an MLflow tracking store (see the module docstring for the layout).

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
        self._is_http = urlsplit(self.tracking_uri).scheme.lower() in _HTTP_SCHEMES
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

    def runs_table_url(self) -> str | None:
        """Where a person sees this sink's runs: the experiment's runs table in MLflow's UI, once
        the experiment is known (None before). For a local store, the address of
        ``mlflow ui --backend-store-uri URI`` with its defaults.

        MLflow 3.17's UI opens every experiment on its GenAI overview unless the address asks
        for the model-training view (``workflowType=machine_learning``; the UI's own toggle,
        kept per browser): the experiment's kind tag alone does not change where it lands.
        """
        if self._experiment_id is None:
            return None
        base = self.shown_uri.rstrip("/") if self._is_http else "http://127.0.0.1:5000"
        return f"{base}/#/experiments/{self._experiment_id}?workflowType=machine_learning"

    def where(self) -> str:
        """The store, credentials masked; a local store not created yet says so, so that the wait
        for its tables reads as a first use, not as a failing server."""
        if not self._is_http and self.tracking_uri.lower().startswith("sqlite:///"):
            path = sqlite_path(self.tracking_uri)
            if not path.exists():
                return f"a new store at {path}, first use: creating its tables"
        return self.shown_uri

    def browse(self) -> str | None:
        """The runs table (`runs_table_url`), after how to start the UI for a local store."""
        link = self.runs_table_url()
        if not link:
            return None
        how = "" if self._is_http else f"`mlflow ui --backend-store-uri {self.shown_uri}`, then "
        return f"runs table: {how}{link}"

    # -- plumbing ---------------------------------------------------------------------------
    @contextlib.contextmanager
    def _mlflow_env(self) -> Iterator[None]:
        """Fail fast and quietly: set some of MLflow's variables for our calls only.

        MLflow reads them from the environment on every call and offers no per-client setting.
        Variables the user set are left alone; the ones we add are removed afterwards.
        """
        wanted = {
            # A tqdm bar per artifact download, in the middle of pytest's or the CLI's output.
            "MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR": "false",
        }
        if self._is_http:
            wanted.update(
                {
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
            )
        added = [key for key in wanted if key not in os.environ]
        for key in added:
            os.environ[key] = wanted[key]
        try:
            yield
        except Exception as exc:
            # MLflow quotes the URI it was given ("API request to http://alice:SECRET@host/...
            # failed"): re-raise such an error with the credentials masked, and without the
            # original as context, so that no message or traceback shows them.
            text = str(exc)
            safe = redact_uri(text)
            if safe == text:
                raise
            raise MlflowStoreError(f"{type(exc).__name__}: {safe}") from None
        finally:
            for key in added:
                os.environ.pop(key, None)

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

    def _search(self, filter_string: str) -> Iterator[Run]:
        experiment_id = self._experiment(create=False)
        if experiment_id is None:
            return
        client = self._client()
        token: str | None = None
        while True:
            page = client.search_runs([experiment_id], filter_string, max_results=1000, page_token=token)
            yield from page
            token = page.token
            if not token:
                return

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
            found = client.search_runs(
                [experiment_id],
                f"tags.`{KIND_TAG}` = 'session' AND tags.`{SESSION_TAG}` = '{sid}'",
                max_results=1,
            )
            if found:
                run_id = found[0].info.run_id
            else:
                run = client.create_run(
                    experiment_id,
                    start_time=epoch_ms(session.started_at),
                    tags=_session_tags(session),
                    run_name=session_run_name(session),
                )
                run_id = run.info.run_id
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
                    start_time=created - _run_duration_ms(record),
                    tags=self._record_tags(record),
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
                    client.set_terminated(run_id, _CASE_RUN_STATUS[record.status], end_time=created)
                except BaseException:
                    # Half-written run: delete it when this record is written again.
                    self._stale.setdefault(record.record_id, []).append(run_id)
                    raise
                self._written.append(record.to_dict())

    def _record_tags(self, record: BenchmarkRecord) -> dict[str, str]:
        assert self._parent_run_id is not None
        tags = {PARENT_TAG: self._parent_run_id, KIND_TAG: "record"}
        for name in _CONTEXT_FIELDS:
            value = getattr(record, name)
            if value is None or value == "":
                continue
            tags[f"hwbench.{name}"] = truncate(to_text(name, value), TAG_VALUE_LIMIT)
        return tags

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
        wanted = set(sessions)
        by_session = sorted({sid for sid in sessions.values() if sid})
        alone = sorted(rid for rid, sid in sessions.items() if not sid)
        filters = [self._records_filter(sid) for sid in by_session]
        filters += [f"tags.`{RECORD_TAG}` = '{_quoted(rid, 'record_id')}'" for rid in alone]
        found: set[str] = set()
        stale: dict[str, list[str]] = {}
        with self._mlflow_env():
            if self._experiment(create=False) is None:
                return set()
            for runs in self._search_each(filters):
                for run in runs:
                    record_id = run.data.tags.get(RECORD_TAG)
                    if record_id not in wanted:
                        continue
                    if run.info.status in _TERMINAL:
                        found.add(record_id)
                    else:
                        stale.setdefault(record_id, []).append(run.info.run_id)
        self._stale = {rid: runs for rid, runs in stale.items() if rid not in found}
        return found

    @staticmethod
    def _records_filter(session_id: str) -> str:
        """The search filter for the child runs of one session."""
        return f"tags.`{SESSION_TAG}` = '{_quoted(session_id, 'session_id')}' AND tags.`{KIND_TAG}` = 'record'"

    def _search_each(self, filters: Sequence[str]) -> Iterator[list[Run]]:
        """The runs each filter finds (a list per filter, in order). Against a server, up to
        `SEARCH_THREADS` searches are in flight at once: each is one bounded query, and a server
        a few milliseconds away spends most of a search waiting on the network."""
        if not self._is_http or len(filters) < 2:
            for text in filters:
                yield list(self._search(text))
            return
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(max_workers=SEARCH_THREADS, thread_name_prefix="hwbench-mlflow-search") as pool:
            yield from pool.map(lambda text: list(self._search(text)), filters)

    def close(self, status: str) -> None:
        """Log the records written since `open_session` as a JSON artifact; terminate the parent;
        then keep one copy of each run that writers of the same session at the same time made
        (`mlflow_copies.keep_one_copy`)."""
        if self._parent_run_id is None:
            return
        run_status = _RUN_STATUS[normalize_status(status)]
        parent, written, session_id = self._parent_run_id, self._written, self._session_id
        self._parent_run_id, self._session_id, self._written = None, None, []
        with self._mlflow_env():
            client = self._client()
            try:
                if written:
                    stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime())
                    client.log_text(
                        parent,
                        json.dumps(written, sort_keys=True, default=str),
                        f"{RECORDS_ARTIFACT_DIR}/part-{stamp}-{uuid.uuid4().hex[:8]}.json",
                    )
            finally:
                client.set_terminated(parent, run_status)
            if session_id:
                from .mlflow_copies import keep_one_copy

                try:
                    keep_one_copy(client, self._search, session_id, kind_tag=KIND_TAG, session_tag=SESSION_TAG,
                                  record_tag=RECORD_TAG, parent_tag=PARENT_TAG, artifact_dir=RECORDS_ARTIFACT_DIR)
                except Exception as exc:  # the records are written; only extra copies may remain
                    warnings.warn(f"hwbench: session {session_id}: extra copies of its runs in {self.shown_uri} "
                                  f"were not removed ({redact_uri(repr(exc))}); `hwbench replay` of its spool "
                                  "removes them", HwbenchWarning, stacklevel=2)

    # -- reading back -----------------------------------------------------------------------
    def read_sessions(self) -> list[tuple[SessionInfo, str]]:
        """(session, status) for every parent run; status is finished/failed/killed/running."""
        out: list[tuple[SessionInfo, str]] = []
        with self._mlflow_env():
            for run in self._search(f"tags.`{KIND_TAG}` = 'session'"):
                out.append(
                    (_session_from_tags(run.data.tags), _SESSION_STATUS.get(run.info.status, "running"))
                )
        return out

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
            filters = [self._records_filter(sid) for sid in dict.fromkeys(session_ids)]
        rows: list[tuple[dict[str, Any], str]] = []
        with self._mlflow_env():
            for runs in self._search_each(filters):
                for run in runs:
                    if run.info.status not in _TERMINAL or RECORD_TAG not in run.data.tags:
                        continue
                    rows.append((_record_data(run), run.data.tags.get(PARENT_TAG, "")))
            full: dict[str, dict[str, Any]] = {}
            if with_timings and rows:
                full = self._artifact_records({parent for _, parent in rows if parent})
        records: list[BenchmarkRecord] = []
        for data, _ in rows:
            original = full.get(data["record_id"])
            if original is not None:
                data["timings_ms"] = original.get("timings_ms") or ()
                if data.get("extra") is None:  # the tag was cut at TAG_VALUE_LIMIT
                    data["extra"] = original.get("extra") or {}
            if data.get("extra") is None:
                data["extra"] = {}
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


def session_run_name(session: SessionInfo) -> str:
    """The parent run's name: what the session ran (suite and ``-m`` expression, from the
    session's ``extra``), where (host), on what (commit) and when (UTC), e.g.
    ``bench_suites/test_quick.py -m cpu · ci-runner-3 · 1a2b3c4d · 2026-11-24 14:05 UTC``."""
    extra = dict(session.extra or {})
    suite = str(extra.get("suite") or "").strip()
    markers = str(extra.get("markers") or "").strip()
    what = " ".join(part for part in (suite, f"-m {markers}" if markers else "") if part)
    when = ""
    if session.started_at:
        try:
            stamp = datetime.datetime.fromisoformat(str(session.started_at).replace("Z", "+00:00"))
            if stamp.tzinfo is not None:
                stamp = stamp.astimezone(datetime.timezone.utc)
            when = stamp.strftime("%Y-%m-%d %H:%M UTC")
        except ValueError:
            when = str(session.started_at)[:16]
    parts = [what or "hwbench", session.host, session.git_commit[:8] if session.git_commit else "", when]
    return truncate(" · ".join(p for p in parts if p), 240)


@contextlib.contextmanager
def store_init_lock(directory: Path) -> Iterator[None]:
    """Hold an exclusive lock on `directory` (flock on its descriptor: no file left behind) for up
    to `STORE_INIT_WAIT_S` seconds of waiting; without ``fcntl`` (Windows) only the retry helps."""
    try:
        import fcntl
    except ImportError:
        yield
        return
    fd = os.open(directory, os.O_RDONLY)
    try:
        deadline = time.monotonic() + STORE_INIT_WAIT_S
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise TimeoutError(
                        f"another process has been creating the MLflow store in {directory} for over "
                        f"{STORE_INIT_WAIT_S:.0f} s"
                    ) from None
                time.sleep(0.1)
        yield
    finally:
        os.close(fd)  # releases the lock


#: Words of the errors two processes migrating one new store at once get from Alembic/SQLite.
_MIGRATION_RACE = ("online migration", "duplicate column", "already exists", "alembic", "database is locked")


def retry_migration(make: Any, tries: int = 4) -> Any:
    """`make()`, tried again (after 1, 2, 4 s) while it fails the way a migration race does (a
    store created by a process that does not take our lock, e.g. an older hwbench)."""
    for attempt in range(tries):
        try:
            return make()
        except Exception as exc:
            text = str(exc).lower()
            if attempt == tries - 1 or not any(word in text for word in _MIGRATION_RACE):
                raise
            time.sleep(2**attempt)
    raise AssertionError("unreachable")


def _session_tags(session: SessionInfo) -> dict[str, str]:
    tags: dict[str, str] = {KIND_TAG: "session", SESSION_TAG: session.session_id}
    plain = {
        "started_at": session.started_at,
        "host": session.host,
        "git_commit": session.git_commit,
        "git_branch": session.git_branch,
        "runner_label": session.runner_label,
        "hardware_summary": session.hardware_summary,
    }
    for key, value in plain.items():
        if value:
            tags[f"hwbench.{key}"] = truncate(str(value), TAG_VALUE_LIMIT)
    if session.package_versions:
        versions = dict(session.package_versions)
        tags["hwbench.package_versions"] = truncate(json.dumps(versions, sort_keys=True), TAG_VALUE_LIMIT)
        for package, version in sorted(versions.items())[:50]:
            key = "".join(c if c.isalnum() or c in "._-" else "_" for c in str(package))
            tags[f"hwbench.version.{key}"] = truncate(str(version), 250)
    if session.extra:
        tags["hwbench.extra"] = truncate(
            json.dumps(dict(session.extra), sort_keys=True, default=str), TAG_VALUE_LIMIT
        )
    if session.git_commit:
        tags["mlflow.source.git.commit"] = session.git_commit
    if session.git_branch:
        tags["mlflow.source.git.branch"] = session.git_branch
    return tags


def _quoted(value: str, what: str) -> str:
    """`value` for a search filter's quoted string; ValueError for one holding a quote."""
    if "'" in value or "`" in value or "\\" in value:
        raise ValueError(f"{what} {value!r} contains a quote or backslash; it cannot be searched for in MLflow")
    return value


def _json_or(text: str | None, default: Any) -> Any:
    if not text:
        return default
    try:
        return json.loads(text)
    except ValueError:
        return default


def _session_from_tags(tags: dict[str, str]) -> SessionInfo:
    return SessionInfo(
        session_id=tags.get(SESSION_TAG, ""),
        started_at=tags.get("hwbench.started_at", ""),
        host=tags.get("hwbench.host", ""),
        git_commit=tags.get("hwbench.git_commit", ""),
        git_branch=tags.get("hwbench.git_branch", ""),
        runner_label=tags.get("hwbench.runner_label", ""),
        hardware_summary=tags.get("hwbench.hardware_summary", ""),
        package_versions=_json_or(tags.get("hwbench.package_versions"), {}),
        extra=_json_or(tags.get("hwbench.extra"), {}),
    )


def _record_data(run: Run) -> dict[str, Any]:
    """A record dict from a child run: params and context tags cast back, metrics as logged."""
    data: dict[str, Any] = {}
    params, metrics, tags = run.data.params, run.data.metrics, run.data.tags
    for name in PARAM_FIELDS:
        if name in params:
            data[name] = from_text(name, params[name])
    for name in METRIC_FIELDS:
        if name in metrics:
            value = metrics[name]
            data[name] = int(round(value)) if FIELDS[name].kind == "int" else float(value)
    for name in _CONTEXT_FIELDS:
        text = tags.get(f"hwbench.{name}")
        if text is None:
            continue
        try:
            data[name] = from_text(name, text)
        except ValueError:
            data[name] = None  # cut at TAG_VALUE_LIMIT; the caller may fill it from the artifact
    if "status" not in data:
        data["status"] = _CASE_STATUS.get(run.info.status, "failed")
    return data


def _factory(target: str | None, /, **options: Any) -> MlflowSink:
    return MlflowSink(target, **options)


def _reader(target: str | None, /, *, experiment: str | None = None, with_timings: bool = False,
            **options: Any) -> list[BenchmarkRecord]:
    return MlflowSink(target, experiment or DEFAULT_EXPERIMENT, **options).read_records(with_timings=with_timings)


register_sink(
    "mlflow",
    _factory,
    schemes=("sqlite", "http", "https", "postgresql", "mysql", "mssql", "databricks"),
    reader=_reader,
)

__all__ = [
    "ACCEPTED_FORMS",
    "DEFAULT_EXPERIMENT",
    "EXPERIMENT_KIND",
    "EXPERIMENT_KIND_TAG",
    "MlflowSink",
    "REFUSED_CREDENTIALS",
    "MlflowStoreError",
    "ping",
    "redact_uri",
    "resolve_tracking_uri",
    "retry_migration",
    "session_run_name",
    "sqlite_path",
    "store_init_lock",
    "validate_tracking_uri",
]
