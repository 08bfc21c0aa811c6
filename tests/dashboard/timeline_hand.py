"""A hand-built two-rank trace for the timeline tests: every time chosen by hand."""

from profkit.run.loader import load_run
from tests.factories import kernel, launch, step, trace_doc, write_trace, x


def hand_events() -> list[dict]:
    """Two steps whose CPU ranges and GPU work overlap (the CPU runs ahead), in us:

    step 2: CPU [0, 3000), kernels [1000, 2000) (launch 900..910, inside aten::mm 850..950)
            and [2420, 5000) (launch 2400..2410): span [0, 5000)
    step 3: CPU [3000, 6000), kernel [5000, 7000) (launch 3100..3110): span [3000, 7000)

    Disjoint windows: step 2 [0, 5) ms, step 3 [5, 7) ms. GPU idle: [0, 1000) before the
    first kernel: the host at work until its launch call at 900 (host_work [0, 900)), the
    call returning at 910 and then up to 50 us of launch latency (cpu_launch [900, 960)),
    idle_other [960, 1000); [2000, 2420), launched at 2400..2410, 2410 + 50 > 2420:
    host_work [2000, 2400), cpu_launch [2400, 2420).
    """
    return [step(2, 0, 3000), step(3, 3000, 3000), x("aten::mm", "cpu_op", 850, 100),
            launch(900, 10, corr=1), kernel("gemm", 1000, 1000, corr=1),
            launch(2400, 10, corr=2), kernel("gemm", 2420, 2580, corr=2),
            launch(3100, 10, corr=3), kernel("gemm", 5000, 2000, corr=3)]


def hand_run(folder):
    """The run of :func:`hand_events` on ranks 0 and 1, written to ``folder``."""
    for rank in (0, 1):
        write_trace(folder / f"rank{rank}.json",
                    trace_doc(rank=rank, world_size=2, events=hand_events()))
    return load_run(folder, cache=False)
