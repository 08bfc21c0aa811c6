"""A dashboard server over the bundled sample runs (plus copies of one of them with a bad
rank), and a headless chromium, shared by the browser tests. Both skip cleanly when chromium
or playwright is absent."""

import contextlib
import gzip
import json
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import numpy as np
import pytest

CHROMIUM = Path(os.environ.get("PROFKIT_CHROMIUM", "/usr/bin/chromium"))
# The browser tests' browser: Debian's chromium-headless-shell where installed (the same
# Blink and V8 without the browser's own UI, which cost a third of chromium's CPU per page
# here; BENCHMARKS.md), else CHROMIUM. The benchmarks and screenshots keep CHROMIUM, the
# browser a user has.
HEADLESS_SHELL = Path("/usr/lib/chromium/chromium-headless-shell")
TEST_CHROMIUM = (CHROMIUM if "PROFKIT_CHROMIUM" in os.environ or not HEADLESS_SHELL.exists()
                 else HEADLESS_SHELL)
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--no-first-run"]
VIEWPORT = {"width": 1400, "height": 900}
REPO = Path(__file__).resolve().parents[2]
STRAGGLER = REPO / "samples" / "runs" / "zoo" / "straggler"
BAD_TRACE = "traces/rank1.pt.trace.json.gz"  # the file each bad run spoils
BAD_STATUS, BAD_CHUNK = "ranks/rank0.json", "nvml/rank1.0.npz"  # the sidecars bad_sidecars spoils


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for(url: str, proc: subprocess.Popen, log_path: Path, timeout: float = 60,
             token: str | None = None) -> None:
    """Until ``url`` answers 200 (with ``token`` as a bearer token, if given)."""
    deadline = time.monotonic() + timeout
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"dashboard exited: {log_path.read_text()[-2000:]}")
        try:
            urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=2).read()
            return
        except OSError:
            time.sleep(0.2)
    raise TimeoutError(f"{url} did not answer in {timeout} s")


def _truncate(doc_bytes: bytes) -> bytes:
    return doc_bytes[: len(doc_bytes) // 2]  # what a profiler killed mid-write leaves


def _list_as_cat(doc_bytes: bytes) -> bytes:
    doc = json.loads(doc_bytes)
    kernel = next(e for e in doc["traceEvents"] if e.get("cat") == "kernel")
    kernel["cat"] = ["kernel"]  # a list where a string belongs
    return json.dumps(doc).encode()


BAD_RUNS = {"straggler-truncated": _truncate, "straggler-list-cat": _list_as_cat}


def spoiled_copy(folder: Path, spoil) -> Path:
    """A copy of zoo/straggler (2 ranks) in ``folder`` whose rank 1 trace is ``spoil``ed."""
    shutil.copytree(STRAGGLER, folder, ignore=shutil.ignore_patterns(".profkit"))
    trace = folder / BAD_TRACE
    trace.write_bytes(gzip.compress(spoil(gzip.decompress(trace.read_bytes()))))
    return folder


@pytest.fixture(scope="session")
def bad_runs(tmp_path_factory) -> dict[str, Path]:
    """The :data:`BAD_RUNS`, served by the session's dashboard."""
    root = tmp_path_factory.mktemp("bad-runs")
    return {name: spoiled_copy(root / name, spoil) for name, spoil in BAD_RUNS.items()}


@pytest.fixture(scope="session")
def missing_run(tmp_path_factory) -> Path:
    """A copy of zoo/straggler without its rank 1 trace (run.json still says 2 ranks)."""
    folder = tmp_path_factory.mktemp("missing") / "straggler-missing-rank"
    shutil.copytree(STRAGGLER, folder, ignore=shutil.ignore_patterns(".profkit"))
    (folder / BAD_TRACE).unlink()
    return folder


def bad_sidecars(folder: Path) -> Path:
    """A copy of zoo/straggler (both ranks' traces intact) whose rank 0 status file and
    rank 1 NVML chunk cannot be used."""
    shutil.copytree(STRAGGLER, folder, ignore=shutil.ignore_patterns(".profkit"))
    (folder / BAD_STATUS).write_text("{not json")
    with (folder / BAD_CHUNK).open("wb") as f:  # a 2-D column: not NVML samples
        np.savez(f, ts_ns=np.arange(4, dtype=np.int64), power_w=np.ones((4, 2)))
    return folder


@pytest.fixture(scope="session")
def sidecar_run(tmp_path_factory) -> Path:
    """:func:`bad_sidecars` of zoo/straggler: every rank there, two sidecars skipped."""
    return bad_sidecars(tmp_path_factory.mktemp("sidecars") / "straggler-bad-sidecars")


@pytest.fixture(scope="session")
def server_log(tmp_path_factory) -> Path:
    """The session server's stderr: its log, tracebacks included."""
    return tmp_path_factory.mktemp("server") / "stderr.log"


@contextlib.contextmanager
def serving(args: list[str], log_path: Path):
    """Base URL of ``profkit dashboard ARGS`` on a free local port, while in the block."""
    port = free_port()
    cmd = [sys.executable, "-m", "profkit", "dashboard", "--port", str(port), "--no-token", *args]
    with log_path.open("wb") as log_file:  # a file, not a pipe nobody drains
        proc = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.DEVNULL, stderr=log_file)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_for(url + "/", proc, log_path)
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=10)


