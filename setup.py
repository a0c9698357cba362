"""Builds fanout's compiled modules, the relay's kernels: cutting box views
(``fanout.relay.kernels.cutkernel``), packing their rows into wire bytes (``fanout.relay.kernels.packkernel``),
and, on the writer thread, indexing a batch (``fanout.relay.kernels.gridkernel``) and overwriting its
rows (``fanout.relay.kernels.tablekernel``).

Everything else is in pyproject.toml. The extensions are optional: without a C compiler the
install still succeeds and the relay does the same with numpy and msgspec instead
(``fanout.relay.data.batchcut``), slower.
"""

from Cython.Build import cythonize
from setuptools import Extension, setup

setup(
    ext_modules=cythonize(
        [
            Extension(
                f"fanout.relay.kernels.{name}",
                [f"src/fanout/relay/kernels/{name}.pyx"],
                extra_compile_args=["-O2"],
                optional=True,
            )
            for name in ("cutkernel", "gridkernel", "packkernel", "tablekernel")
        ],
        compiler_directives={"language_level": 3},
    )
)
