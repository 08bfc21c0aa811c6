"""The step parts: every instant of a step is charged to exactly one of them
(``measure/charge.py``). This table is the one place a part is declared; the charged-time
model's columns, the verdict's wording, the findings' wording, thresholds and advice, the
savings, the report's colours and the dashboard's (CSS variables included) all read it.
Adding a part is one row here, its charging rule (``measure/charge.py``) and, when it is
flagged, its threshold on :class:`~profkit.analyzers.thresholds.Thresholds`.

Everything derived from the table (:data:`PARTS`, :data:`HOST_SIDE`, :data:`PART_COLORS`
...) reads :data:`PART_TABLE` each time it is used, not once at import: a module that
imported ``PARTS`` sees a part added to the table afterwards (the test of a new part adds
one for the length of a test).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Part:
    """One part of a step.

    key: the column of the step tables and the key of the JSON report (``memcpy``).
    label: how it reads in headers, charts and legends (``transfer``).
    name: how it reads in a sentence of the report, with its explanation where it needs one
      (``held work (queued, waiting on a stream or event)``); the label, then the
      explanation in brackets.
    finding: how a finding on it says what the time is (``memory transfer``).
    color: its colour in every chart, and the dashboard's CSS variable ``--<key>``.
    notebook_color: its colour in the notebook's HTML (``report/html.py``), from a
      colour-blind-safe palette (Okabe & Ito).
    threshold: the :class:`~profkit.analyzers.thresholds.Thresholds` attribute (a fraction
      of the step) above which it is a finding; empty: never one from its share alone
      (compute is judged by the efficiency findings).
    meaning: what a finding on it says the time means (``the GPU is busy copying memory``).
    advice: what a finding on it recommends.
    saving: how removing it would shorten the step: a rule of
      ``findings/savings.py``'s ``SAVING_RULES``; empty: no estimate.
    host_side: the host starves the GPU (launch overhead, host work): the verdict counts the
      host-side parts together.
    host_idle: the GPU idles on its host (the host-side parts, data loading and host
      syncs): a straggler's host lateness and the code the GPU waits on count these.
    finding_order: where its finding comes among a rank's part findings before they are
      ordered by saving and severity (so only findings equal in both keep this order).
    cited: the table a finding on it points at (the dashboard's Tables page).
    optional: shown in the text and Markdown rank tables (and their legend) only where some
      rank has time in it: the pipeline bubble, zero on every run that is not a pipeline.
    """

    key: str
    label: str
    name: str
    finding: str
    color: str
    notebook_color: str
    threshold: str = ""
    meaning: str = ""
    advice: str = ""
    saving: str = ""
    host_side: bool = False
    host_idle: bool = False
    finding_order: int = 100
    cited: str = ""
    optional: bool = False


PART_TABLE: tuple[Part, ...] = (
    Part("compute", "compute", "compute", "compute", "#2563eb", "#0072B2",
         cited="compute_subclasses"),
    Part("communication", "communication", "communication", "communication", "#f59e0b",
         "#E69F00", threshold="communication_frac",
         meaning="collectives are not hidden under compute",
         advice="Overlap communication with compute: tune DDP bucket_cap_mb, FSDP "
                "forward/backward prefetch, gradient accumulation (no_sync) or a larger batch "
                "per GPU; check the link bandwidth in the collectives table.",
         saving="collective_transfer", finding_order=1, cited="collectives"),
    # judged by the pipeline measurement (findings/pipeline.py: the schedule's theory, the
    # stages, the bubble model's saving), as compute is by the efficiency findings
    Part("pipeline_bubble", "pipeline bubble",
         "pipeline bubble (a stage waits for its neighbours)", "pipeline bubble", "#0891b2",
         "#009E73", cited="pipeline_stages", optional=True),
    Part("memcpy", "transfer", "transfer", "memory transfer", "#10b981", "#56B4E9",
         threshold="transfer_frac", meaning="the GPU is busy copying memory",
         advice="Move fewer bytes: keep data on the GPU between steps, copy in smaller dtypes "
                "(bf16/uint8 and convert on the GPU), and overlap the copies with compute on a "
                "side stream (prefetch the next batch while this one computes).",
         saving="copies", finding_order=6, cited="transfers"),
    Part("cpu_launch", "launch overhead", "launch overhead", "launch overhead", "#8b5cf6",
         "#D55E00", threshold="cpu_launch_frac",
         meaning="the GPU waits for the host to launch work",
         advice="Cut launch overhead: CUDA graphs (torch.compile(mode='reduce-overhead') or "
                "torch.cuda.graphs), fuse small ops with torch.compile, or a larger batch per "
                "launch.",
         saving="idle_time", host_side=True, host_idle=True, finding_order=3, cited="launches"),
    Part("host_work", "host work", "host work", "host work", "#be185d", "#882255",
         threshold="host_work_frac",
         meaning="the GPU waits while the host works without launching anything",
         advice="Move the host work off the critical path: run it in another thread or "
                "process, overlap it with the GPU work "
                "(launch the next step first), or move it onto the GPU (GPU transforms, a fused "
                "GPU optimizer). The evidence names the code the GPU waits on.",
         saving="idle_time", host_side=True, host_idle=True, finding_order=4, cited="launches"),
    Part("data_loading", "data loading", "data loading", "data loading", "#a16207", "#CC79A7",
         threshold="data_loading_frac", meaning="the GPU waits for the DataLoader",
         advice="Feed the GPU faster: DataLoader(num_workers>0, pin_memory=True, "
                "persistent_workers=True, prefetch_factor>=2); move per-sample CPU work out of "
                "__getitem__ or onto the GPU.",
         saving="idle_time", host_idle=True, finding_order=0, cited="idle_code"),
    Part("host_sync", "host sync", "host sync", "host sync", "#dc2626", "#F0E442",
         threshold="host_sync_frac",
         meaning="the host blocks in synchronisations while the GPU has nothing to do",
         advice="Remove per-step synchronisations: no .item()/.cpu()/print of tensors in the "
                "loop, log metrics every N steps, keep decisions on the GPU.",
         saving="blocking_sync", host_idle=True, finding_order=2, cited="idle_code"),
    Part("idle_other", "held work", "held work (queued, waiting on a stream or event)",
         "held work", "#9ca3af", "#999999", threshold="held_work_frac",
         meaning="launched work was held back on the GPU",
         advice="The work was queued but did not start: it waited on another stream or an "
                "event (cudaStreamWaitEvent, a dependency on a collective or a copy on another "
                "stream, another process sharing the GPU). Look at the timeline just before "
                "these gaps: the stream that the held work waits for, and what the host was "
                "doing to feed it.",
         finding_order=5, cited="stream_breakdown"),
)


class _Keys(Sequence):
    """The keys of the parts whose ``flag`` field is set (every part without one), in table
    order, as a tuple would give them; read from :data:`PART_TABLE` at each use."""

    def __init__(self, flag: str = ""):
        self._flag = flag

    def _now(self) -> tuple[str, ...]:
        return tuple(p.key for p in PART_TABLE if not self._flag or getattr(p, self._flag))

    def __getitem__(self, index):
        return self._now()[index]

    def __len__(self) -> int:
        return len(self._now())

    def __iter__(self) -> Iterator[str]:
        return iter(self._now())

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Sequence) and self._now() == tuple(other)

    __hash__ = None  # type: ignore[assignment]  # equal to a tuple, so not hashable as itself

    def __repr__(self) -> str:
        return repr(self._now())


class _Field(Mapping):
    """{part key: its ``field``} (the :class:`Part` itself without one), in table order;
    read from :data:`PART_TABLE` at each use."""

    def __init__(self, field: str = ""):
        self._field = field

    def __getitem__(self, key: str) -> Any:
        for p in PART_TABLE:  # eight rows: a scan costs less than building a dict
            if p.key == key:
                return getattr(p, self._field) if self._field else p
        raise KeyError(key)

    def __len__(self) -> int:
        return len(PART_TABLE)

    def __iter__(self) -> Iterator[str]:
        return iter([p.key for p in PART_TABLE])

    def __repr__(self) -> str:
        return repr(dict(self))


PARTS: Sequence[str] = _Keys()
HOST_SIDE: Sequence[str] = _Keys("host_side")
HOST_IDLE: Sequence[str] = _Keys("host_idle")
FLAGGED: Sequence[str] = _Keys("threshold")  # parts with a finding of their own
SAVING_PARTS: Sequence[str] = _Keys("saving")
BY_KEY: Mapping[str, Part] = _Field()
PART_NAMES: Mapping[str, str] = _Field("name")
PART_COLORS: Mapping[str, str] = _Field("color")
NOTEBOOK_COLORS: Mapping[str, str] = _Field("notebook_color")


def part_name(part: str) -> str:
    """How a part reads in a sentence: ``memcpy`` is ``transfer``; any other text (a kernel
    class) as it is."""
    found = BY_KEY.get(part)
    return found.name if found else part


def part_label(part: str) -> str:
    """How a part reads in a header or a legend: ``held work`` (:func:`part_name` without
    its explanation in brackets)."""
    found = BY_KEY.get(part)
    return found.label if found else part.split(" (")[0]


def finding_parts() -> list[Part]:
    """The parts that are findings of their own (a threshold), in the order their findings
    are made (:attr:`Part.finding_order`)."""
    return sorted((p for p in PART_TABLE if p.threshold), key=lambda p: p.finding_order)
