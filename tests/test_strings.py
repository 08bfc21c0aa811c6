"""profkit.strings: Python strings inside an analysis, the caller's pandas setting outside."""

import threading

import pandas as pd
import pytest
from profkit.analyzers.executor import analyze_run

from profkit import strings
from profkit.errors import ProfkitError
from tests.conftest import REPO


def inferred() -> str:
    """The dtype pandas gives a new column of strings now."""
    return str(pd.Series(["a", "b"]).dtype)


@pytest.fixture
def arrow_default():
    if strings._get() is not True:  # pandas 2 (object strings already) or 4 (no option)
        pytest.skip(f"pandas {pd.__version__} does not infer Arrow strings by this option")
    yield
    assert strings._get() is True and strings._depth == 0


def test_nested_scopes_use_python_strings_and_restore_on_the_last_exit(arrow_default):
    assert inferred() == "str"
    with strings.python_strings():
        assert inferred() == "object"
        with strings.python_strings():
            assert inferred() == "object"
        assert inferred() == "object"  # the outer scope still runs
    assert inferred() == "str"


def test_the_setting_comes_back_after_an_error(arrow_default):
    with pytest.raises(ProfkitError):
        analyze_run(REPO / "no such run", cache=False, workers=1)
    assert inferred() == "str"


def test_a_caller_who_turned_the_option_off_keeps_it_off(arrow_default):
    strings._set(False)
    try:
        with strings.python_strings():
            assert inferred() == "object"
        assert strings._get() is False
    finally:
        strings._set(True)


def test_threads_that_overlap_leave_the_setting_as_it_was(arrow_default):
    """Thread A enters, B enters, A leaves while B still runs: B keeps Python strings and
    the caller's setting is back only when B leaves (a plain save-and-restore per scope
    would leave it off for good)."""
    a_in, b_in, a_out = threading.Event(), threading.Event(), threading.Event()
    seen = {}

    def a():
        with strings.python_strings():
            a_in.set()
            b_in.wait(5)
        a_out.set()

    def b():
        a_in.wait(5)
        with strings.python_strings():
            b_in.set()
            a_out.wait(5)
            seen["b after a left"] = inferred()

    threads = [threading.Thread(target=a), threading.Thread(target=b)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert seen == {"b after a left": "object"}
    assert inferred() == "str"


def test_no_such_option_does_nothing(monkeypatch):
    """pandas 4 drops the option: the scope then changes nothing."""
    monkeypatch.setattr(strings, "OPTION", "future.no_such_option")
    before = inferred()
    with strings.python_strings():
        assert inferred() == before
    assert inferred() == before
