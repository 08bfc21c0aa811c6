"""Which parallel dimension a process group serves, and the layout they make together.

A group's dimension comes from, in this order (the first that says wins; ``rule`` names it):

1. its name: the description PyTorch records (``pg_desc``: DeviceMesh writes ``mesh_<dim>``,
   ``new_group(group_desc=...)`` the caller's text, Megatron-style names such as
   ``TENSOR_MODEL_PARALLEL_GROUP``) or a group name that is a word, not a number or a hash.
   Words are read as tokens: ``dp`` / ``ddp`` / ``data`` / ``replicate`` are data parallel;
   ``fsdp`` / ``shard`` / ``zero`` sharded data; ``tp`` / ``tensor`` tensor; ``pp`` /
   ``pipe`` / ``pipeline`` / ``stage`` pipeline; ``ep`` / ``expert`` / ``moe`` expert; ``cp`` /
   ``sp`` / ``context`` / ``sequence`` / ``ulysses`` context. ``default_pg`` and
   ``undefined`` say nothing.
2. the pattern of its traffic, for groups whose name says nothing, per kind of collective
   (one unnamed group may carry two dimensions: DLRM's default group runs the embeddings'
   all-to-all and the dense layers' all-reduce): send/recv between fixed neighbours (a
   chain, :func:`p2p_chains`) -> pipeline; all-to-all -> expert; all-gather beside
   reduce-scatter -> sharded data (FSDP / ZeRO-3), and so are all-reduces of scalars
   beside them (at most ``SCALAR_BYTES``: DeepSpeed's overflow flag and gradient norm,
   FSDP's clipped norm; no gradient bucket is that small); all-reduce over every rank of the run ->
   tensor parallel when some are issued in the forward pass (activations), else data
   parallel (gradients; nothing in a run without a backward pass). Anything else (an
   all-reduce over a subgroup, a lone all-gather) stays ``unknown``: the trace does not
   say, and a guess would be advice on nothing. Barriers and broadcasts take their group's
   one dimension.

A pattern is read per group over every rank's collectives.
"""

from __future__ import annotations

import re

DATA, SHARDED, TENSOR, PIPELINE, EXPERT, CONTEXT, UNKNOWN = (
    "data", "sharded data", "tensor", "pipeline", "expert", "context", "unknown")
# Short names for the layout line, in the conventional outer-to-inner order.
SHORT = {PIPELINE: "pp", DATA: "dp", SHARDED: "fsdp", CONTEXT: "cp", EXPERT: "ep",
         TENSOR: "tp"}
LONG = {DATA: "data parallel", SHARDED: "sharded data parallel", TENSOR: "tensor parallel",
        PIPELINE: "pipeline parallel", EXPERT: "expert parallel", CONTEXT: "context parallel",
        UNKNOWN: "dimension unknown"}

# Token -> dimension; checked in this order, so "expert data parallel" is data (the
# replicas of one expert), "tensor_and_data" is tensor.
_TOKENS = (
    (PIPELINE, r"pp|pipe|pipeline|pipelines|stage|stages"),
    (SHARDED, r"fsdp|hsdp|shard|sharded|sharding|zero|zero3|dp_shard"),
    (TENSOR, r"tp|tensor|mp|model"),
    (CONTEXT, r"cp|sp|context|sequence|ulysses"),
    (DATA, r"dp|ddp|data|replicate|dp_replicate"),
    (EXPERT, r"ep|expert|experts|moe"),
)
_TOKEN_RES = tuple((dim, re.compile(rf"^(?:{rx})$")) for dim, rx in _TOKENS)
_SILENT = {"default_pg", "undefined", "none", "", "default", "nan"}
_HASH = re.compile(r"^[0-9a-f]{16,}(?:_\d+)?$")
P2P = "send_recv"
SCALAR_BYTES = 64  # an all-reduce of at most this many bytes carries scalars, not gradients
IGNORED = {"barrier", "other"}  # say nothing of a dimension


def name_dimension(desc: str, name: str = "") -> tuple[str, str]:
    """(dimension, rule) from a group's description, else its name; (UNKNOWN, "") when
    neither says."""
    for label, text in (("description", desc), ("name", name)):
        text = str(text or "").strip()
        if text.lower() in _SILENT or text.isdigit() or _HASH.match(text.lower()):
            continue
        dim = _dimension_of_words(text)
        if dim != UNKNOWN:
            return dim, f"group {label} {text!r}"
    return UNKNOWN, ""


