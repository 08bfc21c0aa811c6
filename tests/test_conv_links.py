"""ConvLinks.links(name) holds for every op name that ConvLinks.note keeps anything of: the
names it is False for are noted with every kind of argument and nothing is kept."""

import math

from profkit.classify import flops
from profkit.classify.flops import FLOP_OPS, ConvLinks

NAMES = sorted(set(FLOP_OPS) | flops._FORWARD_CONVS | set(flops._MASKED_BACKWARD)
               | flops._GRADIENT_LEAVES) + [
    "ConvolutionBackward0", "ConvolutionBackward1", "CudnnConvolutionBackward",
    "ConvolutionTransposeBackward0", "MmBackward0", "aten::linear", "aten::add", "", "x"]
DIMS = ([[8, 3, 32, 32], [16, 3, 3, 3], []], [], None, "text")
CONCRETE = ([], None, [""] * 11)
SEQS = (None, 7)
FLOPS = (math.nan, 100.0)


def _kept(links: ConvLinks) -> int:
    return len(links.forward) + len(links.grad_out) + len(links.backward) + len(links.leaves)


def test_links_is_false_only_where_note_keeps_nothing():
    linked = 0
    for name in NAMES:
        links = ConvLinks()
        for dims in DIMS:
            for concrete in CONCRETE:
                for seq in SEQS:
                    for value in FLOPS:
                        links.note(0, name, dims, concrete, seq, value)
        if links.links(name):
            linked += 1
            assert _kept(links), name  # each linked name is kept by some argument
        else:
            assert not _kept(links), name
    assert linked == len(flops._FORWARD_CONVS) + len(flops._MASKED_BACKWARD) \
        + len(flops._GRADIENT_LEAVES) + 3  # the three non-transpose Conv*Backward nodes
