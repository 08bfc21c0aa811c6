"""How well each rank uses its GPU: MFU, utilisation, SM efficiency, occupancy, NVML joins.

Per rank, over the profiled steps (``profkit.model.step_times_ns``; without steps, the span
of GPU work):

- ``efficiency``: achieved TFLOP/s and MFU against the device's dense peak for
  ``peak_dtype`` (bf16 by default: the tensor-core rate mixed-precision training runs at;
  fp16 on V100), GPU utilisation (merged kernel time / step time), estimated SM efficiency
  (time-average of min(sum of blocks-per-SM of running kernels, 1), idle time counting 0),
  estimated occupancy (duration-weighted ``est. achieved occupancy %``) and the share of
  GEMM time in tensor-core kernels.
- ``nvml``: SM clock, throttle reasons, power, energy per step, GPM tensor / DRAM activity
  beside the share of the step in GEMM/attention kernels, peak memory vs capacity.

FLOPs come from CPU ops recorded ``with_flops``. PyTorch gives FLOPs to a few aten ops
(mm, addmm, bmm, baddbmm, conv, mul, add) and some of those can nest inside one another
(a conv op inside a conv op): only the outermost op carrying FLOPs on each thread counts, so
nothing is counted twice. Traces written by recent PyTorch (2.11 here) carry no FLOPs even
with ``with_flops=True``; pass ``flops_per_step`` (a model formula) to get MFU then.

NVML samples describe the period ending at their timestamp (utilisation, GPM, averaged
power), so a metric's samples from the first step's start to one sampling interval after
the last step's end are joined. At 10 Hz a window of a few 20 ms steps holds one sample:
read the sample counts before trusting the means. Energy per step falls back to mean
power x step time when no two energy samples bracket the steps; NVML power is a ~1 s average,
so for short windows that lags the load (zoo/compute: 130 W while GEMMs ran).
"""

from __future__ import annotations

import re

import numpy as np
import pandas as pd
from profkit.analyzers.devices import DEVICES, DevicePeak, device_info, match_device
from profkit.analyzers.findings import Finding, Result
from profkit.analyzers.kernels import no_gpu_result
from profkit.analyzers.tables import RANK, empty, name_mask, plain
from profkit.analyzers.thresholds import DEFAULT, Thresholds

from profkit import intervals as iv
from profkit import schema as S
from profkit.model import RankData, Run, step_spans

EFFICIENCY_COLUMNS = (RANK, "device", "device_name", "device_model", "steps", "step_time_ns",
                      "flops", "flops_source", "achieved_tflops", "peak_tflops", "mfu",
                      "gpu_util", "sm_efficiency", "occupancy_pct", "gemm_time_ns",
                      "tensor_core_gemm_frac", "fp32_gemm_ns")
NVML_COLUMNS = (RANK, "device", "sm_clock_mean_mhz", "sm_clock_min_mhz", "clock_samples",
                "throttle_samples", "throttle_reasons", "power_mean_w", "energy_j_per_step",
                "energy_source", "gpm_tensor_active_pct", "gpm_dram_bw_pct",
                "matmul_time_frac", "peak_mem_bytes", "mem_capacity_bytes", "peak_mem_frac")
TABLES = (("efficiency", EFFICIENCY_COLUMNS), ("nvml", NVML_COLUMNS))

# nvmlClocksEventReason* bits (checked against nvidia-ml-py 13's pynvml constants). GpuIdle
# 0x1, ApplicationsClocksSetting 0x2 and DisplayClockSetting 0x100 are not throttling.
THROTTLE_REASONS = {0x4: "sw_power_cap", 0x8: "hw_slowdown", 0x10: "sync_boost",
                    0x20: "sw_thermal", 0x40: "hw_thermal", 0x80: "hw_power_brake",
                    0x200: "board_limit", 0x400: "reliability"}
