"""The step parts' colours come from the parts table (analyzers/parts.py), in the charts, the
stylesheet's variables and the tables a finding on a part cites."""

import dataclasses
from pathlib import Path

from profkit.analyzers import parts
from profkit.dashboard import colors
from profkit.dashboard.app import create_app
from profkit.dashboard.ui import tables as T

STYLE = Path(colors.__file__).parent / "assets" / "style.css"


def test_the_charts_colour_each_part_as_the_table_does():
    assert colors.PART_COLORS == {p.key: p.color for p in parts.PART_TABLE}
    assert list(colors.PART_COLORS) == list(parts.PARTS)  # legends follow the table's order


def test_the_page_declares_every_part_colour_as_a_css_variable():
    html = create_app([], [], background=False).server.test_client().get("/").get_data(True)
    for part in parts.PART_TABLE:
        assert f"--{part.key}: {part.color};" in html
    assert "--host_work: #be185d;" in html  # missing from the stylesheet before
    assert html.index("<style>:root {") > html.index("/assets/style.css")


def test_the_stylesheet_leaves_the_part_colours_to_the_table():
    css = STYLE.read_text()
    assert not [p.key for p in parts.PART_TABLE if f"--{p.key}:" in css]


def test_a_new_part_reaches_the_css_with_no_edit(monkeypatch):
    new = dataclasses.replace(parts.PART_TABLE[0], key="gpu_wait", color="#123456")
    monkeypatch.setattr(parts, "PART_TABLE", (*parts.PART_TABLE, new))
    assert "--gpu_wait: #123456;" in colors.part_css()


def test_a_finding_on_a_part_cites_the_table_its_part_names():
    for part in parts.PART_TABLE:
        assert T.CITED[part.key] == part.cited
    assert T.CITED["straggler"] == "stragglers" and T.CITED["mfu"] == "efficiency"
