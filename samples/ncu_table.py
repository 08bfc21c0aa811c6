"""Per-kernel table of an ncu --csv metrics log (as samples/capture_why.sh writes them).

    python samples/ncu_table.py samples/runs/why/ncu/eltwise_chain.csv [...]

One row per profiled kernel: duration, DRAM bytes read and written, achieved DRAM GB/s, the
tensor-pipe (HMMA) and FP32-FMA-pipe activity, and the fp32 FLOPs counted from SASS
instructions (2 x FFMA + FADD + FMUL, per thread); then the totals. Standard library only.
"""

from __future__ import annotations

import csv
import sys
from collections import OrderedDict

COLUMNS = {
    "gpu__time_duration.sum": "us",
    "dram__bytes_read.sum": "read_MB",
    "dram__bytes_write.sum": "write_MB",
    "dram__throughput.avg.pct_of_peak_sustained_elapsed": "dram_%",
    "sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active": "tensor_%",
    "sm__pipe_fma_cycles_active.avg.pct_of_peak_sustained_active": "fma_%",
}
SCALE = {"us": {"ns": 1e-3, "nsecond": 1e-3, "us": 1.0, "usecond": 1.0, "ms": 1e3, "msecond": 1e3},
         "read_MB": {"byte": 1e-6, "Kbyte": 1e-3, "Mbyte": 1.0, "Gbyte": 1e3},
         "write_MB": {"byte": 1e-6, "Kbyte": 1e-3, "Mbyte": 1.0, "Gbyte": 1e3}}
FP32 = {"smsp__sass_thread_inst_executed_op_ffma_pred_on.sum": 2,
        "smsp__sass_thread_inst_executed_op_fadd_pred_on.sum": 1,
        "smsp__sass_thread_inst_executed_op_fmul_pred_on.sum": 1}


def short(name: str, width: int = 60) -> str:
    name = name.replace("void ", "")
    return name if len(name) <= width else name[:width - 3] + "..."


def table(path: str) -> str:
    kernels: OrderedDict[str, dict] = OrderedDict()
    with open(path, newline="") as f:
        for row in csv.DictReader(f):
            k = kernels.setdefault(row["ID"], {"name": row["Kernel Name"], "fp32_gflop": 0.0})
            metric, unit = row["Metric Name"], row["Metric Unit"]
            value = float(row["Metric Value"].replace(",", "") or "nan")
            if metric in COLUMNS:
                col = COLUMNS[metric]
                k[col] = value * SCALE.get(col, {}).get(unit, 1.0)
            elif metric in FP32:
                k["fp32_gflop"] += FP32[metric] * value / 1e9
    cols = ["us", "read_MB", "write_MB", "GB/s", "dram_%", "tensor_%", "fma_%", "fp32_gflop"]
    lines = [f"{path}: {len(kernels)} kernels",
             f"{'id':>3} {'kernel':60} " + " ".join(f"{c:>10}" for c in cols)]
    total = dict.fromkeys(["us", "read_MB", "write_MB", "fp32_gflop"], 0.0)
    for kid, k in kernels.items():
        if k.get("us"):
            k["GB/s"] = (k.get("read_MB", 0) + k.get("write_MB", 0)) / k["us"] * 1e3
        for c in total:
            total[c] += k.get(c, 0.0)
        lines.append(f"{kid:>3} {short(k['name']):60} "
                     + " ".join(f"{k.get(c, float('nan')):10.1f}" for c in cols))
    gbps = ((total["read_MB"] + total["write_MB"]) / total["us"] * 1e3 if total["us"]
            else float("nan"))
    lines.append(f"    {'TOTAL':60} {total['us']:10.1f} {total['read_MB']:10.1f} "
                 f"{total['write_MB']:10.1f} {gbps:10.1f} {'':>10} {'':>10} {'':>10} "
                 f"{total['fp32_gflop']:10.1f}")
    return "\n".join(lines)


def main(argv: list[str]) -> None:
    for path in argv:
        print(table(path))
        print()


if __name__ == "__main__":
    main(sys.argv[1:])
