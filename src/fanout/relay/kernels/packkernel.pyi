"""Types of the compiled packer (packkernel.pyx)."""

from collections.abc import Callable
from typing import Any, TypeVar

import numpy as np
import numpy.typing as npt

_T = TypeVar("_T")

def pack_runs(
    prefixes: list[bytes],
    columns: list[npt.NDArray[Any]],
    positions: npt.NDArray[np.intp] | None,
    bounds: npt.NDArray[np.int64],
    empty: _T,
    wrap: Callable[[bytes], _T],
) -> list[_T]: ...
