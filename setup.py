"""Only the optional C accelerators live here; metadata is in setup.cfg.

setup.cfg cannot declare extension modules. The extensions are optional: when
no compiler is present the build skips them and lagd runs in pure Python
(identical results, slower relay-log decoding and statement fingerprints; see
docs/relaylog.md and docs/prefetch.md).
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension("lagd.relaylog._speedups", ["src/lagd/relaylog/_speedups.c"], optional=True),
        Extension("lagd.prefetch._scan", ["src/lagd/prefetch/_scan.c"], optional=True),
        Extension("lagd.prefetch._procread", ["src/lagd/prefetch/_procread.c"], optional=True),
    ]
)
