#!/usr/bin/env python
"""Coverage-guided fuzzing of the native reader against the pure-Python reader (atheris).

    pip install atheris
    python bench/fuzz_native_atheris.py [-max_total_time=300] [-runs=N] [CORPUS_DIR]

libFuzzer's mutations of the seeds of tests/nativefuzz (small real traces) are read by both
readers; any difference in the tables, metadata, problems or error (or a crash) stops the
run with the input saved as ``crash-*``. Coverage guides it through the Python side (the
feed, the decoders, the fallbacks); the C scanner is not instrumented (that needs clang's
-fsanitize=fuzzer-no-link; native/kineto/fuzz_scan.c fuzzes it under gcc's sanitizers).
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

import atheris

with atheris.instrument_imports():
    import msgspec
    import pandas as pd

    from profkit.errors import TraceError
    from profkit.trace import tracefile
    from profkit.trace.ingest import build_tables

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from nativefuzz.seeds import write_seeds  # noqa: E402

_PATH = Path(tempfile.mkdtemp()) / "case.json"


def _read(pure: bool):
    os.environ["PROFKIT_PURE_PYTHON"] = "1" if pure else "0"
    try:
        trace = tracefile.load(_PATH)
    except TraceError as exc:
        return "error", exc.problem
    tables, metadata = build_tables(trace)
    return tables, [msgspec.json.encode(m) for m in metadata], list(trace.all_problems()), \
        len(trace)


def one_input(data: bytes) -> None:
    _PATH.write_bytes(data)
    oracle, fast = _read(True), _read(False)
    if oracle[0] == "error" or fast[0] == "error":
        assert fast == oracle, (oracle, fast)
        return
    for name, table in oracle[0].items():
        pd.testing.assert_frame_equal(fast[0][name], table, check_exact=True, obj=name)
    assert fast[1:] == oracle[1:]


def main() -> None:
    args = list(sys.argv)
    if not any(not a.startswith("-") for a in args[1:]):  # no corpus folder: the seeds
        corpus = Path(tempfile.mkdtemp())
        write_seeds(corpus)
        args.append(str(corpus))
    atheris.Setup(args, one_input)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