THROTTLE_MASK = sum(THROTTLE_REASONS)
# Tensor-core / matrix-core GEMM kernels: cuBLAS/CUTLASS (xmma, wgmma, hmma, tensorop,
# nvjet, h884/s1688/s16816 instruction shapes), low-precision types, AMD MFMA (Tensile
# "MI16x16x1", mfma). fp32 SIMT GEMMs: sgemm, gemmSN, f32f32.
TENSOR_CORE_RE = re.compile(r"xmma|wgmma|hmma|tensorop|nvjet|[hsi]\d{3,5}gemm|mfma|_mi\d+x\d+|"
                            r"tf32|bf16|f16|fp16|half", re.IGNORECASE)
FP32_GEMM_RE = re.compile(r"sgemm|gemmsn|f32f32|fp32", re.IGNORECASE)
MATMUL_SUBCLASSES = ("gemm", "attention")


def step_windows(rd: RankData) -> tuple[np.ndarray, np.ndarray]:
    """Disjoint (start, end) ns windows whose lengths are the step times; without steps,
    one window from the first GPU start to the last GPU end."""
    if len(rd.steps):
        start, end = step_spans(rd.steps)
        order = np.argsort(start, kind="stable")
        start, end = start[order], end[order]
        prev = np.concatenate([[start[0]], np.maximum.accumulate(end)[:-1]])
        return np.minimum(np.maximum(start, prev), end), end
    gpu = rd.gpu_events
    if gpu.empty:
        return np.empty(0, np.int64), np.empty(0, np.int64)
    return (np.array([gpu[S.TS_NS].min()]), np.array([(gpu[S.TS_NS] + gpu[S.DUR_NS]).max()]))


def window_kernels(rd: RankData) -> pd.DataFrame:
    k = rd.events[rd.events[S.KIND] == S.KIND_KERNEL]
    return k[k[S.STEP] >= 0] if len(rd.steps) else k


def rank_device(rd: RankData) -> int:
    dev = rd.gpu_events[S.DEVICE]
    dev = dev[dev >= 0]
    return int(dev.mode().iloc[0]) if len(dev) else 0


def outer_flops(rd: RankData) -> float:
    """Sum of FLOPs of the outermost FLOP-carrying CPU ops in the steps (see module doc)."""
    ops = rd.events[(rd.events[S.KIND] == S.KIND_CPU_OP) & (rd.events[S.FLOPS] > 0)]
    ops = ops[ops[S.STEP] >= 0] if len(rd.steps) else ops
    if ops.empty:
        return 0.0
    ops = ops.assign(end=ops[S.TS_NS] + ops[S.DUR_NS]).sort_values(
        [S.PID, S.TID, S.TS_NS, S.DUR_NS], ascending=[True, True, True, False])
    reach = ops.groupby([S.PID, S.TID])["end"].cummax()
    prev_reach = reach.groupby([ops[S.PID], ops[S.TID]]).shift(fill_value=np.iinfo(np.int64).min)
    return float(ops.loc[ops["end"] > prev_reach, S.FLOPS].sum())  # else inside an earlier op


def sm_efficiency(k: pd.DataFrame, window: int) -> float:
    """Time-average over ``window`` ns of min(sum of blocks-per-SM of running kernels, 1)."""
    k = k[np.isfinite(k[S.BLOCKS_PER_SM])]
    if k.empty or window <= 0:
        return np.nan
    t = np.concatenate([k[S.TS_NS].to_numpy(), (k[S.TS_NS] + k[S.DUR_NS]).to_numpy()])
    bps = k[S.BLOCKS_PER_SM].to_numpy(dtype=float)
    order = np.argsort(t, kind="stable")
    level = np.cumsum(np.concatenate([bps, -bps])[order])
    covered = np.clip(level[:-1], 0.0, 1.0) * np.diff(t[order])
    return float(covered.sum() / window)


def gemm_precision(k: pd.DataFrame) -> tuple[int, float, int]:
    """(GEMM kernel ns, share of it in tensor-core kernels, ns in fp32 SIMT GEMMs)."""
    g = k[k[S.SUBCLASS] == "gemm"]
    total = int(g[S.DUR_NS].sum())
    tc = name_mask(g[S.NAME], TENSOR_CORE_RE)
    fp32 = name_mask(g[S.NAME], FP32_GEMM_RE) & ~tc
    frac = g[S.DUR_NS][tc].sum() / total if total else np.nan
    return total, float(frac), int(g[S.DUR_NS][fp32].sum())


