"""Text for people: plurals, rank lists, wrapping and tables fitted to a width."""

from __future__ import annotations

import pytest

from profkit.textout import glue, plural, rank_ranges, ranks_text, table_lines, wrap


def test_counts_and_ranks_read_as_words():
    assert [plural(n, "kernel") for n in (0, 1, 2)] == ["0 kernels", "1 kernel", "2 kernels"]
    assert plural(1, "more rank", "more ranks") == "1 more rank"
    assert ranks_text([1]) == "rank 1" and ranks_text([0, 1, 2, 5]) == "ranks 0-2,5"
    assert rank_ranges([5, 0, 1, 2, 3, 7, 8]) == "0-3,5,7-8"


def test_wrap_breaks_at_spaces_only():
    text = ("the other ranks lose 1.47 ms per step (14% of their 10.41 ms step) waiting for it "
            "in torch.distributed.ddp.reducer::copy_bucket_to_grad -> cudaMemcpyAsync")
    for width in range(30, 90):
        lines = wrap(text, width, "- ", "  ")
        assert " ".join(" ".join(lines).split()) == "- " + text  # nothing lost or broken
        assert all(len(ln) <= width for ln in lines if "::" not in ln)
        assert not any(ln.rstrip().endswith(("1.47", "10.41")) for ln in lines)  # unit kept
    path = "/data/my runs/" + "x" * 120
    lines = wrap(f"{glue(path)}: truncated JSON", 100, "skipped: ", "  ")
    assert lines == [f"skipped: {path}:", "  truncated JSON"]


HEADER = ["kernel", "class", "calls/step", "ms/step", "latency (median)", "link", "ranks"]
ROWS = [["nccl AllReduce bf16 RING LL", "communication", "6", "3.49 ms", "0.16 ms",
         "device memory read+write (H200)", "0-1"],
        ["elementwise(GeluBackwardCUDA)", "compute", "8.5", "0.328 ms", "-",
         "PCIe Gen5 x16 (device model)", "0-1"]]


@pytest.mark.parametrize("width", [40, 60, 80, 100, 160])
def test_a_table_fits_the_width(width):
    lines = table_lines(HEADER, ROWS, width, clip=[0], fold=[5])
    assert max(map(len, lines)) <= width
    text = " ".join(" ".join(lines).split())
    for cell in ("3.49 ms", "0.328 ms", "communication", "0-1"):
        assert cell in text
    if width >= 160:  # room enough: one header line, nothing folded or cut
        assert len(lines) == 3 and ROWS[0][0] in lines[1] and ROWS[0][5] in lines[1]


def test_numbers_right_names_left():
    lines = table_lines(["name", "ms"], [["a", "1.5"], ["long name", "10.25"]], 100)
    assert lines == ["  name          ms", "  a            1.5", "  long name  10.25"]
