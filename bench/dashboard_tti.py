"""Time to interactive of the dashboard's Overview page, measured in a real browser.

For each repetition: start a fresh `profkit dashboard RUN` server (nothing in memory), open
/run/<key> in a fresh headless-chromium context (empty browser cache), and time from the
request until the verdict element and the first graph have rendered ("cold"). Then load the
same page again in the same context ("warm": the analysis in the server's memory, the JS
bundles in the browser's cache).

Three cases, on a copy of the run (the run itself is never written to):

* "nothing cached": a fresh copy: the traces are parsed and analysed on the first request;
* "ingest cache": the traces' Parquet ingest cache on disk (as after any earlier `profkit`
  command), the dashboard's kept analysis deleted: read from the cache, analysed;
* "result cache": both on disk, as after any earlier view of the run: the analysis is read
  back (:mod:`profkit.datacodec`), the traces are not read at all.

    python bench/dashboard_tti.py [--run samples/runs/stock_ddp] [--repeat 3]
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests" / "dashboard"))
from conftest import CHROMIUM, CHROMIUM_ARGS, free_port, wait_for  # noqa: E402
from profkit.dashboard.registry import run_key  # noqa: E402

READY = "#verdict", "#rank-bars .main-svg"


def timed_load(page, url: str) -> float:
    """ms from the request until the verdict and the first graph are on screen."""
    start = time.perf_counter()
    page.goto(url)
    for selector in READY:
        page.wait_for_selector(selector, timeout=60_000)
    return (time.perf_counter() - start) * 1e3


def one_round(browser, run: Path) -> tuple[float, float]:
    port = free_port()
    log_path = Path(tempfile.mkdtemp(prefix="profkit-tti-")) / "server.log"
    with log_path.open("wb") as log_file:  # a file, not a pipe nobody drains
        proc = subprocess.Popen([sys.executable, "-m", "profkit", "dashboard", str(run),
                                 "--port", str(port)], cwd=REPO, stdout=subprocess.DEVNULL,
                                stderr=log_file)
    try:
        base = f"http://127.0.0.1:{port}"
        wait_for(base + "/_dash-layout", proc, log_path)  # the server answers; nothing analyzed yet
        url = f"{base}/run/{run_key(run.name, run.resolve())}"
        context = browser.new_context(viewport={"width": 1400, "height": 900})
        page = context.new_page()
        cold = timed_load(page, url)
        warm = timed_load(page, url)
        context.close()
        return cold, warm
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def drop_kept_analyses(run: Path) -> None:
    """Delete the dashboard's kept analyses of ``run``, not its ingest cache."""
    for kept in (run / ".profkit" / "cache").glob("result-*.data"):
        kept.unlink()


CASES = ("nothing cached", "ingest cache", "result cache")


def measure(browser, run: Path, repeat: int, tmp: Path) -> dict[str, list[tuple[float, float]]]:
    rows: dict[str, list[tuple[float, float]]] = {case: [] for case in CASES}
    for i in range(repeat):
        copy = tmp / f"r{i}" / run.name  # a new copy each time: nothing cached
        shutil.copytree(run, copy, ignore=shutil.ignore_patterns(".profkit"))
        rows["nothing cached"].append(one_round(browser, copy))
        drop_kept_analyses(copy)
        rows["ingest cache"].append(one_round(browser, copy))
        rows["result cache"].append(one_round(browser, copy))
        shutil.rmtree(copy.parent)
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--run", type=Path, default=REPO / "samples" / "runs" / "stock_ddp")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args(argv)
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p, tempfile.TemporaryDirectory() as tmp:
        browser = p.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        rows = measure(browser, args.run, args.repeat, Path(tmp))
        browser.close()
    print(f"Overview TTI of {args.run.name} (ms, request -> verdict + first graph rendered)")
    print(f"{'case':<18}{'cold runs':<28}{'cold median':>12}{'warm median':>13}")
    for name, times in rows.items():
        cold = [c for c, _ in times]
        warm = [w for _, w in times]
        print(f"{name:<18}{', '.join(f'{c:.0f}' for c in cold):<28}"
              f"{statistics.median(cold):>12.0f}{statistics.median(warm):>13.0f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