def efficiency_row(rank: int, rd: RankData, run_meta: dict, flops_per_step: float | None,
                   peak_dtype: str) -> dict:
    lo, hi = step_windows(rd)
    window = int((hi - lo).sum())
    steps = max(len(rd.steps), 1)
    k = window_kernels(rd)
    device = rank_device(rd)
    info = device_info(rd.meta, run_meta, device)
    peak: DevicePeak | None = match_device(info["name"], info["num_sms"], info["mem_bytes"])
    peak_tflops = getattr(peak, f"{peak_dtype}_tflops") if peak else np.nan
    if flops_per_step:
        flops, source = flops_per_step * steps, "model formula"
    else:
        flops = outer_flops(rd)
        source = "trace" if flops > 0 else ""  # the trace's counts or op shapes
    achieved = flops / (window * 1e-9) / 1e12 if window and flops else np.nan
    dur = k[S.DUR_NS].to_numpy()
    occ = k[S.OCCUPANCY_PCT].to_numpy(dtype=float)
    has_occ = np.isfinite(occ) & (dur > 0)
    gemm_ns, tc_frac, fp32_ns = gemm_precision(k)
    return {RANK: rank, "device": device, "device_name": info["name"],
            "device_model": peak.key if peak else "", "steps": len(rd.steps),
            "step_time_ns": window, "flops": flops, "flops_source": source,
            "achieved_tflops": achieved, "peak_tflops": peak_tflops,
            "mfu": achieved / peak_tflops if peak_tflops else np.nan,
            "gpu_util": iv.total(iv.union(k[S.TS_NS], k[S.TS_NS] + k[S.DUR_NS])) / window
            if window else np.nan,
            "sm_efficiency": sm_efficiency(k, window),
            "occupancy_pct": float((occ * dur)[has_occ].sum() / dur[has_occ].sum())
            if has_occ.any() else np.nan,
            "gemm_time_ns": gemm_ns, "tensor_core_gemm_frac": tc_frac, "fp32_gemm_ns": fp32_ns}


# --- NVML joins ---------------------------------------------------------------------------

def metric_samples(counters: pd.DataFrame, metric: str, lo: int, hi: int,
                   pad: bool = True) -> pd.DataFrame:
    """Samples of one metric from ``lo`` to ``hi`` plus one sampling interval (the median
    spacing), sorted by time; ``pad=False`` keeps [lo, hi] only."""
    s = counters[counters[S.METRIC] == metric].sort_values(S.TS_NS)
    gap = float(np.median(np.diff(s[S.TS_NS]))) if pad and len(s) > 1 else 0.0
    return s[(s[S.TS_NS] >= lo) & (s[S.TS_NS] <= hi + gap)]


def energy_per_step(counters: pd.DataFrame, lo: int, hi: int, window: int,
                    steps: int) -> tuple[float, str]:
    """Joules per step: the cumulative energy counter interpolated at the window's ends when
    samples bracket it, else mean power over the window times the step time."""
    e = counters[counters[S.METRIC] == "energy_mj"].sort_values(S.TS_NS)
    t, v = e[S.TS_NS].to_numpy(), e[S.VALUE].to_numpy(dtype=float)
    if len(t) >= 2 and t[0] <= lo and t[-1] >= hi:
        rel = (t - t[0]).astype(float)  # epoch ns as float64 would lose ~256 ns
        joules = (np.interp(hi - t[0], rel, v) - np.interp(lo - t[0], rel, v)) / 1e3
        return joules / steps, "energy_mj"
    power = metric_samples(counters, "power_w", lo, hi)[S.VALUE]
    if len(power):
        return float(power.mean()) * window * 1e-9 / steps, "power_w"
    return np.nan, ""


