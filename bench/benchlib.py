"""The measuring code the benchmarks share: each measurement a fresh child process, timed
by its parent, its memory the summed RSS of its process tree (sampled), and the machine's
other load watched; plus the run files, the HTA virtualenv and the machine description.
See ingest_bench.py's docstring for what each number means."""

from __future__ import annotations

import datetime as _dt
import json
import os
import platform
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
DEFAULT_HTA_VENV = HERE / ".venv-hta"
MARK = "@@BENCH@@"
MIB = 1024 * 1024

# Opening of every child program (run with -c; argv[1] is a JSON blob of its arguments).
CHILD_PRELUDE = r"""
import json, os, sys, time
ARGS = json.loads(sys.argv[1])
def report(**kw):
    sys.stdout.write("\n@@BENCH@@" + json.dumps(kw) + "\n")
    sys.stdout.flush()
"""

# --------------------------------------------------------------------------------------------
# process-tree memory sampling


def _proc_table() -> dict[int, int]:
    """pid -> ppid for every process we can see."""
    out = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as fh:
                data = fh.read()
        except OSError:
            continue
        # comm may hold spaces / parens: ppid is the 2nd field after the last ')'
        rest = data[data.rfind(b")") + 2:].split()
        try:
            out[int(name)] = int(rest[1])
        except (IndexError, ValueError):
            pass
    return out


def _descendants(root: int) -> list[int]:
    table = _proc_table()
    kids: dict[int, list[int]] = {}
    for pid, ppid in table.items():
        kids.setdefault(ppid, []).append(pid)
    out, todo = [], [root]
    while todo:
        p = todo.pop()
        out.append(p)
        todo.extend(kids.get(p, ()))
    return out


_PAGE_KIB = os.sysconf("SC_PAGE_SIZE") // 1024


def _rss_kib(pid: int) -> int:
    """Resident set size from /proc/PID/statm (cheap: ~10 us, vs ~6 ms for smaps_rollup's PSS
    of a 1.5 GB process, which would steal a good part of a core at 20 Hz)."""
    try:
        with open(f"/proc/{pid}/statm", "rb") as fh:
            return int(fh.read().split()[1]) * _PAGE_KIB
    except (OSError, ValueError, IndexError):
        return 0


def _cpu_busy_s() -> float:
    """Machine-wide busy CPU seconds so far (all cores), from /proc/stat."""
    with open("/proc/stat") as fh:
        f = fh.readline().split()[1:]
    v = [int(x) for x in f]
    idle = v[3] + (v[4] if len(v) > 4 else 0)
    return (sum(v[:8]) - idle) / os.sysconf("SC_CLK_TCK")


def wait_for_quiet(max_wait: float, threshold: float, log) -> float:
    """Wait (up to max_wait s) until other work on the machine uses < threshold cores.

    Returns the last measured background load (cores)."""
    t_end = time.perf_counter() + max_wait
    warned = False
    while True:
        c0, w0, s0 = _cpu_busy_s(), time.perf_counter(), sum(os.times()[:2])
        time.sleep(1.0)
        busy = (_cpu_busy_s() - c0 - (sum(os.times()[:2]) - s0)) / (time.perf_counter() - w0)
        if busy < threshold or time.perf_counter() > t_end:
            if warned and busy >= threshold:
                log(f"  (machine still busy: {busy:.2f} cores used by other processes; going on)")
            return busy
        if not warned:
            log(f"  (waiting for other work to settle: {busy:.2f} cores busy)")
            warned = True


class TreeSampler(threading.Thread):
    def __init__(self, root: int, interval: float):
        super().__init__(daemon=True)
        self.root, self.interval = root, interval
        self.peak_kib = 0
        self.max_procs = 0
        self._halt = threading.Event()

    def run(self):
        while not self._halt.is_set():
            pids = _descendants(self.root)
            total = sum(_rss_kib(p) for p in pids)
            self.peak_kib = max(self.peak_kib, total)
            self.max_procs = max(self.max_procs, len(pids))
            self._halt.wait(self.interval)

    def stop(self):
        self._halt.set()
        self.join()


