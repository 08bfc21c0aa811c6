"""``profkit ncu``'s capture side: rerun a command under Nsight Compute (``ncu``), limited
to the kernels an analysis named, and keep what it measured in the run directory.

``RUN/ncu/`` appears whole or not at all (a temporary folder renamed into place): a failed,
refused or interrupted measurement leaves the run as it was, and only an earlier ``ncu/``
folder is ever replaced; no other file of the run is touched::

    report.ncu-rep   ncu's own report (Nsight Compute's GUI, or ncu --import)
    counters.csv     one row per measured launch (profkit.trace.ncu.COLUMNS, units in names)
    ncu.json         what was asked and answered: command, kernels, filter, metrics, timings
    ncu.log          ncu's own messages

The command runs with ``PROFKIT_PROFILE_OFF=1``: a ``profkit.profile()`` inside it records
nothing, so that rerunning the job never writes over the run it came from (and the
profiler's CUPTI session does not compete with ncu's).

Standard library only (no pandas): the table is written with :mod:`csv`.
"""

from __future__ import annotations

import glob
import json
import logging
import os
import shlex
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from profkit.collectors.collector_errors import NcuError

from profkit.atomic import atomic_dir
from profkit.classify.kernelkey import function_name, kernels_regex, match_names
from profkit.trace import ncu as N

log = logging.getLogger(__name__)
OFF_ENV = "PROFKIT_PROFILE_OFF"
PERM_TAG = "ERR_NVGPUCTRPERM"
# Seconds of ncu per measured launch with profkit's ~30 metrics (kernel replay: several
# passes, memory saved and restored between them), and its start-up; measured on an H100.
# (2025.3.1, 28 metrics, 15 passes a launch: 15-39 launches of the why zoo took 19-30 s).
SECONDS_PER_LAUNCH = 0.5
STARTUP_S = 12.0
INSTALL_ADVICE = (
    "profkit ncu needs NVIDIA Nsight Compute (the ncu command), which was not found on PATH, "
    "in $CUDA_HOME/bin, /usr/local/cuda/bin or /opt/nvidia/nsight-compute. Install Nsight "
    "Compute (it comes with the CUDA toolkit; or the nsight-compute package of NVIDIA's apt/"
    "dnf repositories; or https://developer.nvidia.com/nsight-compute), or name it with "
    "--ncu /path/to/ncu.")
AMD_ADVICE = (
    "Nsight Compute measures NVIDIA GPUs only. On AMD GPUs the same counters (HBM "
    "bandwidth, compute pipes, occupancy, cache hit rates, stalls) come from ROCm's "
    "rocprofiler-compute: rocprof-compute profile -n NAME -- python train.py ..., then "
    "rocprof-compute analyze -p workloads/NAME/<gpu>.")
PERM_ADVICE = (
    "Nsight Compute may not read this GPU's performance counters (ERR_NVGPUCTRPERM): the "
    "driver lets only administrators profile. Either run profkit ncu as root (or with "
    "CAP_SYS_ADMIN, e.g. sudo -E $(which profkit) ncu ...), or let every user profile: load "
    "the nvidia kernel module with NVreg_RestrictProfilingToAdminUsers=0 (a line 'options "
    "nvidia NVreg_RestrictProfilingToAdminUsers=0' in /etc/modprobe.d/nvidia-profiling.conf, "
    "then reload the driver or reboot; in a container, the host must do this). See "
    "https://developer.nvidia.com/ERR_NVGPUCTRPERM. Nothing was written.")


@dataclass(frozen=True, kw_only=True)
class NcuPlan:
    """What to measure: the kernels (each ``{"name", "calls_per_step", ...}`` from the
    analysis), how many launches of each launch configuration after skipping how many,
    and extra ncu options."""

    kernels: tuple[dict, ...]
    launch_count: int = 3
    launch_skip: int = 2
    extra_args: tuple[str, ...] = field(default_factory=tuple)

    @property
    def regex(self) -> str:
        return kernels_regex(k["name"] for k in self.kernels)

    @property
    def launches(self) -> int:
        """Launches measured at least (one launch configuration per kernel)."""
        return len(self.kernels) * self.launch_count

    def estimate_s(self) -> float:
        return STARTUP_S + self.launches * SECONDS_PER_LAUNCH


def default_skip(kernels: list[dict], skip_steps: int) -> int:
    """Launches of each launch configuration to skip: ``skip_steps`` steps' worth of the
    least frequent chosen kernel (ncu counts launches per configuration, not per step), so
    that no kernel is measured on its first call and the rarest still gets measured."""
    rarest = min((float(k.get("calls_per_step") or 1.0) for k in kernels), default=1.0)
    return max(1, round(skip_steps * max(rarest, 1.0)))