def throttle(counters: pd.DataFrame, lo: int, hi: int) -> tuple[int, str]:
    """(samples with a throttle bit set, the reasons seen), in the window."""
    raw = metric_samples(counters, "clocks_event_reasons", lo, hi)[S.VALUE]
    bits = raw.to_numpy(dtype=float).astype(np.int64) & THROTTLE_MASK
    seen = np.bitwise_or.reduce(bits) if len(bits) else 0
    names = [name for bit, name in THROTTLE_REASONS.items() if seen & bit]
    return int((bits != 0).sum()), ",".join(names)


def nvml_row(rank: int, rd: RankData, run_meta: dict, eff: dict) -> dict | None:
    c = rd.counters
    if c.empty:
        return None
    device = eff["device"]
    if (c[S.DEVICE] == device).any():
        c = c[c[S.DEVICE] == device]
    lo, hi = step_windows(rd)
    if not len(lo):
        return None
    start, end, window = int(lo[0]), int(hi[-1]), eff["step_time_ns"]
    clock = metric_samples(c, "sm_clock_mhz", start, end)[S.VALUE]
    energy, source = energy_per_step(c, start, end, window, max(eff["steps"], 1))
    k = window_kernels(rd)
    mm = k[k[S.SUBCLASS].isin(MATMUL_SUBCLASSES)]
    mem = c[c[S.METRIC] == "mem_used_bytes"][S.VALUE]
    model = DEVICES.get(eff["device_model"])
    cap = device_info(rd.meta, run_meta, device)["mem_bytes"] or (
        model.mem_gb * 1e9 if model else np.nan)
    n_throttle, reasons = throttle(c, start, end)

    def mean(metric: str) -> float:
        return float(metric_samples(c, metric, start, end)[S.VALUE].mean())

    return {RANK: rank, "device": device, "sm_clock_mean_mhz": float(clock.mean()),
            "sm_clock_min_mhz": float(clock.min()), "clock_samples": len(clock),
            "throttle_samples": n_throttle, "throttle_reasons": reasons,
            "power_mean_w": mean("power_w"), "energy_j_per_step": energy,
            "energy_source": source, "gpm_tensor_active_pct": mean("gpm_tensor_active_pct"),
            "gpm_dram_bw_pct": mean("gpm_dram_bw_pct"),
            "matmul_time_frac": iv.total(iv.union(mm[S.TS_NS], mm[S.TS_NS] + mm[S.DUR_NS]))
            / window if window else np.nan,
            "peak_mem_bytes": float(mem.max()) if len(mem) else np.nan,
            "mem_capacity_bytes": float(cap) if cap else np.nan,
            "peak_mem_frac": float(mem.max() / cap) if len(mem) and cap else np.nan}


# --- findings and entry point -------------------------------------------------------------

def efficiency_findings(eff: dict, th: Thresholds) -> list[Finding]:
    out, rank = [], eff[RANK]
    ev = {k: plain(v) for k, v in eff.items()}
    if eff["mfu"] < th.low_mfu_frac:
        out.append(Finding(
            category="mfu", severity="warning", rank=rank, evidence=ev,
            message=f"MFU is {eff['mfu']:.0%}: {eff['achieved_tflops']:.0f} of "
                    f"{eff['peak_tflops']:.0f} dense TFLOP/s on {eff['device_model']}.",
            recommendation="Find where the step goes (breakdown, kernels): raise arithmetic "
                           "intensity (larger batch / sequence, bf16), fuse small ops, "
                           "overlap communication."))
    if eff["gpu_util"] < th.gpu_util_low_frac:
        out.append(Finding(
            category="gpu_utilization", severity="warning", rank=rank, evidence=ev,
            message=f"Kernels keep the GPU busy only {eff['gpu_util']:.0%} of the step.",
            recommendation="Increase the batch size (or micro-batches per step) so each step "
                           "gives the GPU more work; then remove host-side stalls."))
    if eff["gemm_time_ns"] and eff["tensor_core_gemm_frac"] == 0 and eff["fp32_gemm_ns"]:
        out.append(Finding(
            category="precision", severity="warning", rank=rank, evidence=ev,
            message=f"No GEMM runs on tensor cores; fp32 GEMMs take "
                    f"{eff['fp32_gemm_ns'] / 1e6:.1f} ms.",
            recommendation="Use mixed precision: torch.autocast(dtype=torch.bfloat16) (or "
                           "fp16 with a GradScaler), or at least TF32 via "
                           "torch.backends.cuda.matmul.allow_tf32 = True."))
    return out


