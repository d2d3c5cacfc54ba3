"""The public API is pinned: changing it is a decision, made here and in the CHANGELOG."""

from __future__ import annotations

import gpuscope


def test_exported_members() -> None:
    assert sorted(gpuscope.__all__) == [
        "DeviceReport",
        "Diagnosis",
        "Finding",
        "GpuscopeError",
        "InputError",
        "InputSummary",
        "Job",
        "Options",
        "Trace",
        "Verdict",
        "__version__",
        "diagnose",
        "load",
    ]
    for name in gpuscope.__all__:
        assert hasattr(gpuscope, name)


def test_errors_form_one_hierarchy() -> None:
    from gpuscope import errors

    for name in ("UnknownFormatError", "CorruptInputError", "EmptyTraceError"):
        assert issubclass(getattr(errors, name), gpuscope.InputError)
    assert issubclass(gpuscope.InputError, gpuscope.GpuscopeError)
