"""The relay's compiled kernels (Cython, built by setup.py) and the switch that finds them.

Optional: without a C compiler the relay does the same with numpy and msgspec (``compiled``).
"""
