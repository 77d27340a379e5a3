"""Where an MLflow store is: the tracking URI resolved (`resolve_tracking_uri`, the one place it
is), checked without side effects (`validate_tracking_uri`), and asked whether it answers (`ping`
for a server; `require_answer` before a command reads or writes there: a server's ``/health``,
an SQL store's ``SELECT 1``, within `PING_TIMEOUT_S`, not after MLflow's retries).

Imports no ``mlflow``: these are cheap and usable in any process, before a sink is built.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from urllib.parse import urlsplit

from pytest_hwbench.sinks.redact import redact_uri, split_credentials
from pytest_hwbench.vocabulary import DEFAULT_STORE_DIR

ACCEPTED_FORMS = (
    "sqlite:///PATH/mlflow.db (relative) or sqlite:////ABS/PATH/mlflow.db, "
    "http(s)://HOST:PORT (an `mlflow server`), postgresql://USER:PASS@HOST:PORT/DB, "
    "mysql://..., mssql://..., databricks"
)
#: The SQL stores MLflow takes, and their default ports.
_SQL_PORTS = {"postgresql": 5432, "mysql": 3306, "mssql": 1433}
_HTTP_SCHEMES = frozenset({"http", "https"})


def resolve_tracking_uri(
    tracking_uri: str | None = None, store_dir: str | os.PathLike[str] | None = None
) -> str:
    """The tracking URI to use: `tracking_uri`, else ``$MLFLOW_TRACKING_URI``, else
    ``sqlite:///<store_dir>/mlflow.db`` (`store_dir` default ``mlruns/`` here, made absolute)."""
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


def require_existing(uri: str) -> None:
    """Refuse a ``sqlite:///`` store whose file does not exist (FileNotFoundError): a reader never
    makes a store, and MLflow would create the folders and an empty database."""
    if uri.lower().startswith("sqlite:///") and not sqlite_path(uri).is_file():
        raise FileNotFoundError(f"{redact_uri(uri)}: {sqlite_path(uri)} does not exist; name an existing store "
                                "(a session writes one)")


def is_http(uri: str) -> bool:
    """Whether `uri` names a tracking server (``http://`` or ``https://``)."""
    return urlsplit(uri).scheme.lower() in _HTTP_SCHEMES


def _scheme(uri: str) -> str:
    return urlsplit(str(uri)).scheme.lower().split("+", 1)[0]  # postgresql+psycopg2 -> postgresql


#: The first bytes of every SQLite 3 database file.
_SQLITE_HEADER = b"SQLite format 3\x00"


def validate_tracking_uri(uri: str) -> str:
    """Check that MLflow 3 can use `uri` as a tracking store; return it stripped. Nothing is
    created or contacted (an existing SQLite file's first bytes are read). Raises ValueError
    naming the URI and the accepted forms; plain paths and ``file:`` URIs too (MLflow 3 refuses
    the file store unless ``MLFLOW_ALLOW_FILE_STORE=true``, see FACTS.md)."""
    text = str(uri).strip()
    shown = redact_uri(text)  # for the messages: a password in the URI must not reach a terminal
    hint = f"accepted forms: {ACCEPTED_FORMS}"
    if not text:
        raise ValueError(f"MLflow tracking URI is empty; {hint}")
    parsed = urlsplit(text)
    scheme, base = parsed.scheme.lower(), _scheme(text)
    if base == "databricks" or text.lower() == "databricks":  # alone: the workspace in the environment
        return text
    if base == "sqlite":
        if not text.lower().startswith("sqlite:///") or not sqlite_path(text).name or ":memory:" in text:
            raise ValueError(
                f"MLflow tracking URI {shown!r} names no database file; use sqlite:///PATH/mlflow.db; {hint}"
            )
        path = sqlite_path(text)
        if path.is_dir():
            raise ValueError(f"MLflow tracking URI {shown!r} names a directory; use sqlite:///{path / 'mlflow.db'}")
        head = _SQLITE_HEADER
        with contextlib.suppress(OSError):  # unreadable here: MLflow says why when it opens it
            if path.is_file() and path.stat().st_size:
                with path.open("rb") as f:
                    head = f.read(len(_SQLITE_HEADER))
        if head != _SQLITE_HEADER:
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
    if base in _SQL_PORTS:
        if not parsed.netloc:
            raise ValueError(f"MLflow tracking URI {shown!r} has no host; {hint}")
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
    """Why `uri` is not usable right now, or None if it looks fine; never raises.

    For ``http(s)://`` asks the server's ``/health``, then its tracking API (a search for one
    experiment: a server whose store hangs, or that refuses the credentials, is caught too),
    each within `timeout` seconds; a refusal of the credentials says `REFUSED_CREDENTIALS`.
    Other stores have nothing to reach over the network: None."""
    try:
        text = validate_tracking_uri(uri)
    except ValueError as exc:
        return str(exc)
    if not is_http(text):
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


