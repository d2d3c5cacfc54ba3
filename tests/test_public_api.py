"""The public API is pinned: changing it is a decision, made here and in the CHANGELOG."""

from __future__ import annotations

import gpuscope


def test_exported_members() -> None:
    assert sorted(gpuscope.__all__) == [
        "CheckOutcome",
        "DeviceReport",
        "Diagnosis",
        "Finding",
        "FleetTable",
        "GpuscopeError",
        "InputError",
        "InputSummary",
        "Job",
        "JobDiagnosis",
        "Options",
        "RankAnalysis",
        "RunDiff",
        "RunSummary",
        "ScalingReport",
        "SweepReport",
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


def test_results_are_msgspec_structs_and_findings_are_views_of_finding() -> None:
    """#17: every exported result is a msgspec Struct; the diff's finding records derive from
    :class:`gpuscope.Finding` by one function instead of re-declaring where they come from."""
    import msgspec

    from gpuscope.compare.diff import FindingChange, summarize_finding
    from gpuscope.fleet import finding_row

    for name in (
        "Diagnosis",
        "Finding",
        "RunDiff",
        "RunSummary",
        "CheckOutcome",
        "RankAnalysis",
        "ScalingReport",
        "SweepReport",
        "FleetTable",
        "Verdict",
        "DeviceReport",
    ):
        assert issubclass(getattr(gpuscope, name), msgspec.Struct), name
    found = gpuscope.Finding(
        "ghost_gpu",
        "host_sync",
        "waiting on the host",
        4_000,
        1_000.0,
        12.5,
        4,
        0.25,
        6.0,
        [],
        ["e"],
        "fix",
        predicted_saving_ns_per_step=800.0,
    )
    summary = summarize_finding(found, [900.0, 1_100.0, 1_300.0])
    assert (summary.cause, summary.pattern, summary.title) == (
        "host_sync",
        "ghost_gpu",
        "waiting on the host",
    )
    assert summary.lost_ns_per_step == 1_100.0  # the per-step series' mean, when there is one
    assert summarize_finding(found).lost_ns_per_step == 1_000.0
    assert (summary.share_pct, summary.cost_usd_per_gpu_hour) == (12.5, 0.25)
    assert summary.predicted_saving_ns_per_step == 800.0
    change = FindingChange(None, summary)
    assert (change.cause, change.title) == ("host_sync", "waiting on the host")
    row = finding_row("job.json", found)
    assert (row.path, row.cause, row.lost_ns, row.share_pct) == (
        "job.json",
        "host_sync",
        4_000,
        12.5,
    )
    assert (row.category, row.subcategory) == gpuscope_category("host_sync")


def gpuscope_category(cause: str) -> tuple[str, str]:
    from gpuscope.fleet import category

    return category(cause)
