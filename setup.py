"""The one compiled module, ``sluice._speedups`` (metadata is in pyproject.toml).

It is optional: without a C compiler the install goes on and Sluice runs its pure-Python codecs.
"""

from setuptools import Extension, setup

setup(ext_modules=[Extension("sluice._speedups", ["src/sluice/_speedups.c"], optional=True,
                             extra_compile_args=["-O2", "-Wall", "-Wextra", "-Wno-unused-parameter",
                                                 "-Wno-missing-field-initializers"])])