#: Seconds a command waits for a tracking server's ``/health`` and API (or an SQL store's
#: ``SELECT 1``) before it reads or writes there.
PING_TIMEOUT_S = 5.0
#: Words of an SQL server's refusal of the login or the database (PostgreSQL, MySQL, SQL Server).
_REFUSALS = ("authentication failed", "password", "does not exist", "access denied", "unknown database",
             "login failed", "no pg_hba.conf entry", "role ")


def require_answer(uri: str | None, what: str, *, timeout: float = PING_TIMEOUT_S,
                   fix: str = "check the address and that the server runs") -> None:
    """Raise ConnectionError (exit 3) naming `what` and saying `fix` when `uri` is an ``http(s)://``
    tracking server whose ``/health`` or tracking API does not answer within `timeout` seconds, or
    an SQL store (PostgreSQL, MySQL, SQL Server) that does not answer ``SELECT 1`` within
    `PING_TIMEOUT_S`; ValueError (exit 2) when the server refuses the credentials, the SQL store the
    user, the password or the database (or its driver is not installed), or an SQLite file is not a
    database; other stores pass."""
    if uri is None:
        return
    if is_http(uri):
        problem = ping(uri, timeout=timeout)
    elif _scheme(uri) in _SQL_PORTS and urlsplit(uri).hostname:
        problem = sql_problem(uri, what)
    elif _scheme(uri) == "sqlite":
        check_sqlite(uri, what)
        return
    else:
        return
    if problem is not None and REFUSED_CREDENTIALS in problem:
        raise ValueError(f"{what} {redact_uri(uri)}: {problem}")
    if problem is not None:
        raise ConnectionError(f"{what} {redact_uri(uri)}: {problem}; {fix}")


def check_sqlite(uri: str, what: str) -> None:
    """Raise ValueError naming `what` when the SQLite store at `uri` exists but is not a database
    SQLite can read (truncated, overwritten); a missing file passes (a writer creates it)."""
    import sqlite3

    path = sqlite_path(uri)
    if not path.is_file():
        return
    try:
        with contextlib.closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=PING_TIMEOUT_S)) as con:
            con.execute("SELECT count(*) FROM sqlite_master").fetchone()
    except sqlite3.OperationalError as exc:
        if "locked" in str(exc):
            return  # a writer holds it: MLflow's own busy wait applies
        raise ValueError(f"{what} {redact_uri(uri)}: SQLite cannot read {path} ({exc}); check the path") from None
    except sqlite3.DatabaseError as exc:
        raise ValueError(f"{what} {redact_uri(uri)}: {path} is not a readable SQLite database ({exc}); restore it "
                         "from a copy, or move it aside and replay the spool into a new store") from None


def sql_problem(uri: str, what: str) -> str | None:
    """Why the SQL store at `uri` takes no connection or does not answer ``SELECT 1`` within
    `PING_TIMEOUT_S`, or None; ValueError naming `what` when it refuses the login or the database
    or its driver is missing (a usage error: another URI or an install fixes it, not waiting)."""
    import socket

    import sqlalchemy

    from pytest_hwbench._deadline import call_with_deadline

    parts = urlsplit(uri)
    host, port = str(parts.hostname), parts.port or _SQL_PORTS[_scheme(uri)]
    try:
        socket.create_connection((host, port), timeout=PING_TIMEOUT_S).close()
    except OSError as exc:
        return f"cannot connect to {host}:{port} within {PING_TIMEOUT_S:g} s: {exc.strerror or exc}"
    shown = redact_uri(uri)
    timeout = int(PING_TIMEOUT_S)
    driver_args = {"postgresql": {"connect_timeout": timeout}, "mysql": {"connect_timeout": timeout},
                   "mssql": {"timeout": timeout}}.get(_scheme(uri), {})

    def ask() -> None:
        engine = sqlalchemy.create_engine(uri, connect_args=driver_args, poolclass=sqlalchemy.pool.NullPool)
        try:
            with engine.connect() as con:
                con.execute(sqlalchemy.text("SELECT 1"))
        finally:
            engine.dispose()

    try:
        call_with_deadline(ask, PING_TIMEOUT_S + 1, name="hwbench-sql-ping", on_wait=lambda left: None,
                           on_deadline=lambda: TimeoutError(f"no answer to a query within {PING_TIMEOUT_S + 1:g} s"))
    except TimeoutError as exc:
        return str(exc)
    except ModuleNotFoundError as exc:
        raise ValueError(f"{what} {shown}: its database driver is not installed ({exc}); for PostgreSQL: "
                         "pip install 'pytest-hwbench[team]'") from None
    except Exception as exc:  # noqa: BLE001 - the driver's own error types
        text = redact_uri(str(getattr(exc, "orig", None) or exc)).strip().splitlines()
        first = text[0] if text else type(exc).__name__
        if any(word in first.lower() for word in _REFUSALS):
            raise ValueError(f"{what} {shown}: the server refused: {first}; check the user, the password and the "
                             "database name") from None
        return f"no answer to a query: {first}"
    return None


__all__ = ["ACCEPTED_FORMS", "PING_TIMEOUT_S", "REFUSED_CREDENTIALS", "is_http", "ping", "require_answer",
           "require_existing", "resolve_tracking_uri", "sqlite_path", "validate_tracking_uri"]
