"""NULLs in the relay's columns: each nullable column has a **companion** boolean column.

The relay holds rows as plain numpy arrays, column by column (``relay.data.buffers``), so the
compiled kernels and every gather, sort and copy work on fixed-width arrays. A column the catalog
says may hold NULL (``DatasetInfo.nullable``, strings excepted: theirs are ``None``) is held with a
companion, named ``valid_of(name)``, True where the row holds a value. A companion rides along
wherever its column goes (written, taken, copied, swapped) because it is one more column; only
the edges know it: batches in (``split``: the wire's masked arrays), rows out (``prepare_rows``
in ``relay.data.pushes`` sends it as the column's validity bitmap), DuckDB (``tables``) and SQL
matching (``masked``). A null's slot holds NaN in a float column (so a NULL coordinate is inside
no region) and zero otherwise.

The companion's name holds a NUL character, which no column of a catalog may (``intake``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import numpy as np
import numpy.typing as npt

Array = npt.NDArray[np.generic]

#: What a companion's name adds to its column's.
SUFFIX = "\x00valid"


def valid_of(name: str) -> str:
    """The companion of column ``name``."""
    return name + SUFFIX


def is_companion(name: str) -> bool:
    """Whether ``name`` is a companion's."""
    return name.endswith(SUFFIX)


def has_companions(rows: Mapping[str, object]) -> bool:
    """Whether some of ``rows``' names is a companion's (one scan in C: no other name holds a
    NUL character, which catalogs and result columns may not)."""
    return "\x00" in "".join(rows)


def with_companions(names: Iterable[str], held: Mapping[str, object]) -> list[str]:
    """``names`` and, after each, its companion if ``held`` has one."""
    out: list[str] = []
    for name in names:
        out.append(name)
        companion = name + SUFFIX
        if companion in held:
            out.append(companion)
    return out


def split(arrays: Mapping[str, Array]) -> dict[str, Array]:
    """Decoded wire columns with each masked array as its values and its companion."""
    out: dict[str, Array] = {}
    for name, values in arrays.items():
        if isinstance(values, np.ma.MaskedArray):
            mask = np.ma.getmaskarray(values)
            data = np.ma.getdata(values)
            if data.dtype.kind == "f":
                data = np.where(mask, np.nan, data).astype(data.dtype, copy=False)
            out[name] = data
            out[valid_of(name)] = ~mask
        else:
            out[name] = values
    return out


def masked(rows: Mapping[str, Array]) -> dict[str, Array]:
    """Rows with companions folded into masked arrays (and dropped): the form
    ``wire.columns.encode_columns`` and ``views.sql.match`` take."""
    out: dict[str, Array] = {}
    for name, values in rows.items():
        if is_companion(name):
            continue
        valid = rows.get(name + SUFFIX)
        if valid is not None and not valid.all():
            out[name] = np.ma.MaskedArray(values, mask=np.logical_not(valid))
        else:
            out[name] = values
    return out
