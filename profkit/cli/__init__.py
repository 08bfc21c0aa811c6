"""The ``profkit`` command: one module per group of commands (:mod:`.analyze`, :mod:`.read`,
:mod:`.serve`), the options they share (:mod:`.options`) and the parser with the error
handling (:mod:`.main`). Commands parse arguments, call one library function and render its
result."""

from profkit.cli.main import build_parser, main
from profkit.cli.options import parse_ranks

__all__ = ["build_parser", "main", "parse_ranks"]
