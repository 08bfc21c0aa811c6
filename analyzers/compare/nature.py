"""What kind of change went from one run to the other, in the words people use for it: "now
compiled (torch.compile)", "kernels fused: 16 -> 1 per step", "GEMMs now bf16 (were fp32)",
"attention now flash (was math)", "now replays CUDA graphs", "async TP now on", "batches now from DataLoader
worker processes", ".item() round trips per step: 50 -> 0".

Each is read from both analyses' used steps (kernels and CPU ops by name, their groups) and
their launch, efficiency and transfer tables; a fact one side does not show is not a change.
"""

from __future__ import annotations

import re

import pandas as pd
from profkit.analyzers.compare.sides import per_step, used_rank_steps

from profkit.classify.flops import kernel_precision

COMPILED_RE = re.compile(r"^Torch-Compiled Region|^CompiledFunction|^## Call CompiledFxGraph"
                         r"|^triton_")
FUSED_RE = re.compile(r"fused|^triton_", re.IGNORECASE)
# SDPA's backends as the ops it dispatches to name them (forward ops only)
ATTENTION_BACKENDS = {
    "aten::_scaled_dot_product_flash_attention": "flash",
    "aten::_flash_attention_forward": "flash",
    "aten::_scaled_dot_product_flash_attention_for_cpu": "flash (CPU)",
    "aten::_scaled_dot_product_efficient_attention": "memory-efficient",
    "aten::_efficient_attention_forward": "memory-efficient",
    "aten::_scaled_dot_product_cudnn_attention": "cuDNN",
    "aten::_scaled_dot_product_attention_math": "math",
    "aten::_scaled_dot_product_fused_attention_overrideable": "fused (vendor)",
}
DATALOADER_RE = re.compile(r"^enumerate\(DataLoader\)#_(\w+?)DataLoaderIter")
LOADERS = {"MultiProcessing": "DataLoader worker processes",
           "SingleProcess": "a DataLoader in the main process"}
ITEM_OPS = ("aten::_local_scalar_dense",)  # .item(), .tolist(), bool(tensor): a round trip
MIN_ITEMS = 10  # per step: fewer may be host tensors' (an optimizer's step counter)
COMPILE_OPS = ("inductor_compile",)  # Inductor compiling a graph (Dynamo + AOT run inside)
OPTIMIZER_RE = re.compile(r"^Optimizer\.step#")
COUNT_RATIO = 1.5  # counts per step this many times apart are a change worth naming
TIME_RATIO = 2.0  # host times per step this many times apart (and over MIN_HOST_MS)
MIN_HOST_MS = 1.0
BYTES_RATIO = 1.5
FLOP_RATIO = 1.5  # FLOP counts of one op differ by formula (flash vs math attention: ~10%)


def _names(a, table: str) -> list[str]:
    t = a.table(table)
    return [] if t.empty else [str(n) for n in t["name"].unique()]


def _annotations(a) -> list[str]:
    t = a.table("used_step_shapes")
    return [] if t.empty else [str(n) for n in t.loc[t["role"] == "annotation", "name"].unique()]


def _apart(x: float, y: float, ratio: float) -> bool:
    lo, hi = sorted((x, y))
    return hi > 0 and (lo == 0 or hi / lo >= ratio)


def compiled(a) -> bool:
    return any(COMPILED_RE.search(n) for n in _names(a, "used_step_ops") + _names(a, "used_step_kernels"))


def kernels_per_step(a) -> float:
    k = a.table("used_step_kernels")
    if k.empty:
        return 0.0
    if "group" in k:
        k = k[~k["group"].astype(str).str.startswith(("memcpy", "memset"))]
    return float(k["count"].sum()) / max(used_rank_steps(a), 1)


