"""What the trace can tell, said plainly: where its steps come from, which steps the
verdict uses, ranks whose trace cannot support a verdict (kernel records lost, only CUDA-graph
capture recorded), and the code the GPU waited for."""

from __future__ import annotations

import numpy as np
import pandas as pd
from profkit.analyzers import units as U
from profkit.analyzers.findings.savings import rank_means
from profkit.analyzers.measure.compilation import COMPILE_NS
from profkit.analyzers.measure.health import capture_only, records_lost, time_collapsed, too_short
from profkit.analyzers.measure.steps import REASON, USED
from profkit.analyzers.measure.tables import rank_ranges
from profkit.analyzers.parts import HOST_IDLE
from profkit.analyzers.result import Finding

from profkit import schema as S
from profkit.textout import ranks_text

HOST_PARTS = HOST_IDLE  # the parts idle_code measures: the GPU idles on its host


UNUSABLE_WHY = {"collapsed": "the trace's events all start at one instant",
                "capture": "the trace records CUDA-graph capture, not execution",
                "compile": "every profiled step compiles",
                "lost": "kernel records are missing from the trace",
                "short": "the trace's GPU work is too short to judge"}


def unusable_ranks(health: dict[int, dict]) -> dict[int, str]:
    """Ranks whose breakdown would mislead, with why: {rank: "collapsed" | "capture" |
    "lost" | "short"} (:data:`UNUSABLE_WHY`; analyze adds "compile": ranks whose every step compiles,
    ``steps.compiling_ranks``)."""
    out = {}
    for rank, h in health.items():
        if time_collapsed(h):
            out[rank] = "collapsed"
        elif capture_only(h):
            out[rank] = "capture"
        elif records_lost(h):
            out[rank] = "lost"
        elif too_short(h):
            out[rank] = "short"
    return out


def health_findings(health: dict[int, dict], unusable: dict[int, str]) -> list[Finding]:
    findings = []
    for rank, why in sorted(unusable.items()):
        h = health.get(rank) or {}
        if why == "compile":  # said by the compile finding (findings/compilation.py)
            continue
        if why == "collapsed":
            findings.append(_collapsed_finding(rank, h))
        elif why == "short":
            findings.append(_short_finding(rank, h))
        elif why == "capture":
            findings.append(Finding(
                category="trace", severity="warning", rank=rank,
                message=(f"rank {rank}: the trace records CUDA-graph capture, not execution "
                         f"({h['captured_launches']} launches captured, {h['kernel_launches']} launched to run, "
                         f"{h['capture_calls']} capture-state calls, {h['gpu_records']} GPU "
                         "ops ran): no bottleneck verdict from it"),
                evidence={k: h[k] for k in ("captured_launches", "kernel_launches",
                                            "capture_calls", "gpu_records")},
                recommendation=("Profile steps that replay the captured graphs (after warm-up "
                                "and capture), e.g. a profiler schedule with wait/warmup steps "
                                "past the server's start-up.")))
        else:
            findings.append(Finding(
                category="trace", severity="critical", rank=rank,
                message=(f"rank {rank}: kernel records are missing: {h['kernel_launches']} "
                         f"kernel launches but only {h['launches_with_gpu_record']} of them have "
                         "a GPU record, so GPU time cannot be measured: no verdict from it"),
                evidence={k: h[k] for k in ("kernel_launches", "launches_with_gpu_record",
                                            "gpu_records")},
                recommendation=("The profiler dropped GPU activity (CUPTI activity buffers "
                                "full, or the trace written before GPU records were flushed): "
                                "record fewer steps per trace (a shorter active window), avoid "
                                "stopping the profiler while work is in flight (synchronize "
                                "before export), and check the profiler's warnings.")))
    return findings


def _one_off_kind(name: str) -> str:
    """What a one-off call most likely was, from its name (steps.one_off_spans)."""
    if "DataLoader" in name:
        return "a one-off: the DataLoader's first batch, its workers starting"
    return "a one-off, e.g. CUDA lazy module loading or a library's first-call set-up"


def _short_finding(rank: int, h: dict) -> Finding:
    n, window_us = h.get("gpu_records", 0), h.get("gpu_window_ns", 0) / 1e3
    return Finding(
        category="trace", severity="info", rank=rank,
        message=(f"rank {rank}: the trace's GPU work is {n} GPU event(s) in a {window_us:.1f} us "
                 "window and no step: too short to judge what bounds the job: no verdict"),
        evidence={"gpu_records": n, "gpu_window_us": round(window_us, 3)},
        recommendation=("Profile a few whole steps of the job (a profiler schedule with "
                        "wait / warmup / active steps, prof.step() once per step)."))


