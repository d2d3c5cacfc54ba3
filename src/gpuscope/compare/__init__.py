"""Comparisons: what changed between diagnosed runs, and how a job scales.

The layer above the diagnosis (``docs/how-it-works.md``): :mod:`gpuscope.compare.diff` compares
two runs' diagnoses (``gpuscope diff``, ``check``, the history); :mod:`gpuscope.compare.scaling`
compares runs of one job at several GPU counts or batch sizes (``gpuscope scale``, ``sweep``).
Nothing below imports it; renderers and the CLI do.
"""
