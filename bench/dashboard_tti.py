"""Time to interactive of the dashboard's Overview and Timeline pages and the Timeline's zoom
latency, measured in a real browser, each figure printed beside its peer or its goal.

For each repetition: start a fresh `profkit dashboard RUN` server (nothing warmed: no
analysis in memory; like any `profkit dashboard RUN`, it starts analysing RUN as it starts),
open /run/<key> in a fresh headless-chromium context (empty browser cache) and time from the
request until the verdict is on screen, then until the three charts are drawn (Overview cold;
the verdict is also timed from the server's launch); load it again (warm: the analysis
cached on the server, the JS bundles in the browser). Then the Timeline the same way, until
its graph has rendered (cold: the events are read from the ingest cache the analysis wrote
and the lane tables of the ranks shown are built), and again (warm). Then zoom: each window
of ``ZOOMS`` is sent as a plotly relayout, and the time is taken from the relayout until the
server's answer is on screen (the event count and span text changed), ending with a zoom
back out to the whole run (autorange); the server's part is the answer's request, sent to
fully received (Resource Timing). The warm Overview's charts are also timed on the page's
own clock ("in page": from the navigation's start until they were inserted, see
:data:`DRAWN_JS`), which Playwright's polling notices only after the next long task.

Three cases, each on a fresh copy of the run (the run itself is never written to):
"nothing cached": the traces are parsed and analysed on the first request; "ingest cache":
the traces' Parquet ingest cache on disk (as after any earlier `profkit` command) but the
dashboard's kept analysis deleted; "result cache": both on disk, as after any earlier view
of the run: the analysis is read back (:mod:`profkit.datacodec`), the traces are not read.

The peers, measured in the same script: a cold `profkit analyze RUN --no-cache` of another
fresh copy (a fresh process, wall clock), alternating with the dashboard's rounds; and the
Runs page over ``--runs-root`` (cold, see bench/runs_page_tti.py) beside a cold `profkit
analyze --no-cache` of its first row's run. The goals: cold Overview (verdict on screen) no
later than the cold analyze + 2 s; warm Overview (charts drawn) within 1 s; a zoom's server
part within 0.5 s; the Runs page's first verdict in about one run's analysis.

By default each round's pages open in a fresh browser context: a browser that has never
opened the dashboard, which compiles its 8 MB of scripts (Plotly, AG Grid, React) on every
load (an incognito context keeps no compiled code). ``--returning-browser`` measures what a
user's everyday browser does instead: one browser profile on disk, in which the dashboard
(of another run, on the same port) has been opened three times before the rounds, so that
chromium has the scripts' compiled code; each round still starts a fresh server and loads
the run's pages for the first time. It leaves out the Runs page.

The large run of BENCHMARKS.md:

    python bench/make_big_run.py samples/runs/stock_ddp_stack BIG/run75 --ranks 2 \
        --target-mb 75
    python bench/dashboard_tti.py --run BIG/run75 [--repeat 2]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests" / "dashboard"))
sys.path.insert(0, str(REPO / "bench"))
from benchlib import machine_info  # noqa: E402
from conftest import CHROMIUM, CHROMIUM_ARGS, free_port  # noqa: E402
from profkit.dashboard.server.registry import run_key  # noqa: E402
from runs_page_tti import TOKEN, TOKEN_ENV, analyze_wall_s, answering, runs_page_round  # noqa: E402

VERDICT = "#verdict"
CHARTS = ("#rank-bars .main-svg", "#step-heatmap .main-svg", "#rank-detail .main-svg")
TIMELINE_READY = ("#tl-graph .main-svg",)
# Windows as shares of the run's span: a few steps, a tenth, a sliver; then the whole run.
ZOOMS = [(0.40, 0.42), (0.30, 0.40), (0.50, 0.5004), None]
INFO = "document.querySelector('#tl-info').textContent"
GRAPH = "document.querySelector('#tl-graph .js-plotly-plot')"
CASES = ("nothing cached", "ingest cache", "result cache")
VIEWPORT = {"width": 1400, "height": 900}
PRIMING_RUN = REPO / "samples" / "runs" / "zoo" / "compute"
GOALS = {"cold overview slack s": 2.0, "warm overview s": 1.0, "zoom server s": 0.5}


# Kept in each page from its start: the page clock (ms since navigation start) at which each
# of the Overview's charts first appeared, seen by a MutationObserver. Playwright's
# own wait polls on animation frames, so it notices an element only after the long task
# that follows its insertion (drawing the charts, ~0.3 s): the page clock says when it was
# there.
DRAWN_JS = "const __watched = " + json.dumps(CHARTS) + """;
window.__drawnMs = {};
const __look = () => { for (const s of __watched) {
  if (!(s in window.__drawnMs) && document.querySelector(s)) {
    window.__drawnMs[s] = performance.now();
  }
} };
new MutationObserver(__look).observe(document, {childList: true, subtree: true});
"""


def drawn_at(page, *stages) -> list[float]:
    """Seconds from the navigation's start (page clock) until each stage's selectors had all
    appeared (see :data:`DRAWN_JS`); call after :func:`timed_load`."""
    marks = page.evaluate("window.__drawnMs")
    return [max(marks[s] for s in selectors) / 1e3 for selectors in stages]


def timed_load(page, url: str, *stages) -> list[float]:
    """Seconds from the request until each stage's selectors are all on screen."""
    start = time.perf_counter()
    page.goto(url)
    out = []
    for selectors in stages:
        for selector in selectors:
            page.wait_for_selector(selector, timeout=300_000)
        out.append(time.perf_counter() - start)
    return out


