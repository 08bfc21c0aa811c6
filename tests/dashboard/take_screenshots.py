"""Screenshots of the dashboard's pages for the docs: ``docs/img/<page>.png``, each page of
``samples/runs/zoo/straggler`` (Compare: zoo/balanced -> zoo/straggler; the timeline with an
all_reduce clicked) in headless chromium.

    python tests/dashboard/take_screenshots.py [--out docs/img]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))
from profkit.dashboard.server.registry import run_key  # noqa: E402

from tests.dashboard.conftest import CHROMIUM, CHROMIUM_ARGS, free_port, wait_for  # noqa: E402

RUNS = REPO / "samples" / "runs"
WIDTH, HEIGHT = 1280, 860
TALL = {"overview": 1560, "communication": 1100, "timeline": 1000}  # charts below the fold
# The timeline with an event clicked: the longest all_reduce, its details beside the figure.
CLICK_BAR_JS = """() => {
  const g = document.querySelector('#tl-graph .js-plotly-plot');
  const t = g._fullData.find(d => d.type === 'bar' && d.name === 'communication');
  let best = 0;
  t.x.forEach((w, i) => { if (w > t.x[best]) best = i; });
  const xa = g._fullLayout.xaxis, ya = g._fullLayout.yaxis, box = g.getBoundingClientRect();
  return {x: box.left + xa._offset + xa.l2p(t.base[best] + t.x[best] / 2),
          y: box.top + ya._offset + ya.l2p(t.y[best])};
}"""


# The Runs grid is drawn when every row on screen has its verdict (or its error). The page
# analyses the runs in the grid's order, the first rows first: zoo/straggler's row, ~75th of
# the 78 sample runs by name, comes last, so waiting for it (as this script did) ran out of
# time on a busy machine; the screenshot shows the first rows anyway.
ROWS_ON_SCREEN_DONE_JS = """() => {
  const rows = [...document.querySelectorAll('.ag-center-cols-container .ag-row')].filter(r => {
    const box = r.getBoundingClientRect();
    return box.bottom > 0 && box.top < window.innerHeight;
  });
  return rows.length > 0 && rows.every(r => r.classList.contains('run-done')
                                         || r.classList.contains('run-failed'));
}"""


def pages(straggler: str, balanced: str) -> dict[str, tuple[str, str]]:
    """name -> (path, what shows the page is drawn: a selector, or a function of the page
    that returns true)."""
    run = f"/run/{straggler}"
    return {
        "runs": ("/", ROWS_ON_SCREEN_DONE_JS),
        "overview": (run, "#rank-detail .main-svg"),
        "timeline": (run + "/timeline", "#tl-graph .main-svg"),
        "kernels": (run + "/kernels", "#k-chart .main-svg"),
        "communication": (run + "/comms", "#c-skew .main-svg"),
        "counters": (run + "/counters", "#n-graph .main-svg"),
        "compare": (f"/compare?base={balanced}&new={straggler}", "#cmp-parts .main-svg"),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, default=REPO / "docs" / "img")
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    from playwright.sync_api import sync_playwright

    port = free_port()
    log_path = args.out / ".server.log"
    with log_path.open("wb") as log_file:
        proc = subprocess.Popen([sys.executable, "-m", "profkit", "dashboard", "--root",
                                 str(RUNS), "--port", str(port), "--no-token"], cwd=REPO,
                                stdout=subprocess.DEVNULL, stderr=log_file)
    base = f"http://127.0.0.1:{port}"
    straggler = run_key("zoo/straggler", (RUNS / "zoo" / "straggler").resolve())
    balanced = run_key("zoo/balanced", (RUNS / "zoo" / "balanced").resolve())
    try:
        wait_for(base + "/", proc, log_path)
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
            page = browser.new_page(viewport={"width": WIDTH, "height": HEIGHT})
            for name, (path, ready) in pages(straggler, balanced).items():
                page.set_viewport_size({"width": WIDTH, "height": TALL.get(name, HEIGHT)})
                page.goto(base + path)
                if ready.startswith("() =>"):
                    page.wait_for_function(ready, timeout=300_000, polling=500)
                else:
                    page.wait_for_selector(ready, timeout=120_000)
                page.wait_for_timeout(1200)  # charts settle (responsive resize)
                if name == "timeline":
                    bar = page.evaluate(CLICK_BAR_JS)
                    page.mouse.click(bar["x"], bar["y"])
                    page.wait_for_selector("#tl-event .tl-event-name", timeout=60_000)
                    page.mouse.move(bar["x"], bar["y"])  # and its hover label
                    page.wait_for_timeout(600)
                target = args.out / f"{name}.png"
                page.screenshot(path=str(target), full_page=False)
                print(f"{target}: {target.stat().st_size // 1024} KB")
            browser.close()
    finally:
        proc.terminate()
        proc.wait(timeout=10)
        log_path.unlink(missing_ok=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