def _collapsed_finding(rank: int, h: dict) -> Finding:
    return Finding(
        category="trace", severity="critical", rank=rank,
        message=(f"rank {rank}: {h['events_at_one_instant']} of its {h['events']} events start "
                 "at the same instant, so its timestamps cannot be trusted: no breakdown, "
                 "waits, skew or bandwidth from it, and no verdict"),
        evidence={k: h[k] for k in ("events", "events_at_one_instant")},
        recommendation=("The trace's timestamps were lost or overwritten (a converter or "
                        "editor that rewrote ts, or a clock that did not advance): capture "
                        "the rank again with torch.profiler and use its file as written."))


def steps_report(steps: pd.DataFrame, infos: dict[int, dict],
                 compilation: pd.DataFrame | None = None) -> dict[str, dict]:
    """Per rank: where steps came from, which were used and why others were not, and the
    steps that compiled (``compiled``: step and compile_ms, from ``compilation``)."""
    out = {}
    rank = steps["rank"].to_numpy()
    order = np.argsort(rank, kind="stable")  # each rank's rows in table order (groupby's)
    ranks, first = np.unique(rank[order], return_index=True)
    used_flag = steps[USED].astype(bool).to_numpy()
    step, reason = steps[S.STEP].to_numpy(), steps[REASON].to_numpy()
    compiled = _compiled(compilation)
    for r, lo, hi in zip(ranks.tolist(), first.tolist(), [*first[1:].tolist(), len(order)]):
        mine = order[lo:hi]
        info = infos.get(int(r), {})
        out[str(int(r))] = {
            "source": info.get("source", "ProfilerStep#"),
            "recorded": int((step[mine] >= 0).sum()),
            "used": [int(s) for s in step[mine[used_flag[mine] & (step[mine] >= 0)]]],
            "excluded": [{"step": int(step[i]), "reason": reason[i]}
                         for i in mine[~used_flag[mine]]],
            "candidates": info.get("candidates", []),
            "compiled": compiled.get(int(r), []),
        }
    return out


def _compiled(compilation: pd.DataFrame | None) -> dict[int, list[dict]]:
    """{rank: its steps that compiled, with their compile ms}."""
    if compilation is None or compilation.empty:
        return {}
    out: dict[int, list[dict]] = {}
    for r in compilation.to_dict("records"):
        out.setdefault(int(r["rank"]), []).append(
            {"step": int(r[S.STEP]), "compile_ms": round(float(r[COMPILE_NS]) / 1e6, 3)})
    return out


def steps_line(report: dict[str, dict]) -> str:
    """One line saying which steps the verdict used, and which compiled, per group of ranks
    alike."""
    by_text: dict[str, list[int]] = {}
    for rank, r in report.items():
        text = (f"{len(r['used'])} of {r['recorded']} ({_span(r['used'])})" if r["recorded"]
                else "one window (the trace has no step ranges)")
        text += _compiled_text(r.get("compiled") or [])
        by_text.setdefault(text, []).append(int(rank))
    return "; ".join(f"{ranks_text(ranks)}: {text}" for text, ranks in by_text.items())


def _compiled_text(compiled: list[dict]) -> str:
    """', compiling in 2-4 (2602 to 3030 ms each)' for the steps that compiled."""
    if not compiled:
        return ""
    steps = [c["step"] for c in compiled if c["step"] >= 0]
    ms = [c["compile_ms"] for c in compiled]
    where = f"in {rank_ranges(steps)} " if steps else ""
    each = " each" if len(ms) > 1 else ""
    span = U.ms(ms[0]) if min(ms) == max(ms) else U.ms_range(min(ms) * 1e6, max(ms) * 1e6)
    return f", compiling {where}({span}{each})"


def step_notes(report: dict[str, dict], one_offs: pd.DataFrame) -> list[str]:
    """Lines for the report's notes when the steps need a word: steps left out and why,
    steps from a marker, no step ranges at all, one-off calls cut out."""
    notes = []
    by_text: dict[str, list[int]] = {}
    for rank, r in report.items():
        if r["source"] == "ProfilerStep#" and not r["excluded"]:
            continue
        if r["source"] == "none":
            hint = (f" (repeating annotations that could mark steps: "
                    f"{', '.join(f'{n} x{c}' for n, c in r['candidates'])})" if r["candidates"] else "")
            text = ("no ProfilerStep# ranges: the trace is analysed as one window; pass "
                    f"--step-marker NAME to use a range you record per step{hint}")
        else:
            left = "; ".join(f"{e['step']} ({e['reason']})" for e in r["excluded"]) or "none"
            text = (f"steps from {r['source']}: {len(r['used'])} of {r['recorded']} used "
                    f"({_span(r['used'])}); left out: {left}")
        by_text.setdefault(text, []).append(int(rank))
    for text, ranks in by_text.items():
        notes.append(f"{ranks_text(ranks)}: {text}")
    for row in one_offs.to_dict("records") if len(one_offs) else []:
        inner = (f", {row['inner_ns'] / 1e6:.1f} ms of it in {row['inner']}"
                 if row.get("inner") else "")
        notes.append(f"rank {row['rank']}: one {row['name']} call took {row[S.DUR_NS] / 1e6:.1f} ms"
                     f"{inner} ({_one_off_kind(row['name'])}): left out of the window")
    for rank, r in report.items():
        window = [c for c in r.get("compiled") or [] if c["step"] < 0]
        if window and not r["recorded"]:
            notes.append(f"rank {rank}: torch.compile compiled for "
                         f"{U.ms(window[0]['compile_ms'])} inside the window: left out of it")
    return notes