_CURRENT: set[int] = set()


def kill_current(signum, frame):
    for root in list(_CURRENT):
        for p in reversed(_descendants(root)):
            try:
                os.kill(p, signal.SIGKILL)
            except OSError:
                pass
    raise SystemExit(128 + signum)


class Measurement:
    def __init__(self, **kw):
        self.__dict__.update(kw)


def run_child(argv: list[str], timeout: float, sample_s: float, env: dict | None = None,
              cwd: str | None = None) -> Measurement:
    """Run argv as a fresh process; wall (parent view), peak tree PSS, ru_maxrss, result."""
    out_f = tempfile.TemporaryFile()
    err_f = tempfile.TemporaryFile()
    busy0, self0 = _cpu_busy_s(), sum(os.times()[:2])
    t0 = time.perf_counter()
    proc = subprocess.Popen(argv, stdout=out_f, stderr=err_f, env=env, cwd=cwd)
    _CURRENT.add(proc.pid)
    sampler = TreeSampler(proc.pid, sample_s)
    sampler.start()
    deadline = t0 + timeout
    status, ru = None, None
    while True:
        pid, st, rusage = os.wait4(proc.pid, os.WNOHANG)
        if pid == proc.pid:
            status, ru = st, rusage
            break
        if time.perf_counter() > deadline:
            for p in reversed(_descendants(proc.pid)):
                try:
                    os.kill(p, 9)
                except OSError:
                    pass
            _, status, ru = os.wait4(proc.pid, 0)
            break
        time.sleep(0.005)
    t1 = time.perf_counter()
    _CURRENT.discard(proc.pid)
    proc.returncode = os.waitstatus_to_exitcode(status)  # keep Popen from waiting again
    sampler.stop()
    child_cpu = (ru.ru_utime + ru.ru_stime) if ru else 0.0
    other = _cpu_busy_s() - busy0 - child_cpu - (sum(os.times()[:2]) - self0)
    bg_cores = max(0.0, other / max(t1 - t0, 1e-9))
    out_f.seek(0)
    err_f.seek(0)
    out = out_f.read().decode(errors="replace")
    err = err_f.read().decode(errors="replace")
    result = None
    for line in out.splitlines():
        if line.startswith(MARK):
            result = json.loads(line[len(MARK):])
    timed_out = t1 > deadline
    maxrss_kib = ru.ru_maxrss if ru else 0
    return Measurement(
        rc=proc.returncode, proc_s=t1 - t0, result=result, stdout=out, stderr=err,
        timed_out=timed_out, maxrss_mib=maxrss_kib / 1024,
        peak_mib=max(sampler.peak_kib, maxrss_kib) / 1024, max_procs=sampler.max_procs,
        cpu_s=child_cpu, bg_cores=bg_cores,
    )


def err_text(m: Measurement) -> str:
    if m.timed_out:
        return "timed out"
    lines = [ln for ln in (m.stderr + "\n" + m.stdout).splitlines() if ln.strip()]
    # the last exception line is the most useful one-liner
    exc = [ln for ln in lines if ("Error" in ln or "Exception" in ln) and not ln.startswith(" ")]
    text = (exc[-1] if exc else (lines[-1] if lines else f"exit status {m.rc}")).strip()
    return text[:300]


