"""The C part of the build: the Kineto event scanner. Everything else is in pyproject.toml.

The extension is optional: where it cannot be compiled, gpuscope installs without it and its
Kineto reader falls back to decoding with msgspec in Python (same results, about 2x slower).
"""

import sys

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "gpuscope.readers._kscan",
            sources=["src/gpuscope/readers/_kscan.c"],
            # zlib inflates gzip traces without the GIL (zlib-ng when the zlib_ng package has it:
            # dlopen, in libdl before glibc 2.34).
            libraries=["z", "dl"] if sys.platform.startswith("linux") else ["z"],
            optional=True,
        )
    ]
)
