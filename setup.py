"""The C loops of jaxdata; everything else is in pyproject.toml.

  transforms/_native.c          -> jaxdata.transforms._native   (assembly, first-fit placement)
  jaxdata/mixture/_exact_pick.c -> jaxdata.mixture._exact_pick  (the exact interleave's pick loop)
  jaxdata/sources/_masked.c     -> jaxdata.sources._masked     (fine-tuning records: ids and masks apart)

All are optional: where they cannot be compiled, the install still succeeds
and jaxdata runs the same steps in Python / NumPy (`JAXDATA_NATIVE` in
`jaxdata._native_switch`).
"""

from setuptools import Extension, setup

setup(
  ext_modules=[
    Extension("jaxdata.transforms._native", ["transforms/_native.c"], optional=True),
    Extension("jaxdata.mixture._exact_pick", ["jaxdata/mixture/_exact_pick.c"], optional=True),
    Extension("jaxdata.sources._masked", ["jaxdata/sources/_masked.c"], optional=True),
  ]
)
