"""The default sinks: the store's MLflow tracking URI and DuckDB file (``pytest11`` entry point
``hwbench-default-sinks``).

Our implementation of `pytest_hwbench_default_sinks`, registered like a third party's and marked
``trylast``: a conftest or plugin that answers the hook replaces these sinks without disabling
anything.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from .base import Sink, open_sink

if TYPE_CHECKING:
    from ..plugin.recording import TrackingConfig


def pytest_hwbench_package_versions(config: pytest.Config) -> dict[str, str]:
    from ..plugin.session import installed_versions

    return installed_versions(("mlflow", "duckdb"))


@pytest.hookimpl(trylast=True)
def pytest_hwbench_default_sinks(config: pytest.Config, tracking: TrackingConfig) -> list[Sink]:
    return [open_sink(f"mlflow:{tracking.mlflow_uri}", experiment=tracking.experiment),
            open_sink(f"duckdb:{tracking.db_path}")]
