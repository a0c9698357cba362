"""Types of the compiled kernel (cutkernel.pyx)."""

from typing import Any

import numpy as np
import numpy.typing as npt

_Ints = npt.NDArray[np.int64]
_Positions = npt.NDArray[np.intp]
_Floats = npt.NDArray[np.float64]
_Keys = npt.NDArray[Any]  # int64 (checked where the kernel is chosen: batchcut.compiled)

def cut_turn(
    lo: _Floats,
    hi: _Floats,
    origin: _Floats,
    top: _Floats,
    side: _Floats,
    cells: int,
    offsets: _Ints,
    order: _Positions,
    binned: list[_Floats],
    keys: _Keys,
    changed: _Ints,
    held: _Keys,
    held_at: _Ints,
    since: _Ints,
) -> tuple[_Positions, _Ints, _Positions, _Ints, _Positions, _Ints, _Ints, _Ints]: ...
def spans(
    lo: _Floats, hi: _Floats, origin: _Floats, top: _Floats, side: _Floats, cells: int
) -> tuple[_Ints, _Ints]: ...
