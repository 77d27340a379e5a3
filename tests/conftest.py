"""Shared test set-up.

The ``pytester`` fixture snapshots ``sys.modules`` and restores it afterwards, dropping modules
first imported during the test. Pure-Python modules import again cleanly, but duckdb's and
pyarrow's compiled extensions cannot be initialised twice in one process: a second import
aborts the interpreter. Importing them here, before any snapshot, keeps them in every snapshot.
"""

import duckdb  # noqa: F401
import pyarrow  # noqa: F401

pytest_plugins = ["pytester"]