def _dimension_of_words(text: str) -> str:
    words = [w for w in re.split(r"[^a-z0-9]+", text.lower()) if w]
    if words and words[0] == "mesh":  # DeviceMesh: mesh_<dim> (flattened: mesh_dp_cp)
        words = words[1:]
    if "expert" in words and ("model" in words or "parallel" in words) and "data" not in words:
        return EXPERT  # Megatron's EXPERT_MODEL_PARALLEL_GROUP
    for dim, rx in _TOKEN_RES:
        if any(rx.match(w) for w in words):
            return dim
    return UNKNOWN


def pattern_dimensions(kinds: set[str], group_size: int, world: int,
                       chains: list[list[int]] | None = None,
                       reduce: dict[str, int] | None = None,
                       model_kinds: set[str] | None = None) -> dict[str, tuple[str, str]]:
    """{collective: (dimension, rule)} from the collectives one group ran (normalised names)
    and its size against the run's ``world``; barriers and unnamed kernels take the group's
    one dimension when its other traffic has exactly one. ``chains``: the ranks its
    point-to-point transfers link, each chain in order (:func:`p2p_chains`; None: peers
    unknown, [[]] for a set of peers that is no chain). ``reduce``: its all-reduces'
    ``calls``, ``forward_calls`` (issued before their step's backward pass began),
    ``no_backward_calls`` (in steps without one) and ``max_bytes`` (the largest); None: not
    known. ``model_kinds``: the collectives every call of which the model's layers issued
    (inside DTensor redistributions or compiled graphs, outside FSDP's hooks): tensor or
    sequence parallelism, whatever else the pattern would say."""
    sharded = {"all_gather", "reduce_scatter"} <= kinds
    out = {}
    for kind in kinds:
        scalars = kind == "all_reduce" and reduce is not None \
            and 0 < reduce.get("max_bytes", SCALAR_BYTES + 1) <= SCALAR_BYTES
        if kind in (model_kinds or ()) and kind not in (P2P, "all_to_all") and not scalars:
            out[kind] = (TENSOR, f"{kind.replace('_', '-')} issued by the model's layers (DTensor "
                                 "or a compiled graph, not FSDP's hooks): tensor / sequence "
                                 "parallel activations")
        elif kind == P2P and chains and not all(chains):
            out[kind] = (UNKNOWN, "")  # send/recv between more than two neighbours
        elif kind == P2P and chains and len(chains[0]) > 2 and chains[0][0] == chains[0][-1]:
            out[kind] = (PIPELINE, "send/recv around the ring " + " -> ".join(
                map(str, chains[0])) + " (interleaved pipeline stages)")
        elif kind == P2P and chains:
            shown = "; ".join(" -> ".join(map(str, c)) for c in chains[:2])
            out[kind] = (PIPELINE, f"send/recv between fixed neighbours {shown} "
                                   "(pipeline stages)")
        elif kind == P2P:
            out[kind] = (PIPELINE, "point-to-point transfers (pipeline stages)")
        elif kind == "all_to_all":
            out[kind] = (EXPERT, "all-to-all exchanges (expert dispatch)")
        elif kind in ("all_gather", "reduce_scatter") and sharded:
            out[kind] = (SHARDED, "all-gather and reduce-scatter in one group (FSDP / ZeRO-3)")
        elif scalars and sharded:
            out[kind] = (SHARDED, f"all-reduces of scalars (at most {SCALAR_BYTES} B) beside "
                                  "all-gather and reduce-scatter (an overflow flag, a gradient "
                                  "norm: ZeRO-3 / FSDP)")
        elif kind == "all_reduce" and group_size >= 2 and group_size == world:
            out[kind] = _all_reduce_dimension(world, reduce)
        else:
            out[kind] = (UNKNOWN, "")
    known = {d for d, _ in out.values() if d != UNKNOWN}
    if len(known) == 1:
        (dim,) = known
        rule = next(r for d, r in out.values() if d == dim)
        out = {k: (dim, f"{rule}; same group") if d == UNKNOWN and k in IGNORED | {"broadcast"}
               else (d, r) for k, (d, r) in out.items()}
    return out