class Row:
    def __init__(self, key: str, label: str):
        self.key, self.label = key, label
        self.walls: list[float] = []
        self.procs: list[float] = []
        self.peaks: list[float] = []
        self.maxrss: list[float] = []
        self.cpus: list[float] = []
        self.bgs: list[float] = []
        self.error: str | None = None
        self.extra: dict = {}
        self.note = ""

    @property
    def ok(self) -> bool:
        return self.error is None and bool(self.walls)

    @property
    def wall(self) -> float | None:
        return statistics.median(self.walls) if self.walls else None

    @property
    def proc(self) -> float | None:
        return statistics.median(self.procs) if self.procs else None

    @property
    def peak(self) -> float | None:
        return max(self.peaks) if self.peaks else None

    @property
    def best(self) -> float | None:
        return min(self.walls) if self.walls else None

    @property
    def bg(self) -> float | None:
        return max(self.bgs) if self.bgs else None

    @property
    def one_proc(self) -> float | None:
        return max(self.maxrss) if self.maxrss else None

    def to_dict(self) -> dict:
        return {
            "label": self.label, "ok": self.ok, "error": self.error, "wall_s": self.wall,
            "walls_s": self.walls, "best_s": self.best, "proc_s": self.proc,
            "procs_s": self.procs, "cpu_s": self.cpus, "bg_cores": self.bgs, "peak_mib": self.peak,
            "one_proc_mib": self.one_proc, "note": self.note, **self.extra,
        }


# The floor's parse of one rank file (source text for the child programs): read it, gunzip
# it when it is gzip, orjson.loads it with the garbage collector off; returns its events.
FLOOR_PARSE = r"""
import gc, gzip, orjson
from concurrent.futures import ProcessPoolExecutor
def parse(path):
    gc.disable()
    with open(path, "rb") as fh:
        raw = fh.read()
    if path.endswith(".gz"):
        raw = gzip.decompress(raw)
    return len(orjson.loads(raw)["traceEvents"])
"""

QUIET = {"wait": 60.0, "threshold": 0.25}


def measure(row: Row, argv: list[str], repeat: int, timeout: float, sample_s: float,
            wall_from_child: bool = True, env: dict | None = None, log=print) -> Row:
    for i in range(repeat):
        if QUIET["wait"] > 0:
            wait_for_quiet(QUIET["wait"], QUIET["threshold"], log)
        m = run_child(argv, timeout, sample_s, env=env)
        ok = m.rc == 0 and (m.result is not None or not wall_from_child)
        if not ok:
            row.error = err_text(m)
            log(f"  {row.label}: FAILED ({row.error})")
            if os.environ.get("BENCH_DEBUG"):
                log(m.stderr[-4000:])
            return row
        wall = m.result["wall"] if wall_from_child else m.proc_s
        row.walls.append(wall)
        row.procs.append(m.proc_s)
        row.peaks.append(m.peak_mib)
        row.maxrss.append(m.maxrss_mib)
        row.cpus.append(m.cpu_s)
        row.bgs.append(m.bg_cores)
        if m.result:
            row.extra.update({k: v for k, v in m.result.items() if k != "wall"})
        log(f"  {row.label} [{i + 1}/{repeat}]: {wall:.2f} s (process {m.proc_s:.2f} s), "
            f"peak {m.peak_mib:,.0f} MiB (1-proc {m.maxrss_mib:,.0f} MiB, {m.max_procs} procs), "
            f"cpu {m.cpu_s:.1f} s, other load {m.bg_cores:.2f} cores")
    return row


# --------------------------------------------------------------------------------------------
# setup helpers


def rank_files(run_dir: Path) -> list[Path]:
    """The rank traces of a run folder: *.json / *.json.gz at top level or under traces/."""
    found = []
    for d in (run_dir, run_dir / "traces"):
        if d.is_dir():
            found += [p for p in d.iterdir() if p.is_file() and p.name != "run.json"
                      and (p.name.endswith(".json") or p.name.endswith(".json.gz"))]
    return sorted(found)


def json_bytes(path: Path) -> int:
    if path.name.endswith(".gz"):
        # ISIZE trailer = uncompressed size mod 2**32; stream to be exact for big files
        import gzip
        n = 0
        with gzip.open(path, "rb") as fh:
            while chunk := fh.read(1 << 24):
                n += len(chunk)
        return n
    return path.stat().st_size


