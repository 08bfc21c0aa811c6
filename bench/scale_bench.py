#!/usr/bin/env python
"""How analysis cost grows with the number of ranks, on a local pool and on Dask.

    python bench/scale_bench.py [--ranks 8,64,256,1024] [--workers 2] [--work DIR]

Builds synthetic runs (``profkit.trace.synthetic``: the stock_ddp rank-0 trace warped per rank,
groups of 8, a planted straggler and a planted slow group) and analyses each, in a fresh
process, with the local process pool and with a Dask ``LocalCluster`` of the same number of
worker processes, ingest cache off (every trace parsed). Prints one table: wall time, the
map and reduce phases, the reduce's share, time per rank, peak memory of the whole process
tree (sampled from /proc every 50 ms) and of the driver alone, and whether the planted
straggler and slow group were found. Synthetic runs measure cost, not correctness.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SOURCE = next((REPO / "samples" / "runs" / "stock_ddp").glob("rank0.*.json.gz"))
GROUP = 8


def plant(n: int) -> tuple[int, int]:
    """(straggler rank, slow group) for an n-rank run: away from rank 0 and group 0."""
    return n * 5 // 8 + 1, (n // GROUP) // 2 if n >= 2 * GROUP else 0


def make(n: int, work: Path) -> Path:
    from profkit.trace.synthetic import make_run

    out = work / f"ranks{n}"
    if not (out / ".profkit" / "planted.json").exists():
        straggler, slow = plant(n)
        make_run(SOURCE, out, n, group_size=GROUP, straggler=straggler, slow_group=slow,
                 workers=2)
    return out


def tree_rss_bytes(pid: int) -> int:
    """Resident memory of ``pid`` and all its descendants."""
    children: dict[int, list[int]] = {}
    rss: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            rss[int(entry.name)] = int(stat[21]) * os.sysconf("SC_PAGE_SIZE")
            children.setdefault(int(stat[1]), []).append(int(entry.name))
        except (OSError, IndexError, ValueError):
            continue
    total, todo = 0, [pid]
    while todo:
        p = todo.pop()
        total += rss.get(p, 0)
        todo.extend(children.get(p, []))
    return total


def one(run: str, executor: str, workers: int) -> dict:
    """Analyse ``run`` in this process with ``executor``; phases timed separately."""
    from profkit.analyzers import executor as ex

    from profkit import datacodec

    peak = [0]
    stop = threading.Event()

    def sample() -> None:
        while not stop.is_set():
            peak[0] = max(peak[0], tree_rss_bytes(os.getpid()))
            time.sleep(0.05)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    t0 = time.perf_counter()
    client = cluster = None
    if executor == "dask":
        from dask.distributed import Client, LocalCluster

        cluster = LocalCluster(n_workers=workers, threads_per_worker=1, processes=True,
                               dashboard_address=":0")
        client = Client(cluster)
    t_up = time.perf_counter()
    root, folder, meta, files, skipped = ex.loader.open_run(run)
    tasks = ex.plan_tasks(folder, meta, files, False, None)
    results = list(ex._run_map(tasks, client, workers, None))
    t_map = time.perf_counter()
    analysis = ex.reduce_results(root, meta, files, skipped, results)
    t_reduce = time.perf_counter()
    stop.set()
    sampler.join()
    if client is not None:
        client.close()
        cluster.close()
    planted = json.loads((Path(run) / ".profkit" / "planted.json").read_text())
    slow = analysis.table("group_latency")
    slow_pgs = sorted(set(slow.loc[slow["slow"], "pg"])) if len(slow) else []
    return {
        "ranks": len(analysis.run["ranks_analyzed"]), "executor": executor,
        "startup_s": t_up - t0, "map_s": t_map - t_up, "reduce_s": t_reduce - t_map,
        "summary_mb": sum(len(datacodec.encode(r.summary)) for r in results) / 1e6,
        "tree_peak_mb": peak[0] / 2**20,
        "driver_peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "straggler_ok": _straggler_found(analysis.stragglers, planted),
        "slow_group_ok": slow_pgs == [f"group{planted['slow_group']}"],
    }


def _straggler_found(stragglers: list[dict], planted: dict) -> str:
    """"found" when the planted straggler is the costliest rank flagged; "+N" counts the
    other ranks flagged beside it (none should be: the slow group's lateness in the world's
    collective falls on its last rank, which the analysis excuses as the group's)."""
    cost = {s["rank"]: (s.get("evidence") or {}).get("others_wait_ms_per_step") or 0
            for s in stragglers}
    ranks = sorted(cost, key=cost.get, reverse=True)
    if not ranks or ranks[0] != planted["straggler"]:
        return "MISSED"
    return "found" + (f"+{len(ranks) - 1}" if len(ranks) > 1 else "")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--ranks", default="8,64,256,1024")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--work", type=Path, default=Path("/tmp/profkit-scale"))
    parser.add_argument("--executors", default="pool,dask", help="pool, dask or both")
    parser.add_argument("--flat", type=float, default=1.25,
                        help="target: ms per rank at any size at most this times the smallest "
                             "size's (per executor)")
    parser.add_argument("--one", nargs=2, metavar=("RUN", "EXECUTOR"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        print(json.dumps(one(args.one[0], args.one[1], args.workers)))
        return 0
    rows = []
    for n in [int(x) for x in args.ranks.split(",")]:
        run = make(n, args.work)
        mb = sum(f.stat().st_size for f in run.glob("*.json.gz")) / n / 1e6
        for executor in args.executors.split(","):
            out = subprocess.run([sys.executable, __file__, "--one", str(run), executor,
                                  "--workers", str(args.workers)],
                                 capture_output=True, text=True, check=True)
            row = json.loads(out.stdout.strip().splitlines()[-1])
            row["gz_mb_per_rank"] = mb
            rows.append(row)
            print(f"  {n} ranks, {executor}: {row['map_s'] + row['reduce_s']:.1f} s",
                  file=sys.stderr)
    print(f"\n{'ranks':>5} {'executor':>8} {'start s':>7} {'map s':>7} {'reduce s':>8} "
          f"{'reduce %':>8} {'ms/rank':>7} {'summ. MB':>8} {'tree MiB':>8} {'driver MiB':>10} "
          f"{'straggler':>9} {'slow grp':>8}")
    for r in rows:
        total = r["map_s"] + r["reduce_s"]
        print(f"{r['ranks']:>5} {r['executor']:>8} {r['startup_s']:>7.1f} {r['map_s']:>7.1f} "
              f"{r['reduce_s']:>8.2f} {100 * r['reduce_s'] / total:>7.1f}% "
              f"{1000 * total / r['ranks']:>7.0f} {r['summary_mb']:>8.1f} "
              f"{r['tree_peak_mb']:>8.0f} {r['driver_peak_mb']:>10.0f} "
              f"{r['straggler_ok']:>9} "
              f"{'found' if r['slow_group_ok'] else 'MISSED':>8}")
    for executor in args.executors.split(","):
        per_rank = {r["ranks"]: (r["map_s"] + r["reduce_s"]) / r["ranks"]
                    for r in rows if r["executor"] == executor}
        if len(per_rank) > 1:
            first, last = min(per_rank), max(per_rank)
            worst = max(per_rank.values()) / per_rank[first]
            print(f"target {executor}: ms/rank at {last} ranks {1000 * per_rank[last]:.0f} vs "
                  f"{1000 * per_rank[first]:.0f} at {first} (worst size {worst:.2f}x, "
                  f"flat <= {args.flat:g}x): {'PASS' if worst <= args.flat else 'FAIL'}")
    print(f"\nper-rank trace: {rows[0]['gz_mb_per_rank']:.2f} MB gzip "
          f"(stock_ddp rank 0, ~4 MB JSON); {args.workers} worker processes; cache off")
    return 0


if __name__ == "__main__":
    sys.exit(main())