def timed_wait(page, selectors) -> float:
    """Seconds from now until ``selectors`` are all on screen."""
    start = time.perf_counter()
    for selector in selectors:
        page.wait_for_selector(selector, timeout=300_000)
    return time.perf_counter() - start


def server_cpu_s(pid: int) -> float:
    """CPU seconds (user + system) the server process ``pid`` and every process below it
    have used so far: the live ones' own, and those of the ended ones their parents waited
    for (Linux /proc: utime, stime, cutime, cstime)."""
    from profkit.children import descendants

    ticks = 0
    for p in [pid, *descendants(pid)]:
        try:
            stat = Path(f"/proc/{p}/stat").read_text()
        except OSError:  # ended meanwhile: counted in its parent's waited-for time
            continue
        ticks += sum(int(x) for x in stat[stat.rfind(")") + 2:].split()[11:15])
    return ticks / os.sysconf("SC_CLK_TCK")


def timed_zoom(page, share: tuple[float, float] | None) -> tuple[float, float]:
    """Seconds from a relayout to ``share`` of the run's span (None: autorange) until the
    server's answer is drawn, and seconds of that answer's request (sent to fully
    received)."""
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
    total = time.perf_counter() - start
    answer.value.finished()
    timing = answer.value.request.timing
    return total, (timing["responseEnd"] - timing["requestStart"]) / 1e3


def one_round(browser, run: Path, log_path: Path, port: int | None = None) -> dict:
    """One server's pages and zooms over ``run`` (seconds; see the module doc). ``browser``:
    a browser (each round in a fresh context) or a persistent context (a returning browser:
    each round in a new page of it)."""
    launched = time.perf_counter()
    with dashboard(run, port or free_port(), log_path) as (url, pid):
        returning = not hasattr(browser, "new_context")
        context = browser if returning else browser.new_context(viewport=VIEWPORT)
        if not returning:
            context.add_init_script(DRAWN_JS)
        page = context.new_page()
        asked = time.perf_counter()
        # the printed address, with the token: a 303 that sets its cookie, then the page
        verdict, = timed_load(page, f"{url}?token={TOKEN}", (VERDICT,))
        cpu = server_cpu_s(pid)
        charts = verdict + timed_wait(page, CHARTS)
        out = {"overview verdict": verdict, "overview charts": charts,
               "overview verdict from launch": asked + verdict - launched,
               "server CPU s to verdict": cpu}
        out["warm verdict"], out["warm charts"] = timed_load(page, url, (VERDICT,), CHARTS)
        out["warm charts in page"], = drawn_at(page, CHARTS)
        out["timeline cold"], = timed_load(page, url + "/timeline", TIMELINE_READY)
        out["timeline warm"], = timed_load(page, url + "/timeline", TIMELINE_READY)
        out["zoom"] = [timed_zoom(page, share) for share in ZOOMS]
        page.close() if returning else context.close()
        return out


@contextlib.contextmanager
def dashboard(run: Path, port: int, log_path: Path):
    """The Overview URL of ``run`` on a fresh `profkit dashboard RUN --port PORT`, once the
    server answers, and the server's pid, while in the block."""
    with log_path.open("wb") as log_file:  # a file, not a pipe nobody drains
        proc = subprocess.Popen([sys.executable, "-m", "profkit", "dashboard", str(run),
                                 "--port", str(port)], cwd=REPO, env=TOKEN_ENV,
                                stdout=subprocess.DEVNULL,
                                stderr=log_file)
    try:
        base = f"http://127.0.0.1:{port}"
        # the server answers the first request a browser sends (an index page: its first
        # part answered before the pages and the analysis code are loaded, server/early.py)
        answering(base + "/", proc, log_path)
        yield f"{base}/run/{run_key(run.name, run.resolve())}", proc.pid
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def prime(context, run: Path, log_path: Path, port: int) -> None:
    """Open ``run``'s Overview and Timeline three times in ``context`` on ``port``, as a user
    who has used the dashboard before: chromium keeps the compiled code of a page's scripts
    from the third load of the same script on (the first loads only fetch and compile it)."""
    with dashboard(run, port, log_path) as (url, _):
        page = context.new_page()
        for i in range(3):
            timed_load(page, f"{url}?token={TOKEN}" if i == 0 else url, CHARTS)
            timed_load(page, url + "/timeline", TIMELINE_READY)
        page.close()


