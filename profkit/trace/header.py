"""The header facts of one Kineto trace, validated (see :mod:`profkit.validate`).

``distributedInfo``, ``deviceProperties``, ``baseTimeNanoseconds``, the host name, the ids and
the process and thread names of 'M' events become typed values; a value of the wrong type or out of
range falls back to "unknown" (the rank then comes from the file name, the base time is 0)
and is noted once in the file's problems.
"""

from __future__ import annotations

from typing import Any

from profkit.columns import stable_id
from profkit.validate import (
    MAX_ABS_NS,
    MAX_RANKS,
    Problems,
    as_dict,
    as_list,
    field_text,
    int_in,
    typed_record,
)

INT32_MAX = (1 << 31) - 1
_DIST_INTS = {"rank": (0, MAX_RANKS - 1), "world_size": (1, MAX_RANKS), "pg_count": (0, INT32_MAX)}
_DIST_TEXTS = ("backend",)
_DEVICE_INTS = {"id": (0, INT32_MAX), "numSms": (1, INT32_MAX), "totalGlobalMem": (0, MAX_ABS_NS)}
_DEVICE_TEXTS = ("name",)
_PROCESS_META = {"process_name": "name", "process_labels": "labels"}


def base_time_ns(value: Any, problems: Problems) -> int:
    """``baseTimeNanoseconds`` as epoch ns; 0 (timestamps read as absolute) when absent or
    not an integer within the int64-safe range."""
    if value is None:
        return 0
    out = int_in(value, 0, MAX_ABS_NS)
    if out is None:
        problems.bad("baseTimeNanoseconds", value, "is not an epoch time in ns (using 0)")
        return 0
    return out


def distributed(value: Any, problems: Problems) -> dict[str, Any]:
    """``distributedInfo`` with rank and world size checked; ``pg_config`` keeps its objects."""
    raw = as_dict(value, "distributedInfo", problems)
    out = typed_record(raw, "distributedInfo", _DIST_INTS, _DIST_TEXTS, problems) or {}
    version = raw.get("nccl_version")
    if isinstance(version, (int, float)) and not isinstance(version, bool):
        version = str(version)  # some writers give the version as a number
    out["nccl_version"] = field_text({"v": version}, "v", problems, "distributedInfo.nccl_version")
    if "pg_config" in raw:
        groups = as_list(raw["pg_config"], "distributedInfo.pg_config", problems)
        out["pg_config"] = [g for g in groups if isinstance(g, dict)]
    return {k: v for k, v in out.items() if v is not None}


def devices(value: Any, problems: Problems) -> list[dict[str, Any]]:
    """``deviceProperties``: one object per GPU with its id, name, SM count and memory checked."""
    out = []
    for i, dev in enumerate(as_list(value, "deviceProperties", problems)):
        record = typed_record(dev, f"deviceProperties[{i}]", _DEVICE_INTS, _DEVICE_TEXTS, problems)
        if record is not None:
            out.append(record)
    return out


def process_names(metadata: list, problems: Problems) -> dict[str, dict[str, str]]:
    """{pid: {"process_name" | "process_labels": text}} from the trace's 'M' events."""
    names: dict[str, dict[str, str]] = {}
    for ev in metadata:
        attr = _PROCESS_META.get(ev.name)
        if attr is None or ev.args is None:
            continue
        text = field_text({attr: getattr(ev.args, attr)}, attr, problems, f"{ev.name} args.{attr}")
        if text is not None:
            names.setdefault(str(ev.pid), {})[ev.name] = text
    return names


def thread_names(metadata: list, problems: Problems) -> dict[str, str]:
    """{"pid:tid": name} from the trace's 'thread_name' events (pid and tid as the events
    table holds them, :func:`profkit.columns.ids_to_int`); a later name of a thread wins
    (Kineto names the autograd thread twice, the second time as what it is)."""
    names: dict[str, str] = {}
    for ev in metadata:
        if ev.name != "thread_name" or ev.args is None:
            continue
        text = field_text({"name": ev.args.name}, "name", problems, "thread_name args.name")
        if text and text.strip():
            names[f"{stable_id(ev.pid)}:{stable_id(ev.tid)}"] = text.strip()
    return names


def metadata_names(metadata: list, problems: Problems) -> dict[str, dict]:
    """``process_names`` and ``thread_names`` of the trace's 'M' events, as the model keeps
    them (:class:`profkit.model.RankData`)."""
    return {"process_names": process_names(metadata, problems),
            "thread_names": thread_names(metadata, problems)}


def header_facts(header: Any, problems: Problems) -> dict[str, Any]:
    """The header keys the model keeps (see :class:`profkit.model.RankData`), validated."""
    head = {"host_name": header.host_name, "hostname": header.hostname,
            "trace_id": header.trace_id, "profkit_run_id": header.profkit_run_id}
    if isinstance(head["trace_id"], int) and not isinstance(head["trace_id"], bool):
        head["trace_id"] = str(head["trace_id"])
    return {
        "distributed": distributed(header.distributedInfo, problems),
        "devices": devices(header.deviceProperties, problems),
        "base_time_ns": base_time_ns(header.baseTimeNanoseconds, problems),
        "host": field_text(head, "host_name", problems) or field_text(head, "hostname", problems),
        "trace_id": field_text(head, "trace_id", problems),
        "profkit_run_id": field_text(head, "profkit_run_id", problems),
    }