def _span(steps: list[int]) -> str:
    return rank_ranges(steps) if steps else "none"


def idle_code_findings(code: pd.DataFrame, ranks: pd.DataFrame, verdict: str | None,
                       steps_used: dict[int, int],
                       steps: pd.DataFrame | None = None) -> list[Finding]:
    """For a host-bound verdict: per rank, the code the GPU waited for, in ms per step: its
    share of the used steps' time in ms of the median step, as the part findings give
    theirs (``steps``: the step breakdown; without it, the mean over the used steps)."""
    if verdict not in HOST_PARTS or code.empty or ranks.empty:
        return []
    scale = _median_per_mean(ranks, steps)
    findings = []
    for rank, group in code[code["part"] == verdict].groupby("rank"):
        n = max(steps_used.get(int(rank), 1), 1) / scale.get(int(rank), 1.0)
        top = group.nlargest(3, "idle_ns")
        parts = [f"{row['code']} ({row['idle_ns'] / n / 1e6:.2f} ms/step)"
                 for row in top.to_dict("records")]
        total_ms = group["idle_ns"].sum() / n / 1e6
        findings.append(Finding(
            category="idle_code", severity="info", rank=int(rank),
            message=(f"rank {rank}: of its {verdict.replace('_', ' ')} time, the GPU idles "
                     f"{total_ms:.2f} ms per step while the host runs: " + "; ".join(parts)),
            evidence={"part": verdict, "idle_ms_per_step": round(total_ms, 3),
                      "code": "; ".join(parts),
                      "top": [{"code": r["code"], "ms_per_step": round(r["idle_ns"] / n / 1e6, 3)}
                              for r in top.to_dict("records")]},
            recommendation="Start with the code named first: it is where the GPU waits longest."))
    return findings


def _median_per_mean(ranks: pd.DataFrame, steps: pd.DataFrame | None) -> dict[int, float]:
    """Per rank: its median used step over its mean used step (1 where either is unknown)."""
    if steps is None or steps.empty or "step_time_ms" not in ranks:
        return {}
    mean_ms = (rank_means(steps)["step_ns"] / 1e6).to_dict()
    out = {}
    for rank, median_ms in zip(ranks["rank"].tolist(), ranks["step_time_ms"].tolist()):
        mean = mean_ms.get(rank)
        if mean and median_ms == median_ms and median_ms > 0:
            out[int(rank)] = float(median_ms) / float(mean)
    return out


def no_gpu_finding(launches: dict[int, int] | None = None) -> Finding:
    """A run with no GPU events at all (and no rank whose trace explains why). ``launches``:
    {rank: kernel launch calls} of the ranks that called the runtime to launch kernels:
    their kernel records are missing, the trace is no CPU-only one."""
    if launches:
        ranks = sorted(launches)
        who = f"rank {ranks[0]}" if len(ranks) == 1 else f"ranks {rank_ranges(ranks)}"
        return Finding(category="trace", severity="warning", message=(
            f"kernel records are missing: {who} called the CUDA runtime to launch "
            f"{sum(launches.values())} kernel(s) and the trace holds no GPU record at all, so "
            "there is no step breakdown, kernels or efficiency, only the CPU ops"),
            recommendation=(
                "The profiler recorded CUDA activity but the kernels did not reach the trace: "
                "profile again with no other profiler on the process (Nsight Systems, a "
                "second torch.profiler hold CUPTI), fewer active steps (CUPTI's buffers), and "
                "read the profiler's warnings."),
            evidence={"kernel_launches": sum(launches.values()),
                      "launches_with_gpu_record": 0, "ranks": ranks})
    return Finding(category="input", severity="info", message=(
        "no GPU events in this run (a CPU-only trace): no step breakdown, kernels or "
        "efficiency, only the CPU ops"),
        recommendation="Profile with ProfilerActivity.CUDA on a GPU machine.")