def _compile_and_fusion(base, new) -> list[str]:
    out = []
    was, now = compiled(base), compiled(new)
    if now and not was:
        out.append("now compiled (torch.compile)")
    elif was and not now:
        out.append("no longer compiled (torch.compile)")
    kb, kn = kernels_per_step(base), kernels_per_step(new)
    if kb and kn and _apart(kb, kn, COUNT_RATIO):
        fused = kn < kb and _fuses(base) < _fuses(new)
        out.append(f"{'kernels fused' if fused else 'GPU kernels'}: {kb:.0f} -> {kn:.0f} per step")
    compiles = [per_step(a, "used_step_ops", "count").reindex(COMPILE_OPS).fillna(0).sum()
                for a in (base, new)]
    if max(compiles) > 0 and compiles[0] != compiles[1]:
        out.append(f"torch.compile compiling inside the steps: {compiles[0]:.2g} -> "
                   f"{compiles[1]:.2g} compiles per step")
    return out


def _fuses(a) -> float:
    """Share of kernel time in fused kernels (Triton's, or named fused)."""
    k = a.table("used_step_kernels")
    if k.empty or k["total_ns"].sum() <= 0:
        return 0.0
    fused = k["name"].astype(str).map(lambda n: bool(FUSED_RE.search(n)))
    return float(k.loc[fused.to_numpy(), "total_ns"].sum() / k["total_ns"].sum())


def gemm_precision(a) -> str:
    """The precision most GEMM kernel time ran in ("" when no GEMM says)."""
    k = a.table("used_step_kernels")
    if k.empty or "group" not in k:
        return ""
    g = k[k["group"].astype(str) == "gemm"]
    if g.empty:
        return ""
    precision = g["name"].astype(str).map(kernel_precision)
    time = g.groupby(precision.to_numpy())["total_ns"].sum()
    time = time[time.index != ""]
    return str(time.idxmax()) if len(time) else ""


def attention_backends(a) -> list[str]:
    return sorted({ATTENTION_BACKENDS[n] for n in _names(a, "used_step_ops") if n in ATTENTION_BACKENDS})


def _precision_and_attention(base, new) -> list[str]:
    out = []
    ab, an = attention_backends(base), attention_backends(new)
    pb, pn = gemm_precision(base), gemm_precision(new)
    # SDPA's math backend runs its batched GEMMs in fp32 whatever the model's precision:
    # with the backend changed, the GEMMs' precision says nothing of the model's
    if pb and pn and pb != pn and ab == an:
        out.append(f"GEMMs now {pn} (were {pb})")
    if an and ab != an:
        out.append(f"attention now {', '.join(an)}" + (f" (was {', '.join(ab)})" if ab else ""))
    elif ab and not an:
        out.append(f"attention no longer through SDPA's {', '.join(ab)} backend")
    return out


def graph_launches(a) -> float:
    t = a.table("launches")
    if t.empty or "graph_launches" not in t:
        return 0.0
    steps = a.table("rank_breakdown")
    recorded = int(steps["steps_recorded"].sum()) if "steps_recorded" in steps else 0
    return float(t["graph_launches"].sum()) / max(recorded, 1)


def _graphs(base, new) -> list[str]:
    gb, gn = graph_launches(base), graph_launches(new)
    if gn and not gb:
        return [f"now replays CUDA graphs ({gn:g} graph launch{'' if gn == 1 else 'es'} per step)"]
    if gb and not gn:
        return ["no longer replays CUDA graphs"]
    return []


def loader(a) -> str:
    """How the used steps got their batches: a DataLoader kind, or "" (none seen)."""
    for n in _annotations(a):
        m = DATALOADER_RE.match(n)
        if m:
            return LOADERS.get(m.group(1), f"a {m.group(1)} DataLoader")
    return ""


def _data(base, new) -> list[str]:
    lb, ln = loader(base), loader(new)
    if ln and ln != lb:
        return [f"batches now from {ln}" + (f" (were from {lb})" if lb else " (were built in the step)")]
    if lb and not ln:
        return [f"batches no longer from {lb}"]
    return []


def _host(base, new) -> list[str]:
    out = []
    items = [float(per_step(a, "used_step_ops", "count").reindex(ITEM_OPS).fillna(0).sum())
             for a in (base, new)]
    if _apart(*items, COUNT_RATIO) and max(items) >= MIN_ITEMS:
        out.append(f".item() calls (host round trips) per step: {items[0]:g} -> {items[1]:g}")
    steps = [per_step(a, "used_step_ops", "total_ns") for a in (base, new)]
    opt = [float(s[[n for n in s.index if OPTIMIZER_RE.match(n)]].sum()) / 1e6 for s in steps]
    if _apart(*opt, TIME_RATIO) and max(opt) >= MIN_HOST_MS and min(opt) > 0:
        out.append(f"optimizer step on the host: {opt[0]:.1f} -> {opt[1]:.1f} ms per step")
    return out


