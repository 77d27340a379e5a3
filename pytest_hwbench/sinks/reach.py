"""Whether a store answers before a command reads or writes there: a tracking server's ``/health``,
an SQL store's ``SELECT 1``, each within `PING_TIMEOUT_S`, so that a store that refuses or stays
silent stops a command in seconds, not after MLflow's retries (minutes, or never)."""

from __future__ import annotations

import contextlib
from urllib.parse import urlsplit

from .redact import redact_uri

#: Seconds a command waits for a tracking server's ``/health`` and API (or an SQL store's
#: ``SELECT 1``) before it reads or writes there: a server that refuses fails at once, a silent one within this, and
#: neither after MLflow's retries.
PING_TIMEOUT_S = 5.0
#: The default ports of the SQL stores MLflow takes.
_SQL_PORTS = {"postgresql": 5432, "mysql": 3306, "mssql": 1433}
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
    from .mlflow_uri import REFUSED_CREDENTIALS, is_http, ping

    if uri is None:
        return
    if is_http(uri):
        problem = ping(uri, timeout=timeout)
    elif is_sql(uri):
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

    from .mlflow_uri import sqlite_path

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


def _scheme(uri: str) -> str:
    return urlsplit(str(uri)).scheme.lower().split("+", 1)[0]  # postgresql+psycopg2 -> postgresql


def is_sql(uri: str) -> bool:
    """Whether `uri` names an SQL store with a host (PostgreSQL, MySQL, SQL Server)."""
    return _scheme(uri) in _SQL_PORTS and bool(urlsplit(str(uri)).hostname)


def sql_problem(uri: str, what: str) -> str | None:
    """Why the SQL store at `uri` takes no connection or does not answer ``SELECT 1`` within
    `PING_TIMEOUT_S`, or None; ValueError naming `what` when it refuses the login or the database
    or its driver is missing (a usage error: another URI or an install fixes it, not waiting)."""
    import socket

    import sqlalchemy

    from .._deadline import call_with_deadline

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


__all__ = ["PING_TIMEOUT_S", "check_sqlite", "is_sql", "require_answer", "sql_problem"]
