"""``hwbench web install``: onnxruntime-web from npm into hwbench's cache folder, at the pinned
version (`ORT_WEB_VERSION`); ``hwbench web status``: what the web targets find. The browser is
the system's (``apt-get install chromium``).
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
from pathlib import Path

from .cli import EXIT_OK, EXIT_USAGE, register_command
from .web._locate import ORT_WEB_VERSION, find_browser, find_ort_web, install_dir

#: Seconds npm may take (about 3 s here; a slow registry mirror takes longer).
NPM_TIMEOUT_S = 600


def install_ort_web(folder: Path | None = None, version: str = ORT_WEB_VERSION) -> Path:
    """``npm install onnxruntime-web@VERSION`` into `folder` (default `install_dir()`); the
    package folder. RuntimeError naming the fix when npm is missing or fails."""
    npm = shutil.which("npm")
    if npm is None:
        raise RuntimeError("npm is not on PATH: install Node.js (Debian/Ubuntu: `apt-get install -y nodejs npm`), "
                           "then run `hwbench web install` again")
    folder = (folder or install_dir()).expanduser()
    folder.mkdir(parents=True, exist_ok=True)
    # A package.json of its own, so npm installs here rather than in a parent project.
    manifest = folder / "package.json"
    if not manifest.exists():
        manifest.write_text(json.dumps({"name": "hwbench-web", "private": True}, indent=1))
    done = subprocess.run([npm, "install", "--no-audit", "--no-fund", "--save-exact", "--prefix", str(folder),
                           f"onnxruntime-web@{version}"], capture_output=True, text=True, timeout=NPM_TIMEOUT_S)
    if done.returncode != 0:
        raise RuntimeError(f"npm install onnxruntime-web@{version} failed (exit {done.returncode}): "
                           f"{(done.stderr or done.stdout).strip()[-1500:]}")
    return folder / "node_modules" / "onnxruntime-web"


def _args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("action", choices=("install", "status"),
                        help="install: onnxruntime-web into the cache folder; status: what the web targets find")
    parser.add_argument("--dir", type=Path, default=None,
                        help=f"install: the folder to install into (default: {install_dir()}); status always shows "
                             "what the cases find ($HWBENCH_ORT_WEB, else the default folder)")
    parser.add_argument("--version", default=ORT_WEB_VERSION, help=f"onnxruntime-web version (default {ORT_WEB_VERSION})")


def _run(args: argparse.Namespace) -> int:
    if args.action == "install":
        try:
            package = install_ort_web(args.dir, args.version)
        except (RuntimeError, subprocess.TimeoutExpired) as exc:
            print(f"hwbench web install: error: {exc}", file=sys.stderr)
            return EXIT_USAGE
        print(f"onnxruntime-web {args.version} installed in {package}")
        if args.dir is not None and args.dir.expanduser().resolve() != install_dir().resolve():
            print(f"  point hwbench at it: export HWBENCH_ORT_WEB={package}")
    browser, why = find_browser()
    ort, ort_why = find_ort_web()
    print(f"browser: {f'{browser.path} ({browser.version})' if browser else why}")
    print(f"onnxruntime-web: {f'{ort.version} in {ort.dist}' if ort else ort_why}")
    if args.action == "status":
        from .hardware import detect_hardware

        hw = detect_hardware()
        for name in ("wasm", "webgpu", "webnn"):
            target = hw.targets.get(name)
            if target is not None:
                where = "; ".join(d.name for d in target.devices) if target.available else target.reason
                print(f"{name}: {'yes' if target.available else 'no'}: {where}")
    return EXIT_OK if browser is not None and ort is not None else EXIT_USAGE


register_command("web", f"web targets: `hwbench web install` puts onnxruntime-web {ORT_WEB_VERSION} in the cache; "
                        "`hwbench web status` shows what is found", _args, _run)

__all__ = ["install_ort_web"]
