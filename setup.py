"""The C loops of jaxdata (transforms/_native.c); everything else is in pyproject.toml.

The extension is optional: where it cannot be compiled, the install still
succeeds and jaxdata runs the same steps with NumPy (`jaxdata.transforms.kernels`).
"""

from setuptools import Extension, setup

setup(ext_modules=[Extension("jaxdata.transforms._native", ["transforms/_native.c"], optional=True)])