def _all_reduce_dimension(world: int, reduce: dict[str, int] | None) -> tuple[str, str]:
    """An all-reduce over every rank: activations (tensor parallel) when some are issued in
    the forward pass, gradients (data parallel) when all come in or after the backward
    pass; a run with no backward pass says neither."""
    if reduce is None:
        return DATA, f"all-reduce over all {world} ranks (DDP)"
    if reduce.get("forward_calls", 0) > 0:
        return TENSOR, ("all-reduce in the forward pass, over all "
                        f"{world} ranks (activations: tensor parallel)")
    if reduce.get("no_backward_calls", 0) >= reduce.get("calls", 0):
        return UNKNOWN, ""
    return DATA, f"all-reduce over all {world} ranks in the backward pass (gradients: DDP)"


def p2p_chains(edges: set[tuple[int, int]], looped: bool = False) -> list[list[int]]:
    """The ranks that point-to-point transfers link (``edges``: (rank, peer) pairs, global
    ranks), as chains in rank order, when every rank talks to at most two neighbours and no
    set of them closes a ring; [[]] otherwise (no pipeline). ``looped``: the ranks ran an
    interleaved pipeline's looped stages, so one ring is its chain, from its lowest rank."""
    links: dict[int, set[int]] = {}
    for a, b in edges:
        if a != b and a >= 0 and b >= 0:
            links.setdefault(a, set()).add(b)
            links.setdefault(b, set()).add(a)
    if any(len(n) > 2 for n in links.values()):
        return [[]]
    chains, seen = [], set()
    for start in sorted(r for r, n in links.items() if len(n) == 1):
        if start not in seen:
            chains.append(_walk(links, start, seen))
    if set(links) - seen:  # a ring: ring attention or a collective made of sends, not stages
        return _ring(links) if looped and not chains else [[]]
    return chains


def _ring(links: dict[int, set[int]]) -> list[list[int]]:
    """One ring of ranks each linked to two others, walked from its lowest rank towards the
    lower of its neighbours and closed (``[0, 1, 2, 3, 0]``); [[]] when the links are not
    one ring."""
    start = min(links)
    chain = _walk(links, start, set())
    return [chain + [start]] if len(chain) == len(links) else [[]]


def _walk(links: dict[int, set[int]], start: int, seen: set[int]) -> list[int]:
    """The ranks reached from ``start`` one link at a time, never back to one in ``seen``
    (which it fills), the lower neighbour first where two are new."""
    chain = [start]
    while True:
        seen.add(chain[-1])
        nxt = sorted(n for n in links[chain[-1]] if n not in seen)
        if not nxt:
            return chain
        chain.append(nxt[0])


def layout_line(world: int, degrees: dict[str, int]) -> str:
    """'4 ranks: dp 2 x tp 2', '4 ranks: pipeline of 4 stages', '2 ranks: fsdp 2'; '' when
    no dimension of more than one rank is known. ``degrees``: {dimension: ranks in one of
    its groups}."""
    dims = [(d, n) for d, n in degrees.items() if d in SHORT and n >= 2]
    if world < 2 or not dims:
        return ""
    dims.sort(key=lambda dn: list(SHORT).index(dn[0]))
    product = 1
    for _, n in dims:
        product *= n
    if len(dims) == 1 and dims[0][0] == PIPELINE:
        text = f"pipeline of {dims[0][1]} stages"
    elif product > world:  # dimensions sharing ranks (DLRM: dp 8 and its embeddings over 8)
        text = " and ".join(f"{SHORT[d]} {n}" for d, n in dims) + " over the same ranks"
    else:
        text = " x ".join(f"{SHORT[d]} {n}" for d, n in dims)
    if product < world:
        text += f" (x {world / product:.3g} in no known dimension)"
    return f"{world} ranks: {text}"


def group_label(desc: str, name: str, dim: str, ranks: str) -> str:
    """'mesh_dp (data parallel, ranks 0,2)'; the name (a hash) only when there is no
    description; the dimension only when known."""
    shown = desc if str(desc or "").lower() not in _SILENT - {"default_pg"} else ""
    head = shown or (f"process group {name}" if name else "process group")
    inside = [" + ".join(LONG[d] for d in dim.split("+") if d in LONG)] if dim != UNKNOWN else []
    if ranks:
        inside.append(f"ranks {ranks}")
    return f"{head} ({', '.join(inside)})" if inside else head
