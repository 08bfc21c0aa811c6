"""Component ids: the one place they are spelled, so layouts, callbacks and the browser tests
agree."""

# shell
URL = "url"
PAGE_LOADING = "page-loading"
NAV = "nav"

# runs page
RUNS_TABLE = "runs-table"
RUNS_GRID = "runs-grid"
RUNS_VIEW = "runs-view"
RUNS_POLL = "runs-poll"
RUNS_PROGRESS = "runs-progress"

# shared by the run pages
RUN_STORE = "run-store"  # {"run": key}: the page's run, never data
NOT_FOUND = "not-found"
RUN_NOTE = "run-note"  # the banner: run status, ranks analysed of the world, skipped files

# overview
VERDICT = "verdict"
FINDINGS = "findings"
STRAGGLER_CALLOUT = "straggler-callout"
BIGGEST_WIN = "biggest-win"  # the Overview's first line: the largest estimated saving
COMBINED_SAVING = "combined-saving"  # one estimate where the findings' savings share time
RANK_BARS = "rank-bars"
STEP_HEATMAP = "step-heatmap"
RANK_DETAIL = "rank-detail"
SELECTED_RANK = "selected-rank"
OVERVIEW_CHARTS = "overview-charts"  # {"run": key}: asks for the charts once the page is shown
RANK_BARS_SLOT = "rank-bars-slot"  # where each chart goes when it arrives
STEP_HEATMAP_SLOT = "step-heatmap-slot"
RANK_DETAIL_SLOT = "rank-detail-slot"

# timeline
TL_RANKS = "tl-ranks"  # the ranks drawn, in order (the straggler first)
TL_CPU = "tl-cpu"  # ["cpu"] draws the CPU threads too
TL_GRAPH = "tl-graph"
TL_INFO = "tl-info"
TL_NOTE = "tl-note"  # what the NVML rows can and cannot tell about the window
TL_SEARCH = "tl-search"  # search by name
TL_FOUND = "tl-found"  # its matches: counts and total time
TL_ZOOM = "tl-zoom"  # the graph's relayouts that are about the x axis (kept in the browser)
TL_WINDOW = "tl-window"  # [t0_ms, t1_ms] drawn, None for every step: kept across rank changes
TL_EVENT = "tl-event"  # the clicked event's details, beside the figure
TL_DOWNLOAD_BTN = "tl-download-btn"
TL_DOWNLOAD = "tl-download"

# kernels & ops
K_CLASS = "k-class"
K_CHART = "k-chart"
K_KERNELS = "k-kernels"
K_OPS = "k-ops"
K_SHORT = "k-short"
K_LAUNCHES = "k-launches"
K_ROOFLINE = "k-roofline"

# communication
C_TABLE = "c-table"
C_WAITS = "c-waits"
C_SKEW = "c-skew"
C_DETAIL = "c-detail"
C_NONE = "c-none"
C_STRAGGLERS = "c-stragglers"

# counters
N_METRICS = "n-metrics"
N_GRAPH = "n-graph"
N_SUMMARY = "n-summary"
N_NONE = "n-none"  # the line saying the run has no NVML samples

# memory
M_GRAPH = "m-graph"
M_NONE = "m-none"  # the line saying the run has no memory events
M_RANKS = "m-ranks"
M_LIVE = "m-live"  # what is live at the peak, or the line saying it is not available
M_TILE = "m-tile"  # the Overview's peak-memory tile
INF_TILE = "inf-tile"  # the Overview's inference section (runs with inference phases)

# tables
TABLES_BODY = "tables-body"
TABLES_SCROLLED = "tables-scrolled"

# compare
CMP_BASE = "cmp-base"
CMP_NEW = "cmp-new"
CMP_VERDICT = "cmp-verdict"
CMP_PARTS = "cmp-parts"
CMP_KERNELS = "cmp-kernels"
CMP_OPS = "cmp-ops"
RANK_TABLE_LINK = "rank-table-link"
