"""Time to the first row's verdict and to every row's on a cold Runs page, in a real
browser, next to one cold ``profkit analyze`` of the run in the first row.

Each round copies the root (``samples/runs`` by default, 55 runs) without any cache, starts
a fresh ``profkit dashboard --root COPY``, opens ``/`` in a fresh headless-chromium context
as soon as the server answers it (the early index page, before the pages and the analysis
code are loaded: dashboard/server/early.py; :func:`answering`) and times from the request
until the rows are listed, until the first row has its verdict (its state ``done`` or
``failed``; also from the server's launch) and until the page says every run is analysed. Then ``profkit analyze
--no-cache`` of the first row's run, a fresh process, timed by wall clock: the peer of the
first row (which also pays the dashboard's poll, every 0.5 s).

    python bench/runs_page_tti.py [--root samples/runs] [--repeat 2]
"""

from __future__ import annotations

import argparse
import http.client
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests" / "dashboard"))
from conftest import CHROMIUM, CHROMIUM_ARGS, free_port  # noqa: E402

# the token each server asks for (as `profkit dashboard` asks for one by default); the page is
# opened at the address with it, as a user opens the printed one
TOKEN = "bench-token-0123456789abcdef"
TOKEN_ENV = {**os.environ, "PROFKIT_DASHBOARD_TOKEN": TOKEN}
# the first row in view (the grid's row 0) with its verdict (or its error)
FIRST_DONE = ".ag-center-cols-container .ag-row[row-index='0']:is(.run-done, .run-failed)"
FIRST_LABEL = ".ag-center-cols-container .ag-row[row-index='0'] a.runlink"
ALL_DONE = "#runs-progress:has-text('runs analysed')"
TIMEOUT_MS = 900_000


def cold_copy(root: Path, folder: Path) -> Path:
    """A copy of ``root`` without any of profkit's caches."""
    copy = folder / root.name
    shutil.copytree(root, copy, ignore=shutil.ignore_patterns(".profkit"))
    return copy


def analyze_wall_s(run: Path) -> float:
    """Seconds of a cold ``profkit analyze --no-cache`` of ``run`` (a fresh process)."""
    start = time.perf_counter()
    subprocess.run([sys.executable, "-m", "profkit", "analyze", str(run), "--no-cache"],
                   cwd=REPO, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - start


def answering(url: str, proc: subprocess.Popen, log_path: Path, timeout: float = 120,
              poll_s: float = 0.02) -> None:
    """Until ``url`` answers 200 (its status line: the early index page's first part, what
    a browser starts on; not the whole page, whose end waits until the app is complete),
    asked every ``poll_s``, as soon as a user could open the address the server prints."""
    deadline = time.monotonic() + timeout
    host, port = url.split("/")[2].split(":")
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"dashboard exited: {log_path.read_text()[-2000:]}")
        conn = http.client.HTTPConnection(host, int(port), timeout=5)
        try:
            conn.request("GET", "/" + url.split("/", 3)[3],
                         headers={"Authorization": f"Bearer {TOKEN}"})
            if conn.getresponse().status == 200:
                return
        except OSError:
            pass
        finally:
            conn.close()
        time.sleep(poll_s)
    raise TimeoutError(f"{url} did not answer in {timeout} s")


def runs_page_round(browser, root: Path, tmp: Path) -> dict[str, float | str]:
    """One cold round over a fresh copy of ``root`` (see the module doc); seconds."""
    copy = cold_copy(root, tmp)
    port, log_path = free_port(), tmp / "runs-server.log"
    launched = time.perf_counter()
    with log_path.open("wb") as log_file:
        proc = subprocess.Popen([sys.executable, "-m", "profkit", "dashboard", "--root",
                                 str(copy), "--port", str(port)], cwd=REPO, env=TOKEN_ENV,
                                stdout=subprocess.DEVNULL, stderr=log_file)
    try:
        base = f"http://127.0.0.1:{port}"
        context = browser.new_context(viewport={"width": 1400, "height": 900})
        page = context.new_page()
        # the page asked for as soon as the server answers (the early index page, before
        # the app is complete: server/early.py), as a user opens the printed address
        answering(base + "/", proc, log_path)
        start = time.perf_counter()
        page.goto(f"{base}/?token={TOKEN}")
        page.locator("a.runlink").first.wait_for(timeout=TIMEOUT_MS)
        listed = time.perf_counter() - start
        page.wait_for_selector(FIRST_DONE, timeout=TIMEOUT_MS)
        first = time.perf_counter() - start
        label = page.locator(FIRST_LABEL).inner_text()
        rows = page.locator("a.runlink").count()
        page.wait_for_selector(ALL_DONE, timeout=TIMEOUT_MS)
        every = time.perf_counter() - start
        context.close()
    finally:
        proc.terminate()
        proc.wait(timeout=10)
    first_run = copy / label
    shutil.rmtree(first_run / ".profkit", ignore_errors=True)
    return {"rows listed": listed, "first row": first, "all rows": every, "rows": rows,
            "first row from launch": start - launched + first,
            "first run": label,
            "first run analyze": analyze_wall_s(first_run)}


def report(rounds: list[dict]) -> None:
    med = {k: statistics.median(r[k] for r in rounds)
           for k in ("rows listed", "first row", "first row from launch", "all rows",
                     "first run analyze")}
    print(f"Runs page, {rounds[0]['rows']} runs, first row {rounds[0]['first run']} "
          f"(s, median of {len(rounds)})")
    print("| rows listed | first row verdict | from the server's launch "
          "| profkit analyze --no-cache of that run | all rows |")
    print("| ---: | ---: | ---: | ---: | ---: |")
    print(f"| {med['rows listed']:.2f} | {med['first row']:.2f} "
          f"| {med['first row from launch']:.2f} | {med['first run analyze']:.2f} "
          f"| {med['all rows']:.1f} |")
    for i, r in enumerate(rounds):
        print(f"  round {i}: rows listed {r['rows listed']:.2f} s, first row "
              f"{r['first row']:.2f} s, its analyze "
              f"{r['first run analyze']:.2f} s, all rows {r['all rows']:.1f} s")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--root", type=Path, default=REPO / "samples" / "runs")
    parser.add_argument("--repeat", type=int, default=2)
    args = parser.parse_args(argv)
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        rounds = []
        for _ in range(args.repeat):
            with tempfile.TemporaryDirectory() as tmp:
                rounds.append(runs_page_round(browser, args.root, Path(tmp)))
        browser.close()
    report(rounds)
    return 0


if __name__ == "__main__":
    sys.exit(main())
