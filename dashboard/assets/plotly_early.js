// plotly.js (4.8 MB) is not one of the page's blocking scripts (dashboard/app.py,
// _load_plotly_after_first_paint): a browser without its compiled code spent ~0.5-0.8 s
// running it before it drew anything, the verdict included. Here it is fetched and run once
// a page with charts is painted, while the server draws the charts (which need it).
// Fetched from the start (a preload), it ran right after that paint: a long task that kept
// the verdict's frame from being seen for ~0.8 s.
//
// Until it has run, window.Plotly is a promise of it: dcc.Graph waits on
// Promise.resolve(window.Plotly || <load it itself>), so a chart that arrives first waits
// for this load instead of starting a second one; plotly.js replaces the promise with
// itself when it runs. Should the load fail, the promise is dropped and dcc.Graph's own
// loader is used.
(function () {
    if (window.Plotly) { return; }
    // Loaded anyway this long after the start (a page that never draws content): not
    // sooner, as it would run while the first view is awaited and hold up its drawing
    const FALLBACK_MS = 10000;
    let start;
    const loaded = new Promise((resolve) => { start = resolve; }).then((url) => new Promise(
        (resolve) => {
            if (window.Plotly !== loaded) { resolve(); return; }  // here already: not twice
            const script = document.createElement("script");
            script.src = url;
            script.async = true;
            script.onload = () => resolve();
            script.onerror = () => {  // dcc.Graph loads it itself (window.Plotly unset)
                if (window.Plotly === loaded) { window.Plotly = undefined; }
                resolve();
            };
            document.head.appendChild(script);
        }));
    window.Plotly = loaded;
    const url = () => {
        if (window._dashPlotlyJSURL) { return window._dashPlotlyJSURL; }
        const config = document.getElementById("_dash-config");
        const prefix = config ? JSON.parse(config.textContent).requests_pathname_prefix : "/";
        return prefix + "_dash-component-suites/plotly/package_data/plotly.min.js";
    };
    let begun = false;
    const begin = () => {
        if (begun) { return; }
        begun = true;
        watcher.disconnect();
        start(url());
    };
    // a page with a chart drawn (a chart, or the Overview's slots for its charts, which
    // come in a second request): load it after that frame is painted. A page without
    // charts (the Runs page) does not run it.
    const drawn = () => document.querySelector("#_pages_content .chart-slot, #_pages_content .dash-graph");
    const watcher = new MutationObserver(() => {
        if (drawn()) { requestAnimationFrame(() => setTimeout(begin, 0)); }
    });
    document.addEventListener("DOMContentLoaded", () => {
        watcher.observe(document.body, {childList: true, subtree: true});
        setTimeout(begin, FALLBACK_MS);
    });
})();
