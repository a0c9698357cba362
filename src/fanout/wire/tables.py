"""A pandas DataFrame or an Arrow table as the wire's columns, its missing values as NULL the way
its own library defines them (docs/concepts.md, "Writing").

pandas: what ``DataFrame.isna()`` calls missing is NULL — NaN in a float column, ``None``,
``NaT``, ``pd.NA`` — read through Arrow's ``from_pandas`` conversion, which applies exactly
those semantics. Arrow: the validity bitmap says what is NULL; a NaN in a valid float slot is
the number NaN, as Arrow defines it. Plain numpy arrays and Python values do not come here
(``columns.from_values``): numpy has no missing value, so a NaN there is a number.

Converting needs pyarrow (which pandas 2 recommends and the relay and publisher extras install);
the module imports it only when it is given a DataFrame or a table.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt


def table_columns(rows: object) -> dict[str, npt.NDArray[np.generic]] | None:
    """The columns of a pandas ``DataFrame`` or an Arrow ``Table``/``RecordBatch``, masked
    where NULL; None for anything else (rows as dicts, columns as sequences).

    Raises:
        ValueError: a DataFrame pyarrow cannot convert (mixed types in a column, say), or
            pyarrow is not installed.
    """
    library = type(rows).__module__.partition(".")[0]
    if library not in ("pandas", "pyarrow") or type(rows).__name__ not in _TABLES:
        return None
    try:
        import pyarrow as pa  # noqa: PLC0415  (only for tables: the client does not need it)

        from fanout.wire.arrow import to_numpy  # noqa: PLC0415
    except ImportError as exc:
        raise ValueError(f"publishing a {type(rows).__name__} needs pyarrow: {exc}") from None
    table: Any = rows
    if library == "pandas":
        try:
            table = pa.Table.from_pandas(rows, preserve_index=False)
        except (pa.ArrowInvalid, pa.ArrowTypeError) as exc:
            raise ValueError(f"the DataFrame does not convert: {exc}") from None
    names = list(table.column_names)
    if len(set(names)) != len(names):
        raise ValueError(f"the table names a column twice: {names}")
    return {name: to_numpy(table.column(name)) for name in names}


#: The table classes taken, by name (checked with their library's module).
_TABLES = frozenset({"DataFrame", "Table", "RecordBatch"})