def find_ncu(explicit: str | None = None) -> str:
    """The ncu executable: ``explicit``, on PATH, or in the usual install folders."""
    if explicit:
        found = shutil.which(explicit)
        if found:
            return found
        raise NcuError(f"--ncu {explicit}: no such executable. {INSTALL_ADVICE}")
    candidates = [shutil.which("ncu")]
    for root in (os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda"):
        if root:
            candidates.append(str(Path(root) / "bin" / "ncu"))
    candidates += sorted(glob.glob("/opt/nvidia/nsight-compute/*/ncu"), reverse=True)
    for c in candidates:
        if c and os.access(c, os.X_OK) and Path(c).is_file():
            return c
    hint = f" This machine looks like an AMD (ROCm) one: {AMD_ADVICE}" if rocm_present() else ""
    raise NcuError(INSTALL_ADVICE + hint)


def rocm_present() -> bool:
    return Path("/opt/rocm").is_dir() or bool(shutil.which("rocminfo") or shutil.which("rocm-smi"))


def is_amd(device_names) -> bool:
    """Whether any of the run's device names is an AMD GPU's."""
    return any(isinstance(n, str) and any(t in n for t in ("AMD", "Instinct", "Radeon"))
               for n in device_names)


def _tool(argv: list[str], timeout_s: float = 300) -> subprocess.CompletedProcess:
    try:
        return subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s,
                              errors="replace")
    except (OSError, subprocess.TimeoutExpired) as exc:
        return subprocess.CompletedProcess(argv, -1, "", str(exc))


def known_metrics(ncu: str) -> set[str] | None:
    """Base metric names this ncu knows for the GPU here (None when it cannot say)."""
    done = _tool([ncu, "--query-metrics"])
    text = done.stdout + done.stderr
    if PERM_TAG in text:
        raise NcuError(PERM_ADVICE)
    names = N.known_metrics(done.stdout) if done.returncode == 0 else set()
    if not names:
        log.warning("ncu --query-metrics answered nothing usable (exit %s): asking for the "
                    "basic metrics only", done.returncode)
        return None
    return names


def ncu_version(ncu: str) -> str:
    done = _tool([ncu, "--version"], 60)
    lines = [ln for ln in done.stdout.splitlines() if ln.strip()]
    return lines[-1].strip() if lines else "unknown"


def ncu_argv(ncu: str, plan: NcuPlan, metrics: list[str], report: Path, log_file: Path,
             command: list[str]) -> list[str]:
    """ncu's command line: the plan's kernels by their mangled names (one name per template
    instantiation, as ncu's launch configurations count them; seen matching more reliably
    than demangled ones on ncu 2025.3), ``launch_count`` launches of each launch
    configuration (kernel and grid, block, shared memory) after ``launch_skip``, clocks left
    as they are."""
    return [ncu, "--target-processes", "all", "--clock-control", "none",
            "--kernel-name-base", "mangled", "--kernel-name", f"regex:{plan.regex}",
            "--filter-mode", "per-launch-config", "--launch-skip", str(plan.launch_skip),
            "--launch-count", str(plan.launch_count), "--metrics", ",".join(metrics),
            "--export", str(report.with_suffix("")), "--force-overwrite",
            "--log-file", str(log_file), *plan.extra_args, *command]


def plan_text(plan: NcuPlan, n_metrics: int | None = None) -> str:
    metrics = f" with {n_metrics} metrics" if n_metrics else ""
    return (f"profkit ncu: measuring {len(plan.kernels)} kernel(s) x {plan.launch_count} "
            f"launch(es){metrics}, after skipping {plan.launch_skip} launch(es) of each launch "
            f"configuration: expect about {plan.estimate_s():.0f} s of ncu on top of the "
            "command's own time (more where a kernel runs in several launch configurations, "
            "or another kernel's name matches one of these; ncu measures those too)")


def profile_kernels(run_dir: Path, plan: NcuPlan, command: list[str], ncu: str,
                    trace_names: list[str] = ()) -> dict:
    """Run ``command`` under ncu and store what it measured in ``run_dir/ncu`` (module
    docstring); ``trace_names``: the analysis' kernels, to name each measured launch's.
    Returns ``{"folder", "rows", "meta"}``. Raises :class:`NcuError`, leaving the run as
    it was, when nothing could be measured."""
    known = known_metrics(ncu)
    metrics, columns = N.metrics_to_ask(known)
    dest = Path(run_dir) / N.NCU_DIR
    started = time.monotonic()
    with atomic_dir(dest, replaces=is_ncu_folder) as tmp:
        argv = ncu_argv(ncu, plan, metrics, tmp / N.REPORT_NAME, tmp / N.LOG_NAME, command)
        log.info("running: %s", shlex.join(argv))
        rc, perm = _run(argv)
        log_text = _read(tmp / N.LOG_NAME)
        _check(rc, perm or PERM_TAG in log_text, log_text, tmp / N.REPORT_NAME, plan)
        rows = N.parse_csv(import_csv(ncu, tmp / N.REPORT_NAME), columns)
        if not rows:
            raise NcuError(f"ncu wrote a report but it holds no kernel launch: {_tail(log_text)}")
        names = match_names((r["kernel"] for r in rows), trace_names)
        for r in rows:
            r["trace_kernel"] = names.get(r["kernel"], "")
        (tmp / N.TABLE_NAME).write_bytes(N.write_table(rows))
        final = [a.replace(str(tmp), str(dest)) for a in argv]  # where the files end up
        meta = _meta(plan, command, final, ncu, columns, rc, len(rows),
                     time.monotonic() - started)
        (tmp / N.META_NAME).write_text(json.dumps(meta, indent=1) + "\n")
    if rc != 0:
        log.warning("the command exited with code %s under ncu; the launches measured before "
                    "were kept", rc)
    return {"folder": dest, "rows": rows, "meta": meta}