def transfers(a) -> pd.DataFrame:
    """Host<->device copies per recorded step by direction and memory: copies, MB."""
    t = a.table("transfers")
    steps = a.table("rank_breakdown")
    recorded = int(steps["steps_recorded"].sum()) if "steps_recorded" in steps else 0
    if t.empty or not recorded:
        return pd.DataFrame(columns=["copies", "mb"])
    t = t[t["direction"].isin(["HtoD", "DtoH"])]
    out = t.groupby(["direction", "memory"])[["copies", "bytes"]].sum() / recorded
    return out.assign(mb=out["bytes"].fillna(0) / 1e6)[["copies", "mb"]]


def _side(t: pd.DataFrame, direction: str) -> pd.DataFrame:
    return t.xs(direction, level="direction") if direction in t.index.get_level_values(0) \
        else pd.DataFrame(columns=t.columns)


def _copies(base, new) -> list[str]:
    tb, tn = transfers(base), transfers(new)
    out = []
    for direction in ("HtoD", "DtoH"):
        b, n = _side(tb, direction), _side(tn, direction)
        sb, sn = float(b["mb"].sum()), float(n["mb"].sum())
        cb, cn = float(b["copies"].sum()), float(n["copies"].sum())
        b, n = b["mb"].to_dict(), n["mb"].to_dict()
        if _apart(sb, sn, BYTES_RATIO) and max(sb, sn) >= 1:
            out.append(f"{direction} copies per step: {cb:g} -> {cn:g} ({sb:.0f} -> {sn:.0f} MB)")
        elif b and n and max(b, key=b.get) != max(n, key=n.get) and sb >= 1:
            out.append(f"{direction} copies now mostly {max(n, key=n.get).lower()} memory "
                       f"(were {max(b, key=b.get).lower()})")
    return out


def flops_per_step(a) -> float:
    t = a.table("efficiency")
    if t.empty or "trace_flops" not in t or "steps" not in t:
        return 0.0
    steps = float(t["steps"].sum())
    return float(t["trace_flops"].fillna(0).sum()) / steps if steps else 0.0


def _work(base, new) -> list[str]:
    """Counted FLOPs per step, when both count alike: not across a compile (Triton kernels
    carry no FLOP count) nor with compilation in the steps (its tracing runs ops too)."""
    compiles = [per_step(a, "used_step_ops", "count").reindex(COMPILE_OPS).fillna(0).sum()
                for a in (base, new)]
    if compiled(base) != compiled(new) or max(compiles) > 0:
        return []
    fb, fn = flops_per_step(base), flops_per_step(new)
    if fb and fn and _apart(fb, fn, FLOP_RATIO):
        return [f"counted FLOPs per step: {fb / 1e12:.3g} -> {fn / 1e12:.3g} TFLOP "
                f"({fn / fb:.2g}x)"]
    return []


def tp_mode(a) -> str:
    """How the run's tensor parallelism communicates: "async" (symmetric-memory transfers
    overlapped with the matmuls), "sequence parallel", "all-reduce", or "" (none seen)."""
    t = a.table("tp_ranks")
    if t.empty or "async_tp" not in t:
        return ""
    if t["async_tp"].any():
        return "async"
    return "sequence parallel" if t["sequence_parallel"].any() else "all-reduce"


def _tp(base, new) -> list[str]:
    mb, mn = tp_mode(base), tp_mode(new)
    if not mb or not mn or mb == mn:
        return []
    if mn == "async":
        return [f"async TP now on (the matmuls overlap their collectives; was {mb} TP)"]
    return [f"TP now {mn} (was {mb})"]


def nature(base, new) -> list[str]:
    """The kinds of change between two analyses, in the words of the module doc."""
    return (_compile_and_fusion(base, new) + _precision_and_attention(base, new)
            + _graphs(base, new) + _tp(base, new) + _data(base, new) + _host(base, new)
            + _copies(base, new) + _work(base, new))
