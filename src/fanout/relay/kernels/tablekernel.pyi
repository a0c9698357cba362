"""Types of the compiled table writer (tablekernel.pyx)."""

from typing import Any

import numpy as np
import numpy.typing as npt

def overwrite(
    held: npt.NDArray[Any],
    keys: npt.NDArray[Any],
    targets: list[npt.NDArray[Any]],
    sources: list[npt.NDArray[Any]],
    changed: npt.NDArray[np.int64],
    seq: int,
) -> npt.NDArray[np.intp]: ...
def copies(arrays: list[npt.NDArray[Any]]) -> list[npt.NDArray[Any]]: ...
