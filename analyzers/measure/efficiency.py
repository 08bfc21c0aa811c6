"""How well each rank uses its GPU: MFU, utilisation, SM efficiency, occupancy, NVML joins.

Per rank, over the profiled steps (``profkit.model.step_times_ns``; without steps, the span
of GPU work):

- ``efficiency``: achieved TFLOP/s, MFU and HFU against one stated peak (PaLM's definition:
  the dense peak of the fastest precision the step's GEMMs could use on the device,
  :meth:`DevicePeak.mfu_peak`: the 16-bit peak, fp8's where GEMMs run in fp8). **MFU** =
  model FLOPs / (step time x peak), the model's FLOPs being the executed ones less those of
  activation recompute (analyzers/measure/recompute.py); **HFU** = every executed FLOP,
  recompute included, / (step time x peak). The blend of each precision's peak weighted by
  its FLOPs (``flop_weighted_peak_tflops``) gives the FLOP-weighted peak utilisation, under
  that name only. Neither MFU nor HFU can exceed 100%: such a figure is dropped and
  ``mfu_why`` says why (FLOPs counted twice, or a faster precision than recognised). GPU utilisation
  (merged kernel, copy and memset time / step time), estimated SM efficiency (time-average of min(sum of
  blocks-per-SM of running kernels, 1), idle time counting 0), estimated occupancy
  (duration-weighted ``est. achieved occupancy %``) and the share of GEMM time in
  tensor-core precisions (tf32, 16-bit, fp8, fp4): a GEMM's precision is its kernel name's,
  else its op's input dtype (analyzers/measure/kernelcost.py). The rows also carry, for the
  precision finding, the fp32 GEMMs' FLOPs and bytes and the fp32 convolutions' time.
- ``nvml``: SM clock, throttle reasons, power, energy per step, GPM tensor / DRAM activity
  beside the share of the step in GEMM/attention kernels, peak memory vs capacity.

FLOPs are the trace's own counts or those of ops with a formula (``profkit.classify.flops``: matmul,
convolution, attention), outermost op per thread. MFU is judged only where those ops
launched enough of the compute-kernel time (``Thresholds.min_flop_coverage_frac``), or when
the model's FLOPs per step are given (``Thresholds.flops_per_step``); ``peak_tflops``
replaces the device table's peak. The map reports each rank's facts (counted FLOPs,
coverage, precision mix, device peak); :func:`combine_efficiency` applies the options.

NVML samples describe the period ending at their timestamp (utilisation, GPM, averaged
power), so a metric's samples from the first step's start to one sampling interval after
the last step's end are joined. At 10 Hz a window of a few 20 ms steps holds one sample:
read the sample counts before trusting the means. Power is the instantaneous reading
(``power_instant_w``, sampled with the fast metrics while the profiler records) where the
window has any, else NVML's ~1 s average, which lags the load in short windows (an H100
running GEMMs: 144-218 W averaged, 730-780 W instantaneous). Energy per step falls back to
mean power x step time when no two energy samples bracket the steps.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from profkit.analyzers.measure.devices import DevicePeak, device_info, lookup_device, peak_of
from profkit.analyzers.measure.flopcount import count_flops, counted_ops, kernel_time_mix
from profkit.analyzers.measure.kernelcost import COST_INPUTS, kernel_costs
from profkit.analyzers.measure.kernels import no_gpu_result
from profkit.analyzers.measure.recompute import recompute_op_mask, recompute_regions
from profkit.analyzers.measure.tables import RANK, empty, kernels_of
from profkit.analyzers.result import Result
from profkit.analyzers.thresholds import DEFAULT, Thresholds, with_mfu_options

from profkit import intervals as iv
from profkit import schema as S
from profkit.columns import values_in
from profkit.model import RankData, Run, step_spans
from profkit.run.counters import nvml_samples

# flops: what MFU is computed from (``flops_source`` "trace" or "model formula");
# trace_flops: counted from the trace's ops; flop_coverage: share of the compute-kernel time
# that can carry FLOPs those ops launched (analyzers/measure/flopcount.py); precision_mix: shares of the counted FLOPs per precision (without
# any, of GEMM kernel time); peak_tflops: what MFU is judged against; mfu: NaN unless judged.
# mfu_precision: the precision whose peak peak_tflops is; recompute_flops: executed FLOPs of
# activation recompute; hfu: executed FLOPs over the same peak; flop_weighted_*: the blend.
EFFICIENCY_COLUMNS = (RANK, "device", "device_name", "device_model", "steps", "step_time_ns",
                      "flops", "flops_source", "trace_flops", "flop_coverage", "precision_mix",
                      "achieved_tflops", "peak_tflops", "mfu", "mfu_precision",
                      "recompute_flops", "hfu", "flop_weighted_peak_tflops",
                      "flop_weighted_util", "mfu_why",
                      "gpu_util", "sm_efficiency", "occupancy_pct", "gemm_time_ns",
                      "tensor_core_gemm_frac", "fp32_gemm_ns")
NVML_COLUMNS = (RANK, "device", "sm_clock_mean_mhz", "sm_clock_min_mhz", "clock_samples",
                "throttle_samples", "throttle_reasons", "power_mean_w", "power_source",
                "energy_j_per_step", "energy_source", "gpm_tensor_active_pct", "gpm_dram_bw_pct",
                "matmul_time_frac", "peak_mem_bytes", "mem_capacity_bytes", "peak_mem_frac")
TABLES = (("efficiency", EFFICIENCY_COLUMNS), ("nvml", NVML_COLUMNS))

# nvmlClocksEventReason* bits (checked against nvidia-ml-py 13's pynvml constants). GpuIdle
# 0x1, ApplicationsClocksSetting 0x2 and DisplayClockSetting 0x100 are not throttling.
THROTTLE_REASONS = {0x4: "sw_power_cap", 0x8: "hw_slowdown", 0x10: "sync_boost",
                    0x20: "sw_thermal", 0x40: "hw_thermal", 0x80: "hw_power_brake",
                    0x200: "board_limit", 0x400: "reliability"}
THROTTLE_MASK = sum(THROTTLE_REASONS)
# fp32 GEMMs run on SIMT / vector
TENSOR_CORE_PRECISIONS = ("tf32", "bf16", "fp16", "16-bit", "fp8", "fp4")
MATMUL_SUBCLASSES = ("gemm", "attention")
# FLOPs whose precision neither a kernel name nor an op dtype says: judged at the 16-bit peak
# (peak_tflops' fallback), labelled as what they are
UNKNOWN_PRECISION = "unknown"


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


def gpu_busy_ns(rd: RankData) -> int:
    """ns the GPU is busy in the windows: the union of its kernels, copies and memsets (a
    GPU copying is busy: the step table's transfer share, issue 40)."""
    g = rd.gpu_events
    g = g[g[S.STEP] >= 0] if len(rd.steps) else g
    return iv.total(iv.union(g[S.TS_NS], g[S.TS_NS] + g[S.DUR_NS]))


def window_kernels(rd: RankData) -> pd.DataFrame:
    k = kernels_of(rd)
    return k[k[S.STEP] >= 0] if len(rd.steps) else k


def rank_device(rd: RankData) -> int:
    dev = rd.gpu_events[S.DEVICE]
    dev = dev[dev >= 0]
    return int(dev.mode().iloc[0]) if len(dev) else 0


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


def gemm_precision(rd: RankData, k: pd.DataFrame) -> dict:
    """GEMM kernel ns, the share of it in tensor-core precisions, the fp32 GEMMs' ns, FLOPs
    and bytes, and the fp32 convolutions' ns. A kernel's precision is its name's, else its
    op's input dtype (analyzers/measure/kernelcost.py: a custom kernel under an fp32 op is
    fp32)."""
    mm = kernel_costs(rd, k.loc[values_in(k[S.SUBCLASS], ("gemm", "conv")), list(COST_INPUTS)])
    fp32 = mm["precision"].to_numpy(dtype=object) == "fp32"
    conv = (mm[S.SUBCLASS] == "conv").to_numpy()
    g = mm[~conv]
    total = int(g[S.DUR_NS].sum())
    tc = np.isin(g["precision"].to_numpy(dtype=object), TENSOR_CORE_PRECISIONS)
    fp32_gemm = mm[fp32 & ~conv]
    known = fp32_gemm[np.isfinite(fp32_gemm["flops"]) & (fp32_gemm["flops"] > 0)]
    return {"gemm_time_ns": total,
            "tensor_core_gemm_frac": float(g[S.DUR_NS][tc].sum() / total) if total else np.nan,
            "fp32_gemm_ns": int(fp32_gemm[S.DUR_NS].sum()),
            "fp32_gemm_known_ns": int(known[S.DUR_NS].sum()),  # those with known FLOPs:
            "fp32_gemm_flops": float(known["flops"].sum()),
            "fp32_gemm_bytes": float(np.nansum(known["read_bytes"] + known["write_bytes"])),
            "fp32_conv_ns": int(mm[S.DUR_NS][fp32 & conv].sum())}


def flop_facts(rd: RankData, k: pd.DataFrame, peak: DevicePeak | None,
               peak_dtype: str | None) -> dict:
    """Counted FLOPs, their coverage and precision mix, the FLOPs of activation recompute,
    the peak MFU is judged against (module doc; ``peak_dtype``: that precision's peak
    instead) and the FLOP-weighted blend of the mix's peaks."""
    fc = count_flops(rd, k, peak_dtype or UNKNOWN_PRECISION)
    if fc.flops > 0:
        mix = fc.by_precision
        blend = peak.flop_weighted_tflops(mix) if peak else np.nan
    else:  # no FLOPs to weigh: the GEMMs' time says which peaks apply
        mix = kernel_time_mix(k) or {UNKNOWN_PRECISION: 1.0}
        blend = peak.time_weighted_tflops(mix) if peak else np.nan
    if peak_dtype:
        precision, device_peak = peak_dtype, peak.peak_tflops(peak_dtype) if peak else np.nan
    else:
        precision, device_peak = peak.mfu_peak(mix) if peak else ("", np.nan)
    total = sum(mix.values())
    text = ",".join(f"{p}:{v / total:.2f}" for p, v in sorted(mix.items(), key=lambda x: -x[1]))
    if set(mix) == {UNKNOWN_PRECISION}:  # no kernel name nor op dtype says
        text = UNKNOWN_PRECISION
    return {"trace_flops": fc.flops, "flop_coverage": fc.coverage, "precision_mix": text,
            "peak_tflops": device_peak, "mfu_precision": precision,
            "flop_weighted_peak_tflops": blend, "recompute_flops": recompute_flops(rd, k)}


def recompute_flops(rd: RankData, k: pd.DataFrame) -> float:
    """Counted FLOPs of the ops run again by activation recompute, in the profiled steps."""
    regions = recompute_regions(rd)
    if regions.empty:
        return 0.0
    ops = counted_ops(rd, k)[0]
    return float(ops[S.FLOPS].to_numpy()[recompute_op_mask(regions, ops)].sum())


def efficiency_row(rank: int, rd: RankData, run_meta: dict, peak_dtype: str | None) -> dict:
    """One rank's facts; flops / achieved_tflops / mfu are filled by :func:`judge_mfu`."""
    lo, hi = step_windows(rd)
    window = int((hi - lo).sum())
    k = window_kernels(rd)
    device = rank_device(rd)
    info, peak = lookup_device(rd.meta, run_meta, device)
    dur = k[S.DUR_NS].to_numpy()
    occ = k[S.OCCUPANCY_PCT].to_numpy(dtype=float)
    has_occ = np.isfinite(occ) & (dur > 0)
    return {RANK: rank, "device": device, "device_name": info["name"],
            "device_model": peak.key if peak else "", "steps": len(rd.steps),
            "step_time_ns": window, "flops": np.nan, "flops_source": "",
            **flop_facts(rd, k, peak, peak_dtype), "achieved_tflops": np.nan, "mfu": np.nan,
            "hfu": np.nan, "flop_weighted_util": np.nan, "mfu_why": "",
            "gpu_util": gpu_busy_ns(rd) / window if window else np.nan,
            "sm_efficiency": sm_efficiency(k, window),
            "occupancy_pct": float((occ * dur)[has_occ].sum() / dur[has_occ].sum())
            if has_occ.any() else np.nan,
            **gemm_precision(rd, k), "shapes_recorded": shapes_recorded(rd)}


def shapes_recorded(rd: RankData) -> bool:
    """Whether the trace recorded op shapes (some op has a cost worked out from them)."""
    ops = rd.of_kinds((S.KIND_CPU_OP,), (S.OP_READ_BYTES, S.FLOPS))
    return bool(ops[S.OP_READ_BYTES].notna().any() or (ops[S.FLOPS] > 0).any())


def judge_mfu(eff: dict, th: Thresholds) -> dict:
    """The row with the model FLOPs MFU is computed from (``th.flops_per_step`` x steps,
    else the counted ones less the recompute's), achieved TFLOP/s, the peak
    (``th.peak_tflops`` if given), MFU, HFU (executed FLOPs: the counted ones, or the
    model's plus the recompute's) and the FLOP-weighted peak utilisation; left NaN unless
    the FLOPs are the model's or cover enough compute time, and dropped with the reason
    (``mfu_why``) where one would exceed 100%."""
    row = dict(eff)
    recomputed = float(row.get("recompute_flops") or 0.0)
    if th.flops_per_step:
        row["flops"], row["flops_source"] = th.flops_per_step * max(row["steps"], 1), "model formula"
        executed = row["flops"] + recomputed
    else:
        executed = row["trace_flops"]
        row["flops"] = max(executed - recomputed, 0.0)
        row["flops_source"] = "trace" if row["trace_flops"] > 0 else ""
    if th.peak_tflops:
        row["peak_tflops"], row["mfu_precision"] = float(th.peak_tflops), "given"
    window_s = row["step_time_ns"] * 1e-9
    row["achieved_tflops"] = row["flops"] / window_s / 1e12 if window_s and row["flops"] else np.nan
    hardware_tflops = executed / window_s / 1e12 if window_s and executed else np.nan
    judged = bool(th.flops_per_step) or row["flop_coverage"] >= th.min_flop_coverage_frac
    peak = row["peak_tflops"]
    row["mfu"] = row["achieved_tflops"] / peak if judged and peak > 0 else np.nan
    row["hfu"] = hardware_tflops / peak if judged and peak > 0 else np.nan
    blend = row.get("flop_weighted_peak_tflops", np.nan)
    row["flop_weighted_util"] = (hardware_tflops / blend
                                 if judged and not th.peak_tflops and blend > 0 else np.nan)
    worst = np.nanmax([row["mfu"], row["hfu"], 0.0])
    if not worst <= 1.0:
        row["mfu_why"] = beyond_peak_reason(row, hardware_tflops, th)
        row.update(mfu=np.nan, hfu=np.nan, flop_weighted_util=np.nan, achieved_tflops=np.nan)
    elif not row["flop_weighted_util"] <= 1.0:
        row["flop_weighted_util"] = np.nan
    return row


def beyond_peak_reason(row: dict, hardware_tflops: float, th: Thresholds) -> str:
    """Why MFU or HFU came out above 100%: more FLOP/s than any precision of the device
    can run (FLOPs counted twice, or times clipped), or above the stated peak only (the
    GEMMs ran in a faster precision than recognised: the wrong peak)."""
    said = f"{hardware_tflops:.0f} TFLOP/s counted against a {row['peak_tflops']:.0f} TFLOP/s"
    if th.peak_tflops:
        return (f"{said} peak given with --peak-tflops: the peak is too low for the "
                "precision the GEMMs ran in, or FLOPs are counted twice")
    peak = peak_of(row.get("device_model"))
    fastest = peak.fastest_tflops if peak else np.nan
    if np.isfinite(fastest) and hardware_tflops <= fastest:
        return (f"{said} {row['mfu_precision']} peak, within the device's fastest "
                f"({fastest:.0f}): the GEMMs ran in a faster precision than their kernels' "
                "names and inputs say (the wrong peak)")
    return (f"{said} {row['mfu_precision']} peak, more than the device's fastest precision "
            f"runs ({fastest:.0f}): FLOPs counted twice (an op's formula over its real "
            "work) or kernel times cut short")


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
    power, source = window_power(counters, lo, hi)
    if len(power):
        return float(power.mean()) * window * 1e-9 / steps, source
    return np.nan, ""


def window_power(counters: pd.DataFrame, lo: int, hi: int) -> tuple[pd.Series, str]:
    """Power samples of the window and their metric: the instantaneous readings inside it
    when there are any, else the ~1 s averages (joined with one interval of padding)."""
    instant = metric_samples(counters, "power_instant_w", lo, hi, pad=False)[S.VALUE]
    if len(instant):
        return instant, "power_instant_w"
    return metric_samples(counters, "power_w", lo, hi)[S.VALUE], "power_w"


def throttle(counters: pd.DataFrame, lo: int, hi: int) -> tuple[int, str]:
    """(samples with a throttle bit set, the reasons seen), in the window."""
    raw = metric_samples(counters, "clocks_event_reasons", lo, hi)[S.VALUE]
    bits = raw.to_numpy(dtype=float).astype(np.int64) & THROTTLE_MASK
    seen = np.bitwise_or.reduce(bits) if len(bits) else 0
    names = [name for bit, name in THROTTLE_REASONS.items() if seen & bit]
    return int((bits != 0).sum()), ",".join(names)


def nvml_row(rank: int, rd: RankData, run_meta: dict, eff: dict) -> dict | None:
    c = nvml_samples(rd.counters)  # the trace's own counters are no NVML metric
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
    model = peak_of(eff["device_model"])
    cap = device_info(rd.meta, run_meta, device)["mem_bytes"] or (
        model.mem_gb * 1e9 if model else np.nan)
    n_throttle, reasons = throttle(c, start, end)
    power, power_source = window_power(c, start, end)

    def mean(metric: str) -> float:
        return float(metric_samples(c, metric, start, end)[S.VALUE].mean())

    return {RANK: rank, "device": device, "sm_clock_mean_mhz": float(clock.mean()),
            "sm_clock_min_mhz": float(clock.min()), "clock_samples": len(clock),
            "throttle_samples": n_throttle, "throttle_reasons": reasons,
            "power_mean_w": float(power.mean()), "power_source": power_source,
            "energy_j_per_step": energy,
            "energy_source": source, "gpm_tensor_active_pct": mean("gpm_tensor_active_pct"),
            "gpm_dram_bw_pct": mean("gpm_dram_bw_pct"),
            "matmul_time_frac": iv.total(iv.union(mm[S.TS_NS], mm[S.TS_NS] + mm[S.DUR_NS]))
            / window if window else np.nan,
            "peak_mem_bytes": float(mem.max()) if len(mem) else np.nan,
            "mem_capacity_bytes": float(cap) if cap else np.nan,
            "peak_mem_frac": float(mem.max() / cap) if len(mem) and cap else np.nan}


# --- entry point ---------------------------------------------------------------------------

def analyze_efficiency(run: Run, thresholds: Thresholds = DEFAULT, *,
                       flops_per_step: float | None = None, peak_tflops: float | None = None,
                       peak_dtype: str | None = None) -> Result:
    """Efficiency and NVML tables per rank (module docstring), their rows as facts.

    ``flops_per_step`` / ``peak_tflops`` replace those of ``thresholds`` (see Thresholds);
    ``peak_dtype`` ("fp32", "tf32", "bf16", "fp8", "fp4") judges every FLOP against that
    precision's peak instead of the one each GEMM ran in."""
    rows = [rank_efficiency(r, rd, run.meta, peak_dtype=peak_dtype)
            for r, rd in sorted(run.ranks.items()) if rd.has_gpu]
    return combine_efficiency(rows, with_mfu_options(thresholds, flops_per_step, peak_tflops))


def rank_efficiency(rank: int, rd: RankData, run_meta: dict, *,
                    peak_dtype: str | None = None) -> tuple[dict, dict | None]:
    """One GPU rank's efficiency facts and NVML row (None without samples)."""
    eff = efficiency_row(rank, rd, run_meta, peak_dtype)
    return eff, nvml_row(rank, rd, run_meta, eff)


def combine_efficiency(rows: list[tuple[dict, dict | None]],
                       thresholds: Thresholds = DEFAULT) -> Result:
    """:func:`analyze_efficiency` from the GPU ranks' :func:`rank_efficiency`, in rank order;
    MFU is judged here, with the thresholds' options."""
    if not rows:
        return no_gpu_result(TABLES, "efficiency analysis")
    effs = [judge_mfu(eff, thresholds) for eff, _ in rows]
    nvml = [row for _, row in rows if row is not None]
    tables = {"efficiency": pd.DataFrame(effs, columns=list(EFFICIENCY_COLUMNS)),
              "nvml": pd.DataFrame(nvml, columns=list(NVML_COLUMNS)) if nvml
              else empty(NVML_COLUMNS)}
    return Result(tables=tables, facts={"topic": "efficiency", "thresholds": thresholds,
                                        "efficiency_rows": effs,
                                        "nvml_rows": nvml})