def _meta(plan: NcuPlan, command: list[str], argv: list[str], ncu: str,
          columns: dict[str, str], rc: int, launches: int, elapsed_s: float) -> dict:
    asked = {m.column for m in N.METRICS} | {N.STALL_PREFIX + r for r in N.STALL_REASONS}
    return {"schema": N.SCHEMA, "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            "command": list(command), "ncu": ncu, "ncu_version": ncu_version(ncu),
            "ncu_argv": argv, "command_exit_code": rc,
            "kernels": [{"name": k["name"], "function": function_name(k["name"]),
                         "calls_per_step": k.get("calls_per_step")} for k in plan.kernels],
            "filter": {"kernel_name_base": "mangled", "kernel_name": f"regex:{plan.regex}",
                       "filter_mode": "per-launch-config", "launch_skip": plan.launch_skip,
                       "launch_count": plan.launch_count},
            "metrics": columns, "metrics_missing": sorted(asked - set(columns)),
            "launches": launches, "elapsed_s": round(elapsed_s, 1),
            "estimate_s": round(plan.estimate_s(), 1)}


def is_ncu_folder(path: Path) -> bool:
    """Whether ``path`` holds an earlier ``profkit ncu`` output: the one folder of a run
    that measuring again may replace."""
    try:
        meta = json.loads((Path(path) / N.META_NAME).read_text())
    except (OSError, ValueError):
        return False
    return isinstance(meta, dict) and meta.get("schema") == N.SCHEMA


def _run(argv: list[str]) -> tuple[int, bool]:
    """Run ncu with the command: its output passes through (stderr read line by line to
    notice a counter-permission error). Returns (exit code, permission refused)."""
    env = {**os.environ, OFF_ENV: "1"}
    try:
        proc = subprocess.Popen(argv, stderr=subprocess.PIPE, env=env)
    except OSError as exc:
        raise NcuError(f"cannot start {argv[0]}: {exc.strerror or exc}") from exc
    perm = False
    try:
        for line in iter(proc.stderr.readline, b""):
            perm = perm or PERM_TAG.encode() in line
            sys.stderr.buffer.write(line)
            sys.stderr.flush()
        return proc.wait(), perm
    except BaseException:  # Ctrl-C reached the command too: let it end, then clean up
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        raise


def _check(rc: int, perm: bool, log_text: str, report: Path, plan: NcuPlan) -> None:
    if perm:
        raise NcuError(PERM_ADVICE)
    if report.is_file() and report.stat().st_size > 0:
        return
    if rc != 0 and "No kernels were profiled" not in log_text:
        raise NcuError(f"ncu (or the command under it) exited with code {rc} and measured "
                       f"nothing: {_tail(log_text)}")
    raise NcuError(
        f"ncu measured no kernel: none of {len(plan.kernels)} kernel(s) (names matching "
        f"regex:{plan.regex}) ran more than --launch-skip {plan.launch_skip} time(s) in one "
        "launch configuration. Is it the command the run was captured from? Lower "
        f"--skip-steps/--launch-skip, or run more steps. {_tail(log_text)}")


def import_csv(ncu: str, report: Path) -> str:
    """The report's launches as ncu's CSV (details page, base units, demangled names)."""
    tries = ([ncu, "--import", str(report), "--csv", "--page", "details", "--print-units",
              "base", "--print-kernel-base", "demangled"],
             [ncu, "--import", str(report), "--csv", "--page", "details"],
             [ncu, "--import", str(report), "--csv"])
    done = None
    for argv in tries:  # older ncu versions lack some of these options
        done = _tool(argv)
        if done.returncode == 0 and done.stdout.strip():
            return done.stdout
    raise NcuError(f"ncu --import {report} failed (exit {done.returncode}): "
                   f"{_tail(done.stderr or done.stdout)}")


def _read(path: Path) -> str:
    try:
        return path.read_text(errors="replace")
    except OSError:
        return ""


def _tail(text: str, lines: int = 6) -> str:
    kept = [ln.strip() for ln in text.splitlines() if ln.strip()][-lines:]
    return "ncu said: " + " | ".join(kept) if kept else "(ncu printed nothing)"