def nvml_findings(row: dict, th: Thresholds) -> list[Finding]:
    out, rank = [], row[RANK]
    ev = {k: plain(v) for k, v in row.items()}
    if row["throttle_samples"]:
        out.append(Finding(
            category="throttling", severity="warning", rank=rank, evidence=ev,
            message=f"The GPU clock was held back during the steps "
                    f"({row['throttle_reasons']}; SM clock min {row['sm_clock_min_mhz']:.0f} "
                    f"MHz, mean {row['sm_clock_mean_mhz']:.0f} MHz).",
            recommendation="Check cooling, power limits (nvidia-smi -q -d PERFORMANCE,POWER) "
                           "and the other jobs on the node; step times are not comparable "
                           "across throttled and unthrottled runs."))
    if row["peak_mem_frac"] > th.peak_memory_frac:
        out.append(Finding(
            category="memory", severity="warning", rank=rank, evidence=ev,
            message=f"Peak GPU memory {row['peak_mem_bytes'] / 1e9:.1f} GB is "
                    f"{row['peak_mem_frac']:.0%} of {row['mem_capacity_bytes'] / 1e9:.0f} GB.",
            recommendation="Leave headroom: activation checkpointing, mixed precision, "
                           "smaller micro-batches or sharding (FSDP / ZeRO)."))
    return out


def analyze_efficiency(run: Run, thresholds: Thresholds = DEFAULT, *,
                       flops_per_step: float | None = None,
                       peak_dtype: str = "bf16") -> Result:
    """Efficiency and NVML tables per rank (module docstring) with their findings.

    ``flops_per_step``: model FLOPs of one step on one rank (for example 6 x parameters x
    tokens for a dense transformer), used instead of the trace's with_flops counts.
    ``peak_dtype``: "bf16" (tensor-core peak, the default) or "fp32"."""
    rows = [rank_efficiency(r, rd, run.meta, flops_per_step=flops_per_step,
                            peak_dtype=peak_dtype)
            for r, rd in sorted(run.ranks.items()) if rd.has_gpu]
    return combine_efficiency(rows, thresholds)


def rank_efficiency(rank: int, rd: RankData, run_meta: dict, *,
                    flops_per_step: float | None = None,
                    peak_dtype: str = "bf16") -> tuple[dict, dict | None]:
    """One GPU rank's efficiency row and NVML row (None without samples)."""
    eff = efficiency_row(rank, rd, run_meta, flops_per_step, peak_dtype)
    return eff, nvml_row(rank, rd, run_meta, eff)


def combine_efficiency(rows: list[tuple[dict, dict | None]],
                       thresholds: Thresholds = DEFAULT) -> Result:
    """:func:`analyze_efficiency` from the GPU ranks' :func:`rank_efficiency`, in rank order."""
    if not rows:
        return no_gpu_result(TABLES, "efficiency analysis")
    effs = [eff for eff, _ in rows]
    nvml = [row for _, row in rows if row is not None]
    findings = [f for eff in effs for f in efficiency_findings(eff, thresholds)]
    findings += [f for row in nvml for f in nvml_findings(row, thresholds)]
    if not any(eff["flops_source"] for eff in effs):
        findings.append(Finding(
            category="mfu", severity="info",
            message="MFU not computed: the trace has no FLOP counts (torch.profiler "
                    "with_flops=True writes none in recent PyTorch versions).",
            recommendation="Pass the model's FLOPs per step (flops_per_step) to get MFU."))
    tables = {"efficiency": pd.DataFrame(effs, columns=list(EFFICIENCY_COLUMNS)),
              "nvml": pd.DataFrame(nvml, columns=list(NVML_COLUMNS)) if nvml
              else empty(NVML_COLUMNS)}
    return Result(tables=tables, findings=findings)
