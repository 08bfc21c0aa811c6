"""charge.host_ranges (each thread's sync, DataLoader and launching time) against the
definition, row by row in plain Python, on random host events of three threads."""

import numpy as np
import pandas as pd
import pytest
from profkit.analyzers.measure.charge import HOST_KINDS, SYNC_CALLS, host_ranges

from profkit import intervals as iv
from profkit import schema as S

NAMES = ["cudaStreamSynchronize", "aten::item", "_MultiProcessingDataLoaderIter.__next__",
         "aten::mm", "aten::add", "cudaLaunchKernel", "ProfilerStep#3"]


def _frame(rng, n: int, kinds) -> pd.DataFrame:
    return pd.DataFrame({S.KIND: pd.Categorical(rng.choice(kinds, n), categories=S.KINDS),
                         S.NAME: pd.Categorical(rng.choice(NAMES, n), categories=NAMES),
                         S.TID: rng.choice([4, 9, 11], n), S.TS_NS: rng.integers(0, 5000, n),
                         S.DUR_NS: rng.integers(0, 80, n), S.EXTERNAL_ID: rng.integers(-1, 60, n)})


def _union(rows) -> dict:
    out: dict = {}
    for tid, ts, dur in rows:
        out.setdefault(tid, []).append((ts, ts + dur))
    return {t: iv.union([a for a, _ in r], [b for _, b in r]) for t, r in out.items()}


@pytest.mark.parametrize("seed", range(5))
def test_host_ranges_are_each_threads_unions(seed):
    rng = np.random.default_rng(seed)
    ev = _frame(rng, 600, [S.KIND_CPU_OP, S.KIND_RUNTIME, S.KIND_PYTHON, S.KIND_KERNEL])
    blocked = _frame(rng, 20, [S.KIND_RUNTIME])
    launch = _frame(rng, 80, [S.KIND_RUNTIME])
    got = host_ranges(ev, blocked, launch)
    rows = list(zip(ev[S.KIND].astype(str), ev[S.NAME].astype(str), ev[S.TID], ev[S.TS_NS],
                    ev[S.DUR_NS], ev[S.EXTERNAL_ID]))
    launched = set(launch[S.EXTERNAL_ID])

    def plain(frame):
        return [(t, s, d) for t, s, d in zip(frame[S.TID], frame[S.TS_NS], frame[S.DUR_NS])]

    want = {
        "sync": _union([(t, s, d) for k, n, t, s, d, _ in rows if k in HOST_KINDS
                        and n in SYNC_CALLS] + plain(blocked)),
        "loader": _union([(t, s, d) for k, n, t, s, d, _ in rows if k in HOST_KINDS
                          and "DataLoader" in n]),
        "launching": _union(plain(launch) + [(t, s, d) for k, _, t, s, d, e in rows
                                             if k == S.KIND_CPU_OP and e >= 0 and e in launched]),
    }
    for part in want:
        assert sorted(got[part]) == sorted(want[part]) and len(want[part]) == 3
        for tid in want[part]:
            assert [a.tolist() for a in got[part][tid]] == [a.tolist() for a in want[part][tid]]
