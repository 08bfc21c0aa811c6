"""A finding's evidence as one short line for text and Markdown: the 2-4 numbers that matter
for its category, with units (``others wait 1.47 ms/step (14.1% of their step), last at 18
of 18 collectives``). The JSON report keeps every key.

Each category lists items: a template and the evidence keys filling it, each key with the
unit it is read in (``key:fmt``; without one, by the key's own unit suffix). An item whose
keys are missing is left out, and so is one marked ``?`` whose values are all zero; a
part's finding without a list gets its share and threshold, any other category the first
few keys, named."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from profkit.analyzers import units as U
from profkit.analyzers.measure.fusion import SEQUENCE_SEP
from profkit.analyzers.parts import FLAGGED

from profkit.classify.names import short_kernel_name
from profkit.textout import plural

MAX_ITEMS = 4
MAX_CHARS = 200  # one evidence line, at most
GENERIC_ITEMS = 3


def _calls(calls: Any) -> str:
    if not isinstance(calls, dict):
        return U.MISSING
    top = sorted(calls.items(), key=lambda kv: -kv[1])[:3]
    return ", ".join(f"{name} x{n}" for name, n in top)


def _kernels(sequence: Any) -> str:
    names = str(sequence).split(SEQUENCE_SEP)
    return " > ".join(short_kernel_name(n) for n in names)


FORMATS: dict[str, Callable[[Any], str]] = {
    "ms": U.ms, "ms/step": lambda v: U.ms(v, "step"), "ns": U.ms_of_ns,
    "ns/step": lambda v: U.ms_of_ns(v, "step"), "pct": U.pct, "size": U.size,
    "gbps": U.gbps, "tflops": U.tflops, "num": U.number, "x": lambda v: f"{U.number(v)}x",
    "count": lambda v: str(len(v)) if isinstance(v, (list, dict)) else U.number(v),
    "list": lambda v: ", ".join(map(str, v[:3])) if isinstance(v, list) else str(v),
    "calls": _calls, "kernels": _kernels, "text": lambda v: U.clip(str(v), 60),
    "slow_calls": lambda v: plural(int(v), "slow call") if U.finite(v) is not None else U.MISSING,
}

_PART = (("{} ({} of a {} step)", "ms_per_step:ms/step", "fraction:pct", "step_time_ms:ms"),
         ("threshold {}", "threshold:pct"))
_CODE = (("?the GPU idled {} in {}", "code_idle_ms_per_step:ms/step", "code:text"),)
ITEMS: dict[str, tuple[tuple[str, ...], ...]] = {
    "straggler": (
        ("others wait {} ({} of their step)", "others_exposed_wait_ns_per_step", "wait_frac"),
        ("last at {} of {} collectives", "n_last:num", "n_collectives:num"),
        ("its compute {} vs {}", "compute_ns_per_step", "others_compute_ns_per_step")),
    "straggler_row": (  # the analysis' ``stragglers`` rows (ms already)
        ("others wait {} ({} of their step)", "others_wait_ms_per_step", "wait_frac"),
        ("arrived last at {} collectives", "arrived_last:text"),
        ("its compute {} vs {}", "compute_ms_per_step", "others_compute_ms_per_step")),
    "compute": (("{} of the step in compute kernels", "fraction:pct"),),
    "communication": _PART + (
        ("{} large collectives at {} of the {} link", "collectives:num", "median_link_util:pct",
         "link_gbps:gbps"),
        ("{} slower than its peers ({} vs {})", "slowdown:x", "median_latency_us",
         "peer_median_latency_us"),
        ("ranks {}", "ranks:text")),
    "cpu_launch": _PART[:1] + (
        ("?{} of it right after a blocking sync", "after_sync_share:pct"),
        ("{} launch calls, median {}", "launch.launch_calls:num", "launch.launch_median_ns"),
        ("{} short kernels", "launch.short_frac:pct")) + _CODE,
    "host_work": _PART[:1] + (("?{} of it right after a blocking sync", "after_sync_share:pct"),
                              ("?plus {} blocked in the syncs", "round_trip_sync_ms_per_step:ms/step"))
    + _CODE,
    "data_loading": _PART + _CODE,
    "host_sync": _PART[:1] + (("?{} in blocking copies", "blocking_copy_share:pct"),) + _PART[1:]
    + _CODE,
    "memcpy": _PART[:1] + (
        ("{} at {} (link peak {})", "top_direction:text", "achieved_gbps:gbps", "peak_gbps:gbps"),
        ("?overlapping the copies could save {}", "overlap_saving_ms:ms/step")),
    "mfu": (("MFU {}", "mfu:pct"), ("?HFU {}", "hfu:pct"),
            ("{} of {}", "achieved_tflops:tflops", "peak_tflops:tflops"),
            ("FLOP coverage {}", "flop_coverage:pct"), ("precision {}", "precision_mix:text"),
            ("FLOP coverage {} to {} (needs {})", "flop_coverage_min:pct",
             "flop_coverage_max:pct", "min_flop_coverage_frac:pct")),
    "precision": (("fp32 GEMMs {} of {} GEMM time", "fp32_gemm_ns_per_step:ns/step",
                   "gemm_ns_per_step:ns/step"),
                  ("in bf16 about {}", "bf16_estimate_ns_per_step:ns/step"),
                  ("tensor cores {} of GEMM time", "tensor_core_gemm_frac:pct"),
                  ("device {}", "device_model:text")),
    "recompute": (("{} of GPU time ({})", "gpu_frac:pct", "recompute_ns:ns/step"),
                  ("{} forward region(s) per step", "regions:num"),
                  ("?{} of the executed FLOPs", "flop_frac:pct"),
                  ("activations {}, peak without checkpointing {} of {}", "activation_bytes",
                   "peak_without_bytes", "capacity_bytes")),
    "fp8": (("{} ({} of the step)", "quant_ns_per_step:ns/step", "fraction:pct"),
            ("fp8 GEMMs {}", "fp8_gemm_ns_per_step:ns/step"),
            ("bf16 GEMMs {}, in fp8 about {} (fused quantisation: {} saved)",
             "bf16_gemm_ns_per_step:ns/step", "fp8_estimate_ns_per_step:ns/step",
             "fused_saving_ns_per_step:ns/step")),
    "attention": (("{} of the step ({})", "fraction:pct", "attention_ns:ns/step"),
                  ("?fused, at a flash kernel's rate, about {}", "flash_estimate_ns:ns/step"),
                  ("?score matrices kept for the backward {}", "score_bytes:size")),
    "memory_bound": (("{} of the step ({})", "fraction:pct", "memory_ms_per_step:ms/step"),
                     ("{} of {} peak", "achieved_gbps:gbps", "peak_gbps:gbps"),
                     ("?math-bound {}", "math_ms_per_step:ms/step"),
                     ("?fused: {} instead of {} per step", "fusable_chains.min_bytes:size",
                      "fusable_chains.bytes:size"),
                     ("DRAM {}% of peak by NVML GPM vs {}% estimated", "gpm_dram_bw_pct:num",
                      "estimated_dram_bw_pct:num")),
    "throttling": (("SM clock min {}, mean {}", "sm_clock_min_mhz", "sm_clock_mean_mhz"),
                   ("{} of {} samples held back", "throttle_samples:num", "clock_samples:num"),
                   ("reasons {}", "throttle_reasons:text")),
    "compile": (("{} compiling in a {} step", "compile_ms_per_step:ms",
                 "compiling_step_ms:ms"),
                ("?{} Dynamo frame compiles", "frame_compiles:num"),
                ("?Inductor {}", "phase_ms_per_step.inductor:ms/step"),
                ("?AOTAutograd {}", "phase_ms_per_step.aot_autograd:ms/step"),
                ("?Dynamo {}", "phase_ms_per_step.dynamo:ms/step"),
                ("?autotuning {}", "phase_ms_per_step.autotune:ms/step")),
    "memory": (("peak {} of {} ({})", "peak_mem_bytes", "mem_capacity_bytes", "peak_mem_frac"),),
    "allocations": (("reserved {} of {} ({})", "peak_reserved_bytes", "capacity_bytes",
                     "peak_frac"),
                    ("resident {}, transient {} per step", "resident_bytes", "transient_bytes")),
    # the allocator's findings (findings/memoryrisks.py)
    "near_capacity": (("allocated {}, reserved {} of {}", "peak_allocated_bytes",
                       "peak_reserved_bytes", "capacity_bytes"),
                      ("op at the peak {}", "op_at_peak:text")),
    "fragmentation": (("reserved {} for {} allocated ({})", "peak_reserved_bytes",
                       "peak_allocated_bytes", "reserved_over_allocated:x"),
                      ("would give back {}", "giveback_bytes")),
    "allocator_churn": (("{} calls per step taking {}", "calls_per_step:num",
                         "call_ms_per_step:ms/step"),
                        ("GPU stalled {}", "idle_ms_per_step:ms/step"),
                        ("launch overhead {} folded in", "cpu_launch.fraction:pct")),
    "out_of_memory": (("step {}", "step:num"), ("tried to allocate {}", "tried_bytes"),
                      ("last allocation {}, reserved then {} of {}", "last_alloc_bytes",
                       "last_reserved_bytes", "capacity_bytes")),
    "idle_code": (("GPU idle {}", "idle_ms_per_step:ms/step"),
                  ("longest: {} ({})", "top.0.code:text", "top.0.ms_per_step:ms/step")),
    "runtime_calls": (("{}, {} ({} of the step)", "slow_runtime_calls:slow_calls",
                       "slow_runtime_ns", "slow_frac:pct"), ("{}", "calls:calls")),
    "fusion": (("{} sequences, the first x{}", "sequences:count", "counts.0:num"),
               ("first: {}", "sequences.0:kernels")),
    "trace": (("{} kernel launches, {} with a GPU record", "kernel_launches:num",
               "launches_with_gpu_record:num"),
              ("{} captured launches, {} capture calls", "captured_launches:num",
               "capture_calls:num"), ("{} GPU ops ran", "gpu_records:num")),
    "collectives": (("{} of {} rows unmatched", "unmatched_rows:num", "rows:num"),
                    ("matched by {}", "key_modes:list"),
                    ("rank {} waits {} of a step", "rank:num", "wait_frac:pct")),
    "hbm_roof": (("{} kernel(s), {} of kernel time", "count:num", "share:pct"),
                 ("first: {} at {} of DRAM peak ({})", "first_short_name:text",
                  "first_dram_pct", "first_dram_gbps:gbps")),
    "memory_access": (("{} kernel(s), {} of kernel time", "count:num", "share:pct"),
                      ("first: {} at {} of DRAM peak, L2 hit {}", "first_short_name:text",
                       "first_dram_pct", "first_l2_hit_pct"),
                      ("stalls {}", "first_top_stalls:text")),
    "tensor_cores": (("{} kernel(s), {} of kernel time", "count:num", "share:pct"),
                     ("first: {} SM {}, FMA pipe {}, tensor pipe {}", "first_short_name:text",
                      "first_sm_pct", "first_fma_pct", "first_tensor_pct")),
    "estimate_mismatch": (("{} kernel(s)", "count:num"),
                          ("first: {} estimated {}, measured {} ({})", "first_short_name:text",
                           "first_est_bytes", "first_dram_bytes", "first_bytes_ratio:x")),
    # inference (findings/inference.py)
    "decode_batch": (("{} tokens/s at batch {}", "tokens_per_s:count", "batch:num"),
                     ("HBM {} of its bandwidth", "hbm_util:pct"),
                     ("roof {} per token", "roof_ms_per_token:ms")),
    "prefill_roof": (("MFU {}", "mfu:pct"), ("GPU busy {}", "gpu_busy:pct"),
                     ("{} of the step", "share:pct")),
    "launch": (("{} short kernels", "short_frac:pct"),
               ("launch calls {} of the step", "launch_time_frac:pct"),
               ("GPU busy {}", "kernel_busy_frac:pct")),
}


def evidence_text(category: str, evidence: dict[str, Any] | None) -> str:
    """The evidence of a finding of ``category`` as one line of at most :data:`MAX_CHARS`."""
    evidence = evidence or {}
    # a part without a list of its own (held work, a new part) says its share and threshold
    items = ITEMS.get(category) or (_PART if category in FLAGGED else None)
    parts = _items(items, evidence) if items else _generic(evidence)
    return U.clip(", ".join(parts[:MAX_ITEMS]), MAX_CHARS)


def _items(items: tuple[tuple[str, ...], ...], evidence: dict[str, Any]) -> list[str]:
    out = []
    for template, *keys in items:
        values = [_lookup(evidence, k.split(":")[0]) for k in keys]
        if any(v is None for v in values):
            continue
        if template.startswith("?"):  # worth saying only when not zero
            template = template[1:]
            if all(U.finite(v) == 0 for v in values):
                continue
        texts = [_format(k, v) for k, v in zip(keys, values)]
        if U.MISSING not in texts:
            out.append(template.format(*texts))
    return out


def _lookup(evidence: dict[str, Any], path: str) -> Any:
    """``launch.short_frac``, ``top.0.code``: nested dicts and lists."""
    value: Any = evidence
    for step in path.split("."):
        if isinstance(value, dict):
            value = value.get(step)
        elif isinstance(value, list) and step.isdigit() and int(step) < len(value):
            value = value[int(step)]
        else:
            return None
    return value


def _format(key: str, value: Any) -> str:
    name, _, fmt = key.partition(":")
    return FORMATS[fmt](value) if fmt else U.by_key(name.split(".")[-1], value)


def _generic(evidence: dict[str, Any]) -> list[str]:
    scalars = [(k, v) for k, v in evidence.items() if not isinstance(v, (dict, list, tuple))]
    return [U.clip(f"{k.replace('_', ' ')} {U.by_key(k, v)}", 60)
            for k, v in scalars[:GENERIC_ITEMS]]
