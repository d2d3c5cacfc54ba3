"""Print the labelled suite's confusion matrix: injected cause (rows) vs top finding (columns).

Run: ``python benchmarks/ground_truth.py``
"""

from __future__ import annotations

from gpuscope.groundtruth import confusion, run_suite


def main() -> None:
    outcomes = run_suite()
    matrix = confusion(outcomes)
    expected = sorted({e for e, _ in matrix})
    found = sorted({f or "none" for _, f in matrix})
    width = max(len(c) for c in expected + found) + 2
    print("injected \\ top finding".ljust(width) + "".join(f.rjust(width) for f in found))
    for e in expected:
        row = [matrix.get((e, None if f == "none" else f), 0) for f in found]
        print(e.ljust(width) + "".join(str(n).rjust(width) for n in row))
    right = sum(o.cause_right for o in outcomes)
    located = sum(o.location_right for o in outcomes if o.case.location and o.cause_right)
    with_location = sum(1 for o in outcomes if o.case.location and o.cause_right)
    print(f"\ntop finding right: {right}/{len(outcomes)} ({100 * right / len(outcomes):.1f}%)")
    print(f"location exact: {located}/{with_location}")


if __name__ == "__main__":
    main()
