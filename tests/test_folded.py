"""FoldedPattern finds what re.IGNORECASE finds: on the built-in kernel-name patterns over
random ASCII and non-ASCII names, and on patterns whose upper-case escapes forbid folding."""

import random
import re

import pytest

from profkit.classify.events import COMM_KERNEL_RE
from profkit.classify.folded import FoldedPattern
from profkit.classify.patterns import COLL_RULES, COMPUTE_RULES

PATTERNS = [rx for _, rx in COMPUTE_RULES + COLL_RULES] + [COMM_KERNEL_RE.pattern]
WORDS = ["GEMM", "Flash", "fMHA", "conv", "Convert", "sm90_", "TensorOp", "ampere_", "_NN",
         "Reduce", "NCCL", "AllReduce", "all_to_all", "Dispatch", "s1688gemm", "cub::",
         "deep_EP", "UCC_", " ucc_", "Triton_Red", "K", "\u212a", "\u017f", "\u0130", "x",
         "_", "9", "::", "<float>", "DtoH"]


def _names(n: int, seed: int, pattern: str) -> list[str]:
    """Random names of the pattern's own literal pieces (in random case) and WORDS."""
    rng = random.Random(seed)
    pieces = [p for p in re.split(r"[|()?:*+.\\\[\]{}!<]+", pattern) if p] + WORDS

    def piece() -> str:
        return "".join(c.upper() if rng.random() < 0.3 else c for c in rng.choice(pieces))

    return ["".join(piece() for _ in range(rng.randint(0, 6))) for _ in range(n)]


@pytest.mark.parametrize("pattern", PATTERNS)
def test_same_matches_as_ignorecase(pattern):
    folded, plain = FoldedPattern(pattern), re.compile(pattern, re.IGNORECASE)
    names = _names(3000, len(pattern), pattern)
    hits = 0
    for name in names:
        want, got = plain.search(name), folded.search(name)
        assert (want is None) == (got is None), name
        if want is not None:
            hits += 1
            assert want.span() == got.span(), name
    assert 0 < hits < len(names)  # both outcomes were tried


def test_unicode_folds_are_kept():
    # the Kelvin sign and the long s fold to k and s under re.IGNORECASE, not under lower()
    assert FoldedPattern("kernel").search("\u212aernel") is not None
    assert FoldedPattern("scan").search("\u017fcan") is not None
    assert FoldedPattern("gemm").search("GEMM") is not None
    assert FoldedPattern("gemm").search("gem") is None


def test_upper_case_escapes_are_not_folded():
    # \D lower-cased would be \d: such a pattern is searched with re.IGNORECASE alone
    folded = FoldedPattern(r"a\Db")
    assert folded.search("A_B") is not None and folded.search("A1B") is None


def test_collective_kind_remembered_as_worked_out():
    from profkit.classify import events

    names = _names(500, 5, "|".join(rx for _, rx in COLL_RULES)) + ["nccl:" + "x" * 600]
    names += [["not", "text"], 12, None]  # args of any JSON type are read as their text
    for name in names + names:
        assert events.collective_kind(name) == events._collective_kind(str(name))
    assert events._remembered_kind.cache_info().hits >= 500
    assert {events.collective_kind(n) for n in names} > {"all_reduce", "other"}
