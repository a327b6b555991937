"""pyarrow in the apps' drivers and join tasks, without the pandas import they do not need.

pyarrow imports pandas, when pandas is installed (PySpark's and Great
Expectations' dependency), the first time a process converts Python objects
to an array (``pa.array``, ``Table.from_pylist``): its C++ conversion looks
for pandas' missing-value markers. Photon's apps never hand pyarrow a pandas
object (their rows are dicts and lists), yet each process paid that import,
about 0.4 s of CPU on an idle machine, where it hurt most (docs/join.md,
"Against Spark's own join"):

* each Spark Python worker, in its first group task: a seventh of the group
  tasks' CPU in the first batch of a backlog;
* each app's driver, in the query reader's first batch (reading its lines
  into Arrow), which the joiner's first batch waits for.

:func:`pandas_hidden` hides pandas from the import system while a block runs:
a group task, or an app's streams (``spark_apps.app``). ``import pandas``
raises ImportError, which pyarrow takes as "no pandas" and converts without
it (it asks again at each conversion, about 0.7 µs). A module imported
already is not hidden: then there is nothing to save, and whatever imported
it may use it.

How it fails: inside the block, code that needs pandas gets ImportError that
says it is hidden. Photon's apps have none, and PySpark's paths they take
(streaming, ``foreachBatch``, ``toArrow``, RDD tasks) need none; PySpark's
optional imports take it as pandas missing
(tests/unit/spark_apps/test_without_pandas.py: rows built, checked and
written as Parquet with pandas hidden). Outside the block nothing changes.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable, Iterable, Iterator, Sequence
from importlib.machinery import ModuleSpec
from types import ModuleType
from typing import TypeVar

_In = TypeVar("_In")
_Out = TypeVar("_Out")

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
            hidden = f"No module named {name!r} (hidden by {__name__})"
            raise ModuleNotFoundError(hidden, name=name)
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


def with_pandas_hidden(
    task: Callable[[Iterable[_In]], Iterator[_Out]],
) -> Callable[[Iterable[_In]], Iterator[_Out]]:
    """A partition's task (``mapPartitions``) that runs with pandas hidden, and only
    while it runs: between tasks the worker is as it was."""

    def run(items: Iterable[_In]) -> Iterator[_Out]:
        with pandas_hidden():
            yield from task(items)

    return run