def fresh_copy(run: Path, folder: Path) -> Path:
    """A copy of ``run`` without its ingest cache."""
    copy = folder / run.name
    shutil.copytree(run, copy, ignore=shutil.ignore_patterns(".profkit"))
    return copy


def drop_kept_analyses(run: Path) -> None:
    """Delete the dashboard's kept analyses of ``run``, not its ingest cache."""
    for kept in (run / ".profkit" / "cache").glob("result-*.data"):
        kept.unlink()


def med(values) -> float:
    return statistics.median(values)


def load_average() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def pages_table(rows: dict[str, list[dict]]) -> None:
    heads = ["overview verdict from launch", "overview verdict", "server CPU s to verdict",
             "overview charts",
             "warm charts", "warm charts in page", "timeline cold", "timeline warm"]
    print("| case | " + " | ".join(heads) + " | zoom median | zoom max | zoom server max |")
    print("| --- |" + " ---: |" * (len(heads) + 3))
    for name, rounds in rows.items():
        zooms = [z for r in rounds for z, _ in r["zoom"]]
        server = [s for r in rounds for _, s in r["zoom"]]
        cells = [med(r[h] for r in rounds) for h in heads] + [med(zooms), max(zooms), max(server)]
        print(f"| {name} | " + " | ".join(f"{c:.2f}" for c in cells) + " |")
    for name, rounds in rows.items():
        for i, r in enumerate(rounds):
            print(f"  {name} round {i}: zooms " + ", ".join(
                f"{z:.2f} (server {s:.2f})" for z, s in r["zoom"]) + " s")


def goals_table(rows: dict[str, list[dict]], analyze_s: list[float], runs: list[dict]) -> None:
    cold = rows["nothing cached"]
    peer = med(analyze_s)
    warm = max(r["warm charts"] for rs in rows.values() for r in rs)
    warm_page = max(r["warm charts in page"] for rs in rows.values() for r in rs)
    server = max(s for rs in rows.values() for r in rs for _, s in r["zoom"])
    lines = [
        ("cold Overview: request -> verdict", med(r["overview verdict"] for r in cold),
         f"cold analyze {peer:.2f} + 2 = {peer + 2:.2f}", peer + GOALS["cold overview slack s"]),
        ("cold Overview: server launch -> verdict",
         med(r["overview verdict from launch"] for r in cold),
         f"cold analyze {peer:.2f} + 2 = {peer + 2:.2f}", peer + GOALS["cold overview slack s"]),
        ("cold Overview: request -> charts", med(r["overview charts"] for r in cold), "-", None),
        ("cold Overview: server's CPU s (all its processes) to the verdict",
         med(r["server CPU s to verdict"] for r in cold), "-", None),
        ("warm Overview: request -> charts (max)", warm, "1.00", GOALS["warm overview s"]),
        ("warm Overview: navigation start -> charts, page clock (max)", warm_page, "1.00",
         GOALS["warm overview s"]),
        ("zoom: server part (max)", server, "0.50", GOALS["zoom server s"]),
    ]
    if runs:
        first, one = med(r["first row"] for r in runs), med(r["first run analyze"] for r in runs)
        lines += [(f"Runs page ({runs[0]['rows']} runs): first row's verdict", first,
                   f"one run's cold analyze {one:.2f}", None),
                  ("Runs page: every row", med(r["all rows"] for r in runs), "-", None)]
    print("| figure | measured s (median) | peer or goal s | met |")
    print("| --- | ---: | --- | --- |")
    for name, value, peer_text, limit in lines:
        met = "-" if limit is None else ("yes" if value <= limit else "no")
        print(f"| {name} | {value:.2f} | {peer_text} | {met} |")
    print("(cold analyze: `profkit analyze RUN --no-cache`, a fresh process, medians of "
          + ", ".join(f"{s:.2f}" for s in analyze_s) + " s)")


