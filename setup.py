"""The C part of the build: the Kineto event scanner. Everything else is in pyproject.toml.

The extension is optional: where it cannot be compiled, gpuscope installs without it and its
Kineto reader falls back to decoding with msgspec in Python (same results, about 2x slower).
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "gpuscope.readers._kscan",
            sources=["src/gpuscope/readers/_kscan.c"],
            libraries=["z"],  # zlib, to inflate gzip traces without the GIL
            optional=True,
        )
    ]
)
