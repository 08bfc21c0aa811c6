"""Time to interactive of the dashboard's Overview and Timeline pages and the Timeline's zoom
latency, measured in a real browser.

For each repetition: start a fresh `profkit dashboard RUN` server (nothing warmed: no
analysis in memory), open /run/<key> in a fresh headless-chromium context (empty browser
cache) and time from the request until the verdict and the first graph have rendered
(Overview cold); load it again (warm: the analysis cached on the server, the JS bundles in
the browser). Then the Timeline the same way, until its graph has rendered (cold: the lane
tables of the ranks shown are built; the analysis is already cached by the Overview), and
again (warm). Then zoom: each window of ``ZOOMS`` is sent as a plotly relayout, and the
time is taken from the relayout until the server's answer is on screen (the event count
and span text changed), ending with a zoom back out to the whole run (autorange).

Three cases, each on a fresh copy of the run (the run itself is never written to):
"nothing cached": the traces are parsed and analysed on the first request; "ingest cache":
the traces' Parquet ingest cache on disk (as after any earlier `profkit` command) but the
dashboard's kept analysis deleted; "result cache": both on disk, as after any earlier view
of the run: the analysis is read back (:mod:`profkit.datacodec`), the traces are not read.

The large run of BENCHMARKS.md:

    python bench/make_big_run.py samples/runs/stock_ddp_stack BIG/stock_ddp_stack_big \
        --target-mb 130 --gzip
    python bench/dashboard_tti.py --run BIG/stock_ddp_stack_big [--repeat 3]
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

OVERVIEW_READY = "#verdict", "#rank-bars .main-svg"
TIMELINE_READY = ("#tl-graph .main-svg",)
# Windows as shares of the run's span: a few steps, a tenth, a sliver; then the whole run.
ZOOMS = [(0.40, 0.42), (0.30, 0.40), (0.50, 0.5004), None]
INFO = "document.querySelector('#tl-info').textContent"
GRAPH = "document.querySelector('#tl-graph .js-plotly-plot')"


def timed_load(page, url: str, ready) -> float:
    """ms from the request until every ``ready`` selector is on screen."""
    start = time.perf_counter()
    page.goto(url)
    for selector in ready:
        page.wait_for_selector(selector, timeout=300_000)
    return (time.perf_counter() - start) * 1e3


def timed_zoom(page, share: tuple[float, float] | None) -> tuple[float, float]:
    """ms from a relayout to ``share`` of the run's span (None: autorange) until the
    server's answer is drawn, and ms of that answer's request (sent to fully received)."""
    before = page.locator("#tl-info").inner_text()
    if share is None:
        update = "{'xaxis.autorange': true}"
    else:
        x0, x1 = page.evaluate(f"{GRAPH}._fullLayout.xaxis.range")  # first zoom: the whole run
        span = getattr(page, "full_span", None) or (x0, x1)
        page.full_span = span
        lo, hi = (span[0] + s * (span[1] - span[0]) for s in share)
        update = f"{{'xaxis.range[0]': {lo}, 'xaxis.range[1]': {hi}}}"
    start = time.perf_counter()
    with page.expect_response(lambda r: "_dash-update-component" in r.url) as answer:
        page.evaluate(f"Plotly.relayout({GRAPH}, {update})")
    try:
        page.wait_for_function(f"{INFO} !== {before!r}", timeout=60_000)
    except Exception:  # noqa: BLE001 - report what the page shows, then stop
        raise RuntimeError(f"zoom to {share}: the page still says {before!r}; "
                           f"{answer.value.status} {answer.value.text()[:300]}") from None
    page.evaluate("new Promise(r => requestAnimationFrame(() => r()))")  # painted
    total = (time.perf_counter() - start) * 1e3
    answer.value.finished()
    timing = answer.value.request.timing
    return total, timing["responseEnd"] - timing["requestStart"]


def one_round(browser, run: Path, log_path: Path) -> dict[str, float | list[float]]:
    port = free_port()
    with log_path.open("wb") as log_file:  # a file, not a pipe nobody drains
        proc = subprocess.Popen([sys.executable, "-m", "profkit", "dashboard", str(run),
                                 "--port", str(port)], cwd=REPO, stdout=subprocess.DEVNULL,
                                stderr=log_file)
    try:
        base = f"http://127.0.0.1:{port}"
        # the server answers; nothing analyzed yet
        wait_for(base + "/_dash-layout", proc, log_path, timeout=120)
        url = f"{base}/run/{run_key(run.name, run.resolve())}"
        context = browser.new_context(viewport={"width": 1400, "height": 900})
        page = context.new_page()
        out: dict[str, float | list[float]] = {
            "overview cold": timed_load(page, url, OVERVIEW_READY),
            "overview warm": timed_load(page, url, OVERVIEW_READY),
            "timeline cold": timed_load(page, url + "/timeline", TIMELINE_READY),
            "timeline warm": timed_load(page, url + "/timeline", TIMELINE_READY)}
        out["zoom"] = [timed_zoom(page, share) for share in ZOOMS]
        context.close()
        return out
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def fresh_copy(run: Path, folder: Path) -> Path:
    """A copy of ``run`` without its ingest cache."""
    copy = folder / run.name
    shutil.copytree(run, copy, ignore=shutil.ignore_patterns(".profkit"))
    return copy


def drop_kept_analyses(run: Path) -> None:
    """Delete the dashboard's kept analyses of ``run``, not its ingest cache."""
    for kept in (run / ".profkit" / "cache").glob("result-*.data"):
        kept.unlink()


def report(run: Path, rows: list[tuple[str, list[dict]]]) -> None:
    print(f"Dashboard TTI of {run.name} (ms: request -> page drawn; zoom: relayout -> "
          "the server's window drawn; medians of each round's values)")
    heads = ["overview cold", "overview warm", "timeline cold", "timeline warm"]
    print(f"{'case':<18}" + "".join(f"{h:>15}" for h in heads) + f"{'zoom median':>13}"
          f"{'zoom max':>10}{'zoom out':>10}{'server':>8}")
    for name, rounds in rows:
        cells = [statistics.median(r[h] for r in rounds) for h in heads]
        zooms = [z for r in rounds for z, _ in r["zoom"]]
        zoom_out = [r["zoom"][-1][0] for r in rounds]
        server = [s for r in rounds for _, s in r["zoom"]]
        print(f"{name:<18}" + "".join(f"{c:>15.0f}" for c in cells)
              + f"{statistics.median(zooms):>13.0f}{max(zooms):>10.0f}"
              f"{statistics.median(zoom_out):>10.0f}{statistics.median(server):>8.0f}")
    print("(server: median ms of a zoom's request, sent to received)")
    for name, rounds in rows:
        for i, r in enumerate(rounds):
            print(f"  {name} round {i}: zooms " + ", ".join(f"{z:.0f} (server {s:.0f})"
                                                         for z, s in r["zoom"]) + " ms")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--run", type=Path, default=REPO / "samples" / "runs" / "stock_ddp")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args(argv)
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p, tempfile.TemporaryDirectory() as tmp:
        browser = p.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        log = Path(tmp) / "server.log"
        rows: dict[str, list[dict]] = {"nothing cached": [], "ingest cache": [],
                                       "result cache": []}
        for i in range(args.repeat):
            copy = fresh_copy(args.run, Path(tmp) / f"r{i}")
            rows["nothing cached"].append(one_round(browser, copy, log))
            drop_kept_analyses(copy)
            rows["ingest cache"].append(one_round(browser, copy, log))
            rows["result cache"].append(one_round(browser, copy, log))
        browser.close()
    report(args.run, list(rows.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
