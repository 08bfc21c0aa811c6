"""Zoo: balanced control for straggler.py. Identical DDP work on every rank.

The same DDP MLP as straggler.py with no extra work anywhere: the ranks reach each gradient
all_reduce together, so collective waits are small and symmetric and no rank stands out.

    torchrun --standalone --nproc_per_node 2 samples/zoo/balanced.py --out RUN
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from straggler import main  # noqa: E402

if __name__ == "__main__":
    main(straggler=False)
