"""Shared test set-up.

The ``pytester`` fixture snapshots ``sys.modules`` and restores it afterwards, dropping modules
first imported during the test. duckdb's and pyarrow's compiled extensions cannot be
initialised twice in one process (a second import aborts the interpreter), and pandas modules
imported twice give two copies of its array classes (``AssertionError: ArrowStringArray`` when
a DuckDB result becomes a frame). Importing them here, before any snapshot, keeps one copy.
"""

import duckdb  # noqa: F401
import pandas  # noqa: F401
import pyarrow  # noqa: F401

duckdb.connect().execute("SELECT 'x' AS s").df()  # pulls in pandas' Arrow-backed string arrays

pytest_plugins = ["pytester"]
