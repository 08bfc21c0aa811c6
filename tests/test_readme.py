"""The README's test command is the one CI runs."""

import re

from tests.conftest import REPO


def test_ci_runs_the_readme_test_command():
    ci = (REPO / ".ci" / "run").read_text()
    command = re.search(r"TEST_COMMAND='(.+)'", ci).group(1)
    assert command in (REPO / "README.md").read_text()