@pytest.fixture(scope="session")
def server(bad_runs, missing_run, sidecar_run, server_log):
    """Base URL of `profkit dashboard` (the bundled sample runs, the bad runs, the run
    missing a trace and the one with bad sidecars) on a free local port. With
    --no-background: each run is analysed when a test opens it, not all 55 sample runs as
    soon as anything asks for the Runs page (minutes of CPU under the other tests; the
    background analysis is tested on :func:`runs_server`)."""
    with serving([*map(str, bad_runs.values()), str(missing_run), str(sidecar_run),
                  "--root", str(REPO / "samples" / "runs"), "--no-background"],
                 server_log) as url:
        yield url


# The sample runs the Runs page tests read (under the same labels as in samples/runs): one
# of each kind they check (two ranks with a straggler, one rank on a host of two GPUs,
# stock torch.profiler traces without run.json), so that the page completes in seconds
# where the 55 sample runs take a minute or more to analyse on a small machine.
RUNS_PAGE_SAMPLES = ("zoo/straggler", "zoo/compute", "stock_ddp")


@pytest.fixture(scope="session")
def runs_server(bad_runs, missing_run, sidecar_run, tmp_path_factory):
    """``(base URL, {label: key})`` of a `profkit dashboard` for the Runs page tests: the
    runs the session server names (bad runs, a missing trace, bad sidecars) and a root of
    copies of :data:`RUNS_PAGE_SAMPLES`."""
    from profkit.dashboard.server.registry import RunRegistry

    folder = tmp_path_factory.mktemp("runs-page")
    root = folder / "runs"
    for label in RUNS_PAGE_SAMPLES:
        shutil.copytree(REPO / "samples" / "runs" / label, root / label,
                        ignore=shutil.ignore_patterns(".profkit"))
    named = [*bad_runs.values(), missing_run, sidecar_run]
    keys = {e.label: e.key for e in RunRegistry(named, [root]).entries()}
    with serving([*map(str, named), "--root", str(root)], folder / "stderr.log") as url:
        yield url, keys


@pytest.fixture(scope="session")
def browser_profile(tmp_path_factory):
    """One headless chromium per test process, on a profile of its own (a persistent context
    rather than the default incognito ones): chromium keeps the compiled code of the
    dashboard's scripts (Plotly, AG Grid, React: 8 MB) only in a profile on disk, and
    compiling them again for every page cost about 1.6 of the 2.4 CPU s a page load takes
    (BENCHMARKS.md). Each test still gets its own page; the dashboard keeps no cookies or
    storage, so a page sees nothing of the ones before it."""
    if not TEST_CHROMIUM.exists():
        pytest.skip(f"browser tests need chromium at {CHROMIUM} (apt-get install "
                    "chromium-headless-shell, or chromium)")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        pytest.skip("browser tests need the playwright package (pip install playwright)")
    with sync_playwright() as p:
        context = p.chromium.launch_persistent_context(
            tmp_path_factory.mktemp("chromium-profile"), executable_path=str(TEST_CHROMIUM),
            args=CHROMIUM_ARGS, viewport=VIEWPORT, accept_downloads=True)
        yield context
        context.close()


def _page(browser_profile, base: str):
    pg = browser_profile.new_page()  # at the profile's VIEWPORT
    errors: list[str] = []
    pg.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    pg.on("pageerror", lambda e: errors.append(str(e)))
    pg.set_default_timeout(60_000)
    pg.base = base
    yield pg
    pg.close()
    assert errors == [], f"browser console errors: {errors}"


@pytest.fixture
def page(browser_profile, server):
    """A fresh page; the test fails if the browser logs an error or a script throws."""
    yield from _page(browser_profile, server)


@pytest.fixture
def runs_page(browser_profile, runs_server):
    """A fresh page of :func:`runs_server` (``.keys``: its runs' keys by label); fails on
    browser errors as :func:`page` does."""
    for pg in _page(browser_profile, runs_server[0]):
        pg.keys = runs_server[1]
        yield pg
