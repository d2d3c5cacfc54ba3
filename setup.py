"""The C part of the build: the Kineto event scanner, the memory-snapshot scanner, the .pftrace
scanner and the what-if replay's solver. Everything else is in pyproject.toml.

All four extensions are optional: where they cannot be compiled, gpuscope installs without them;
its Kineto reader falls back to decoding with msgspec in Python (same results, about three times
slower), the snapshot reader to its unpickler, the .pftrace reader to protobuf, and the replay to
its numpy fixpoint (same results where it settles; slow on long zig-zags).
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
        ),
        Extension(
            "gpuscope.readers._snapscan",  # memory snapshots; without it: the unpickler
            sources=["src/gpuscope/readers/_snapscan.c"],
            optional=True,
        ),
        Extension(
            "gpuscope.readers.pftrace._pfscan",  # .pftrace; without it: protobuf, per packet
            sources=["src/gpuscope/readers/pftrace/_pfscan.c"],
            optional=True,
        ),
        Extension(
            "gpuscope.analyses._replay",
            sources=["src/gpuscope/analyses/_replay.c"],
            optional=True,
        ),
    ]
)
