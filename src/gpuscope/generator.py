"""Kept so that ``gpuscope.generator`` still imports; the simulator is :mod:`gpuscope.testing`."""

from gpuscope.testing.generator import *  # noqa: F403
from gpuscope.testing.generator import __all__ as __all__  # noqa: PLC0414
