"""The labelled suite: each injected cause is the top finding, at the exact line it was injected."""

from __future__ import annotations

from gpuscope.testing.groundtruth import confusion, labelled_suite, run_suite


def test_injected_cause_is_the_top_finding_at_its_line() -> None:
    cases = labelled_suite()
    assert len(cases) >= 40
    assert len({c.expected for c in cases}) >= 9
    outcomes = run_suite(cases)
    right = sum(o.cause_right for o in outcomes)
    wrong = {o.case.name: (o.top_cause, o.top_location) for o in outcomes if not o.cause_right}
    assert right / len(outcomes) >= 0.95, (confusion(outcomes), wrong)
    located = [o for o in outcomes if o.case.location is not None and o.cause_right]
    misplaced = {o.case.name: o.top_location for o in located if not o.location_right}
    assert not misplaced