def count_events(files: list[Path], py: str, timeout: float) -> list[int]:
    code = CHILD_PRELUDE + r"""
import gzip, orjson
out = []
for p in ARGS["files"]:
    raw = open(p, "rb").read()
    if p.endswith(".gz"):
        raw = gzip.decompress(raw)
    out.append(len(orjson.loads(raw)["traceEvents"]))
report(wall=0, counts=out)
"""
    m = run_child([py, "-c", code, json.dumps({"files": [str(f) for f in files]})], timeout, 1.0)
    return m.result["counts"] if m.result else []


def ensure_hta_venv(venv: Path, log=print) -> tuple[Path | None, str]:
    """Return (python, version) of a venv with HTA and pandas<3, creating it if missing."""
    py = venv / "bin" / "python"
    probe = ("import hta, pandas, importlib.metadata as m; "
             "print(m.version('holistictraceanalysis'), pandas.__version__)")
    if py.exists():
        r = subprocess.run([str(py), "-c", probe], capture_output=True, text=True)
        if r.returncode == 0:
            return py, r.stdout.strip()
    base = shutil.which("python3.11") or sys.executable
    log(f"HTA venv not usable at {venv}: creating it (one time, ~1 min):\n"
        f"  {base} -m venv {venv} && {venv}/bin/pip install holistictraceanalysis 'pandas<3'")
    try:
        subprocess.run([base, "-m", "venv", str(venv)], check=True)
        subprocess.run([str(py), "-m", "pip", "install", "-q", "holistictraceanalysis",
                        "pandas<3"], check=True)
    except (subprocess.CalledProcessError, OSError) as exc:
        return None, f"could not set up HTA venv: {exc}"
    r = subprocess.run([str(py), "-c", probe], capture_output=True, text=True)
    if r.returncode != 0:
        return None, "HTA venv import failed: " + (r.stderr.strip().splitlines() or ["?"])[-1]
    return py, r.stdout.strip()


def hta_dir_for(files: list[Path], work: Path) -> Path:
    """A folder holding only the rank traces (hard links, else symlinks) for HTA."""
    d = work / "hta_trace_dir"
    if d.exists():
        shutil.rmtree(d)
    d.mkdir(parents=True)
    for f in files:
        dst = d / f.name
        try:
            os.link(f, dst)
        except OSError:
            os.symlink(f.resolve(), dst)
    return d


def profkit_python_ok(py: str) -> str | None:
    r = subprocess.run([py, "-c", "import profkit; profkit.load_run"], capture_output=True,
                       text=True)
    if r.returncode != 0:
        return (r.stderr.strip().splitlines() or ["profkit not importable"])[-1]
    return None


COMPILE_PROFKIT = """
import compileall, importlib.util, sys
for name in ("profkit", "profkit.analyzers", "profkit.collectors", "profkit.dashboard"):
    spec = importlib.util.find_spec(name)
    if spec is not None and spec.submodule_search_locations:
        for folder in spec.submodule_search_locations:
            compileall.compile_dir(folder, quiet=2)
"""


def compile_profkit(py: str) -> str:
    """Write the bytecode of ``py``'s profkit, as ``pip install`` of a wheel does (peers
    installed with pip have theirs). With PYTHONDONTWRITEBYTECODE set, an editable checkout
    never writes it, and every command would compile ~300 modules again (~0.13 s on the
    2-vCPU VM). Returns a line for the report."""
    r = subprocess.run([py, "-c", COMPILE_PROFKIT], capture_output=True, text=True)
    state = "compiled" if r.returncode == 0 else f"not compiled ({r.stderr.strip()[-200:]})"
    return f"profkit bytecode: {state} (as a pip install does)"


def machine_info() -> dict:
    cpu = "?"
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem_gib = None
    try:
        for line in open("/proc/meminfo"):
            if line.startswith("MemTotal:"):
                mem_gib = int(line.split()[1]) / 1024 / 1024
    except OSError:
        pass
    return {"cpus": os.cpu_count(), "cpu_model": cpu, "mem_gib": mem_gib,
            "os": platform.platform(), "python": platform.python_version(),
            "date": _dt.datetime.now().astimezone().isoformat(timespec="minutes")}


# --------------------------------------------------------------------------------------------
# table