def margins_table(cold: list[dict], analyze_s: list[float], analyze_cpu_s: list[float]) -> None:
    """Each round's cold launch -> verdict beside the cold analyze of the same round: the
    ratio, and the margin to the goal (analyze + 2 s; positive: met by that much)."""
    slack = GOALS["cold overview slack s"]
    print("\n| round | launch -> verdict s | cold analyze s | ratio | margin to goal s "
          "| server CPU s to verdict | analyze CPU s |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    pairs = list(zip(cold, analyze_s, analyze_cpu_s or [float("nan")] * len(cold)))
    for i, (r, a, a_cpu) in enumerate(pairs):
        v = r["overview verdict from launch"]
        print(f"| {i} | {v:.2f} | {a:.2f} | {v / a:.2f} | {a + slack - v:+.2f} "
              f"| {r['server CPU s to verdict']:.2f} | {a_cpu:.2f} |")
    print(f"| median | {med(r['overview verdict from launch'] for r, _, _ in pairs):.2f} "
          f"| {med(a for _, a, _ in pairs):.2f} "
          f"| {med(r['overview verdict from launch'] / a for r, a, _ in pairs):.2f} "
          f"| {med(a + slack - r['overview verdict from launch'] for r, a, _ in pairs):+.2f} "
          f"| {med(r['server CPU s to verdict'] for r, _, _ in pairs):.2f} "
          f"| {med(c for _, _, c in pairs):.2f} |")


def report(run: Path, rows: dict, analyze_s: list[float], runs: list[dict],
           loads: list[str], returning: bool = False,
           analyze_cpu_s: list[float] | None = None) -> None:
    m = machine_info()
    print(f"## Dashboard TTI of {run.name}" + (" (a returning browser)" if returning else "")
          + "\n")
    print(f"Machine: {m['cpu_model']}, {m['cpus']} CPUs, {m['mem_gib']:.0f} GiB, "
          f"{platform.platform()}, Python {m['python']}, {m['date']}; load average "
          f"(1, 5, 15 min) at start {loads[0]}, at end {loads[-1]}.\n")
    goals_table(rows, analyze_s, runs)
    margins_table(rows["nothing cached"], analyze_s, analyze_cpu_s or [])
    print("\nEvery page figure (s, request -> drawn; medians of the rounds):\n")
    pages_table(rows)
    for i, r in enumerate(runs):
        print(f"  Runs page round {i}: first row ({r['first run']}) {r['first row']:.2f} s, "
              f"its cold analyze {r['first run analyze']:.2f} s, every row {r['all rows']:.1f} s")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--run", type=Path, default=REPO / "samples" / "runs" / "stock_ddp")
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--runs-root", type=Path, default=REPO / "samples" / "runs",
                        help="the Runs page's root (none: --runs-root '')")
    parser.add_argument("--returning-browser", action="store_true",
                        help="measure in a browser that has opened the dashboard before (see "
                             "the module doc); leaves out the Runs page")
    args = parser.parse_args(argv)
    if args.returning_browser:
        args.runs_root = Path("")
    from playwright.sync_api import sync_playwright

    loads = [load_average()]
    rows: dict[str, list[dict]] = {case: [] for case in CASES}
    analyze_s: list[float] = []
    analyze_cpu_s: list[float] = []  # its processes' CPU seconds
    runs: list[dict] = []
    with sync_playwright() as p, tempfile.TemporaryDirectory() as tmp:
        log = Path(tmp) / "server.log"
        port = free_port() if args.returning_browser else None
        if port:
            browser = p.chromium.launch_persistent_context(
                Path(tmp) / "profile", executable_path=str(CHROMIUM), args=CHROMIUM_ARGS,
                viewport=VIEWPORT)
            browser.add_init_script(DRAWN_JS)
            prime(browser, fresh_copy(PRIMING_RUN, Path(tmp) / "priming"), log, port)
        else:
            browser = p.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        for i in range(args.repeat):
            def analyze(i=i):
                before = resource.getrusage(resource.RUSAGE_CHILDREN)
                analyze_s.append(analyze_wall_s(fresh_copy(args.run, Path(tmp) / f"a{i}")))
                after = resource.getrusage(resource.RUSAGE_CHILDREN)
                analyze_cpu_s.append(after.ru_utime + after.ru_stime - before.ru_utime
                                     - before.ru_stime)
            if i % 2 == 0:  # alternate which goes first
                analyze()
            copy = fresh_copy(args.run, Path(tmp) / f"r{i}")
            rows["nothing cached"].append(one_round(browser, copy, log, port))
            drop_kept_analyses(copy)
            rows["ingest cache"].append(one_round(browser, copy, log, port))
            rows["result cache"].append(one_round(browser, copy, log, port))
            if i % 2 == 1:
                analyze()
            shutil.rmtree(Path(tmp) / f"a{i}", ignore_errors=True)
            shutil.rmtree(Path(tmp) / f"r{i}", ignore_errors=True)
            if str(args.runs_root) not in ("", "."):
                with tempfile.TemporaryDirectory() as runs_tmp:
                    runs.append(runs_page_round(browser, args.runs_root, Path(runs_tmp)))
            loads.append(load_average())
        browser.close()
    report(args.run, rows, analyze_s, runs, loads, args.returning_browser, analyze_cpu_s)
    return 0


if __name__ == "__main__":
    sys.exit(main())
