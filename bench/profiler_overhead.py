"""Step-time overhead of profkit.profile against plain torch.profiler and no profiler.

    python bench/profiler_overhead.py [--rounds 6] [--active 8]       # on a CUDA GPU

One process, the sample GPT (samples/model.py) training on one GPU. Each round runs the
three modes one after another, in a rotating order so drift is shared; each mode opens a
fresh profiler with the same schedule (wait=1, warmup=1, active=N) and settings
(record_shapes, profile_memory, with_flops), and the N active steps are timed with CUDA
events (all but the first and last, which include starting and stopping the profiler).
Prints a table: median step time per mode over all rounds, and the ratios.
profkit adds its NVML sampler (10 Hz) and run metadata on top of the same torch.profiler.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "samples"))
from model import GPT, GPTConfig  # noqa: E402

SETTINGS = dict(record_shapes=True, profile_memory=True, with_flops=True)


def make_step(batch: int, seq: int):
    cfg = GPTConfig(n_layer=4, dim=1024, n_head=16, max_seq=seq)
    model = GPT(cfg).cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
    tokens = torch.randint(0, cfg.vocab_size, (batch, seq + 1), device="cuda")

    def step() -> None:
        with torch.autocast("cuda", dtype=torch.bfloat16):
            logits = model(tokens[:, :-1])
            loss = torch.nn.functional.cross_entropy(logits.flatten(0, 1), tokens[:, 1:].flatten())
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    return step


def profiler(mode: str, out: Path, active: int):
    if mode == "none":
        return None
    if mode == "torch":
        tp = torch.profiler
        return tp.profile(activities=[tp.ProfilerActivity.CPU, tp.ProfilerActivity.CUDA],
                          schedule=tp.schedule(wait=1, warmup=1, active=active, repeat=1),
                          on_trace_ready=lambda p: p.export_chrome_trace(str(out / "t.json")),
                          **SETTINGS)
    from profkit.collectors import profile
    return profile(out, wait=1, warmup=1, active=active, nvml=True, nvml_hz=10.0, **SETTINGS)


def timed_round(mode: str, step, active: int) -> list[float]:
    """Median-able step times (ms) of the active steps of one fresh profiler."""
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(active + 1)]
    with tempfile.TemporaryDirectory() as tmp:
        prof = profiler(mode, Path(tmp), active)
        ctx = prof if prof is not None else _Null()
        with ctx:
            for i in range(2 + active + 1):  # wait, warmup, active, one more to close it
                if i >= 2:
                    starts[min(i - 2, active)].record()
                step()
                if prof is not None:
                    prof.step()
        torch.cuda.synchronize()
    times = [a.elapsed_time(b) for a, b in zip(starts[:-1], starts[1:])]
    # The first active step pays for the profiler starting, the last for it stopping and
    # exporting the trace: both are outside the steady state being compared.
    return times[1:-1]


class _Null:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--active", type=int, default=8)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--seq", type=int, default=512)
    args = ap.parse_args()
    step = make_step(args.batch, args.seq)
    for _ in range(5):
        step()
    modes = ["none", "torch", "profkit"]
    times: dict[str, list[float]] = {m: [] for m in modes}
    for r in range(args.rounds):
        for mode in modes[r % 3:] + modes[:r % 3]:
            times[mode] += timed_round(mode, step, args.active)
    med = {m: statistics.median(v) for m, v in times.items()}
    print(f"GPU: {torch.cuda.get_device_name()}  torch {torch.__version__}  "
          f"{args.rounds} rounds x {args.active} active steps per mode")
    print(f"{'mode':10s} {'median ms':>10s} {'vs none':>8s} {'vs torch':>9s}  (p10..p90 ms)")
    for m in modes:
        v = sorted(times[m])
        p10, p90 = v[len(v) // 10], v[(9 * len(v)) // 10]
        print(f"{m:10s} {med[m]:10.3f} {med[m] / med['none']:8.3f}x {med[m] / med['torch']:8.3f}x"
              f"  ({p10:.3f}..{p90:.3f})")


if __name__ == "__main__":
    main()
