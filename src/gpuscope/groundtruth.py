"""Kept so that ``gpuscope.groundtruth`` still imports; see :mod:`gpuscope.testing.groundtruth`."""

from gpuscope.testing.groundtruth import Case, Outcome, confusion, labelled_suite, run_suite

__all__ = ["Case", "Outcome", "confusion", "labelled_suite", "run_suite"]
