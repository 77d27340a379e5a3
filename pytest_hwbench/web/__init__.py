"""Web platforms: onnxruntime-web in a headless Chromium (targets ``wasm``, ``webgpu``, ``webnn``).

`shared_driver` is the process's `WebDriver` for measuring; the targets' probes are `detect`, the
commands `pytest_hwbench.web_commands`, the backend `pytest_hwbench.backends.onnxruntime_web`.
Nothing here imports torch or pytest.
"""

from __future__ import annotations

import functools

from ._driver import BROWSER_FLAGS, BrowserCrashed, BrowserTimeout, PageError, WebDriver, WebError, hello_hint
from ._locate import ORT_WEB_VERSION, Browser, OrtWeb, find_browser, find_ort_web, install_dir


@functools.cache
def shared_driver() -> WebDriver:
    """The process's driver for measuring (the browser starts at its first command and is reused);
    `WebError` naming the fix when the browser or onnxruntime-web is missing."""
    browser, why = find_browser()
    if browser is None:
        raise WebError(why)
    ort, why = find_ort_web()
    if ort is None:
        raise WebError(why)
    return WebDriver(browser.path, ort.dist)


def close_shared_driver() -> None:
    """End the shared driver's browser and server (the next `shared_driver()` makes a new one)."""
    if shared_driver.cache_info().currsize:
        shared_driver().close()
    shared_driver.cache_clear()


__all__ = ["BROWSER_FLAGS", "ORT_WEB_VERSION", "Browser", "BrowserCrashed", "BrowserTimeout", "OrtWeb", "PageError",
           "WebDriver", "WebError", "close_shared_driver", "find_browser", "find_ort_web", "hello_hint", "install_dir",
           "shared_driver"]
