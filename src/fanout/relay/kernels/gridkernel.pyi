"""Types of the compiled grid builder (gridkernel.pyx)."""

from typing import Any

import numpy as np
import numpy.typing as npt

def finite_bounds(
    columns: list[npt.NDArray[np.float64]],
) -> tuple[npt.NDArray[np.bool_], int, list[float], list[float]]: ...
def bin_rows(
    columns: list[npt.NDArray[np.float64]],
    finite: npt.NDArray[np.uint8],
    origin: npt.NDArray[np.float64],
    side: npt.NDArray[np.float64],
    cells: int,
) -> tuple[npt.NDArray[np.intp], npt.NDArray[np.int64]]: ...
def gather(
    arrays: list[npt.NDArray[Any]], order: npt.NDArray[np.intp]
) -> list[npt.NDArray[Any]]: ...
