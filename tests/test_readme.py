"""The README's test command is the one CI runs."""

import re

from tests.conftest import REPO


def test_ci_runs_the_readme_test_command():
    ci = (REPO / ".ci" / "run").read_text()
    command = re.search(r"TEST_COMMAND='(.+)'", ci).group(1)
    assert command in (REPO / "README.md").read_text()


def test_every_exit_code_is_in_the_readme_table():
    """Each error class's exit code (and diff's and ncu's) has its row in README's table."""
    from profkit.collectors.collector_errors import NcuError

    from profkit import errors
    from profkit.cli.analyze import SLOWER_EXIT

    text = (REPO / "README.md").read_text()
    table = text[text.index("### Exit codes"):text.index("### profkit diff in CI")]
    rows = {int(m) for m in re.findall(r"^\| +(\d+) \|", table, flags=re.M)}
    codes = {c.exit_code for c in vars(errors).values()
             if isinstance(c, type) and issubclass(c, errors.ProfkitError)}
    assert codes | {0, SLOWER_EXIT, NcuError.exit_code, 130} <= rows, sorted(rows)
