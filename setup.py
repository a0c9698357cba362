"""Builds fanout's one compiled module, the relay's box-cutting kernel (``fanout.relay.cutkernel``).

Everything else is in pyproject.toml. The extension is optional: without a C compiler the
install still succeeds and the relay cuts with numpy instead (``fanout.relay.batchcut``), slower.
"""

from Cython.Build import cythonize
from setuptools import Extension, setup

setup(
    ext_modules=cythonize(
        [
            Extension(
                "fanout.relay.cutkernel",
                ["src/fanout/relay/cutkernel.pyx"],
                extra_compile_args=["-O2"],
                optional=True,
            )
        ],
        compiler_directives={"language_level": 3},
    )
)
