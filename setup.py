"""Only the optional C accelerator lives here; metadata is in setup.cfg.

setup.cfg cannot declare extension modules. The extension is optional: when
no compiler is present the build skips it and lagd runs in pure Python
(identical results, slower relay-log decoding; see docs/relaylog.md).
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension("lagd.relaylog._speedups", ["src/lagd/relaylog/_speedups.c"], optional=True)
    ]
)
