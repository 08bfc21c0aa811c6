"""Predicted vs measured savings on before/after pairs captured back to back.

Each pair is a workload with one cause present (``before``) and its twin with that cause
removed and the GPU work unchanged (``after``). The prediction is the ``estimated_saving``
of ``before``'s finding for the cause (a fraction of its step); the measurement is
``1 - step_after / step_before`` from the two traces' median used step times.

    python bench/savings_pairs.py [PAIRS_DIR]      # default: samples/runs/pairs

Prints a table (pair, cause, predicted, measured, |difference|) and exits non-zero when a
difference exceeds 0.15 (the issue's bar).
"""

from __future__ import annotations

import sys
from pathlib import Path

import tomllib

ROOT = Path(__file__).resolve().parents[1]
BAR = 0.15
PAIR_FILE = "pair.toml"  # cause, what; before/after when not the folders of those names


def pair_rows(pairs_dir: Path, analyse=None) -> list[dict]:
    """One row per pair; ``analyse(run folder)``: its analysis (default: analyze_run, in
    this process, no cache)."""
    from profkit.analyzers.executor import analyze_run

    analyse = analyse or (lambda run: analyze_run(run, cache=False, workers=1))
    rows = []
    for pair in sorted(p for p in pairs_dir.iterdir() if (p / PAIR_FILE).is_file()):
        spec = tomllib.loads((pair / PAIR_FILE).read_text())
        before = analyse(pair / spec.get("before", "before"))
        after = analyse(pair / spec.get("after", "after"))
        step_b = _step_ms(before)
        step_a = _step_ms(after)
        cause = spec["cause"]
        found = [f for f in before.findings if f.category == cause and f.estimated_saving]
        predicted = max((f.estimated_saving["fraction"] for f in found), default=0.0)
        measured = 1.0 - step_a / step_b
        rows.append({"pair": pair.name, "cause": cause, "before_ms": step_b, "after_ms": step_a,
                     "predicted": predicted, "measured": measured,
                     "difference": abs(predicted - measured), "what": spec.get("what", "")})
    return rows


def _step_ms(analysis) -> float:
    """The run's step time: the slowest rank's median used step (ranks of one synchronous
    job share it)."""
    return float(analysis.table("rank_breakdown")["step_time_ms"].max())


def main(argv: list[str]) -> int:
    pairs_dir = Path(argv[0]) if argv else ROOT / "samples" / "runs" / "pairs"
    rows = pair_rows(pairs_dir)
    print(f"{'pair':<22} {'cause':<13} {'before ms':>10} {'after ms':>9} {'predicted':>10} "
          f"{'measured':>9} {'|diff|':>7}")
    for r in rows:
        print(f"{r['pair']:<22} {r['cause']:<13} {r['before_ms']:>10.2f} {r['after_ms']:>9.2f} "
              f"{r['predicted']:>10.2f} {r['measured']:>9.2f} {r['difference']:>7.2f}")
    worst = max((r["difference"] for r in rows), default=0.0)
    print(f"{len(rows)} pairs; largest difference {worst:.2f} (bar {BAR})")
    return 0 if worst <= BAR else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
