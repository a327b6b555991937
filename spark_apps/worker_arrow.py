"""pyarrow in a join task, without the pandas import it does not need.

pyarrow imports pandas, when pandas is installed (PySpark's and Great
Expectations' dependency), the first time a process converts Python objects
to an array (``pa.array``, ``Table.from_pylist``): its C++ conversion looks
for pandas' missing-value markers. A join task never hands pyarrow a pandas
object (its rows are dicts), yet each Python worker paid that import in its
first task: about 0.4 s of CPU on an idle machine, and a seventh of the group
tasks' CPU in the first batch of a backlog (docs/join.md, "Against Spark's
own join").

:func:`pandas_hidden` hides pandas from the import system for as long as a
task runs: ``import pandas`` raises ImportError, which pyarrow takes as "no
pandas" and converts without it (it asks again at each conversion, about
0.7 µs). A module imported already is not hidden: then there is nothing to
save, and whatever imported it may use it.

The apps' drivers keep importing it: hidden there, it would be hidden from
every thread of the driver, PySpark's own included, while its batches run.

How it fails: inside it, code that needs pandas gets ImportError. A join task
has none (tests/unit/spark_apps/test_worker_arrow.py: rows built, checked and
written as Parquet with pandas hidden); outside it, nothing changes.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator, Sequence
from importlib.machinery import ModuleSpec
from types import ModuleType

#: The module pyarrow looks for.
PANDAS = "pandas"


class _NoPandas:
    """A meta path finder that finds no pandas (first on ``sys.meta_path``). A
    ``None`` entry in ``sys.modules``, the other way to block a module, reaches
    pyarrow's compiled import as the module itself."""

    @staticmethod
    def find_spec(
        name: str, path: Sequence[str] | None = None, target: ModuleType | None = None
    ) -> ModuleSpec | None:
        if name == PANDAS:
            raise ModuleNotFoundError(f"No module named {name!r} (hidden in a task)", name=name)
        return None


_FINDER = _NoPandas()


@contextlib.contextmanager
def pandas_hidden() -> Iterator[bool]:
    """Hide pandas while the block runs, unless it is imported already (or hidden by
    an enclosing block); yields whether this block hid it."""
    if PANDAS in sys.modules or _FINDER in sys.meta_path:
        yield False
        return
    sys.meta_path.insert(0, _FINDER)
    try:
        yield True
    finally:
        sys.meta_path.remove(_FINDER)
