"""A join task's rows are checked, built and written as Parquet with pandas hidden, and
pyarrow then never imports it; outside the block, and where pandas was imported
already, nothing is hidden."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

pytestmark = pytest.mark.unit

#: Run in a fresh interpreter: this one may have imported pandas already.
_A_TASK_S_ARROW = textwrap.dedent(
    """
    import json, sys
    from spark_apps.without_pandas import pandas_hidden
    from photon.join.output import check_rows, decode, encode, encode_table

    rows = [
        {"click_id": "c1", "ts_us": 1, "cost": 1.5, "tags": ["a"], "meta": {"k": "v"}},
        {"click_id": "c2", "ts_us": 2, "cost": None, "tags": [], "meta": {"k": "w"}},
        {"click_id": "c3", "ts_us": 2**70, "cost": 0.0, "tags": None, "meta": None},
    ]
    with pandas_hidden() as hid:
        check = check_rows(rows, None)
        kept = [r for n, r in enumerate(rows) if n not in check.bad]
        written = decode(encode(kept, check.schema))
        import pyarrow as pa
        table = pa.Table.from_pylist(kept, schema=check.schema)
        again = decode(encode_table(table))
        inside = "pandas" in sys.modules
    frame = table.to_pandas()  # outside: pandas imports as ever
    print(json.dumps({
        "hid": hid, "pandas_inside": inside, "bad": sorted(check.bad),
        "written": written, "again": again, "kept": kept,
        "frame_rows": len(frame), "pandas_after": "pandas" in sys.modules,
    }))
    """
)


def test_a_task_s_rows_are_checked_and_written_without_importing_pandas() -> None:
    got = json.loads(_run(_A_TASK_S_ARROW).splitlines()[-1])
    assert got["hid"] is True
    assert got["pandas_inside"] is False
    assert got["bad"] == [2]  # an integer beyond int64 does not fit, pandas or not
    assert got["written"] == got["kept"] == got["again"]
    assert got["frame_rows"] == 2 and got["pandas_after"] is True


def _run(code: str) -> str:
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, check=True
    )
    return done.stdout.strip()


def test_pandas_is_hidden_only_inside_the_outermost_block() -> None:
    code = """
        import sys
        from spark_apps import without_pandas
        with without_pandas.pandas_hidden() as hid:
            assert hid is True
            with without_pandas.pandas_hidden() as inner:
                assert inner is False  # the enclosing block hides it
                try:
                    import pandas
                except ImportError:
                    pass
                else:
                    raise AssertionError("pandas imported while hidden")
            assert without_pandas._FINDER in sys.meta_path  # the inner block left it hidden
            import json  # anything else imports as ever
        assert without_pandas._FINDER not in sys.meta_path
        import pandas
        print("ok")
        """
    assert _run(code) == "ok"


def test_an_imported_pandas_is_not_hidden_and_a_failing_block_unhides() -> None:
    code = """
        import sys
        from spark_apps import without_pandas
        try:
            with without_pandas.pandas_hidden():
                raise RuntimeError("a task fails")
        except RuntimeError:
            pass
        assert without_pandas._FINDER not in sys.meta_path
        import pandas
        with without_pandas.pandas_hidden() as hid:
            assert hid is False  # imported already: whatever imported it may use it
            import pandas.api.types
        print("ok")
        """
    assert _run(code) == "ok"
