"""Every cause gpuscope reports, described once: ``data/causes.csv``.

Contract: :func:`cause_table` reads the table once and validates it (a malformed row is a
packaging error and raises ``ValueError`` naming the row): snake_case names listed once, a known
source and ICSE category, a title and a pattern for every reported cause, and for idle causes a
fix, what the idle GPU waits for, and a colour and letter that no other cause (nor busy time)
uses. Rules decide which cause applies; the table describes each one: its title, the pattern its
finding carries, what an idle cause waits for (which makes it host time, a peer's, one-time
start-up that is never waste, or unexplained), its ICSE 2024 category, how an idle cause is drawn
(colour, letter), its fix and the what-if replay's assumption. Code registers only what decides,
keyed by the cause's name: the rule that finds it (``gpuscope.analyses.attribution.RULES`` for an
idle cause), the what-if edit (``gpuscope.analyses.whatif.edits.EDITS``) and a fix refinement from
typed evidence (``gpuscope.diagnosis.fixes.REFINEMENTS``). Adding a cause is one row here plus its
rule and the rule's test (``docs/how-it-works.md``).
"""

from __future__ import annotations

import csv
import re
from functools import cache

import msgspec

from gpuscope.classify import DATA

SOURCES = ("idle", "timeline", "measured", "memory", "category")
#: What an idle GPU waits for: the host (host time the verdict explains), the input pipeline (on
#: the host too, and the verdict's input share), a peer rank (the verdict's communication share),
#: one-time start-up (paid once per process: never priced, never counted as waste), or nothing
#: the trace shows.
WAITS_FOR = ("host", "input", "peer", "startup", "unexplained")
ICSE_CATEGORIES = ("data", "model", "job", "library")
_COLOUR = re.compile(r"^#[0-9a-f]{6}$")
_NAME = re.compile(r"[a-z][a-z0-9_]*")
#: How timelines draw busy time (terminal character, colour): no idle cause may look like it.
BUSY_STYLE = ("█", "#2ca02c")
_COLUMNS = [
    "cause",
    "source",
    "title",
    "pattern",
    "waits_for",
    "icse_category",
    "icse_subcategory",
    "colour",
    "letter",
    "fix",
    "whatif",
    "fix_runtime",
]


class CauseInfo(msgspec.Struct, frozen=True):
    cause: str
    source: str  # idle | timeline | measured | category
    title: str
    pattern: str
    waits_for: str | None  # idle causes: host | peer | startup | unexplained
    icse_category: str
    icse_subcategory: str
    colour: str | None  # idle causes: the timeline colour
    letter: str | None  # idle causes: the terminal timeline character
    fix: str
    whatif: str | None  # causes with a what-if edit: what the replay assumes
    #: The fix in CUDA / HIP runtime terms, for programs with no framework operators (CUDA C,
    #: MPI, HIP, TensorRT); None: ``fix`` names no framework call.
    fix_runtime: str | None = None

    @property
    def waste(self) -> bool:
        """Whether its time is waste a fix removes (one-time start-up is not: it is priced and
        counted nowhere)."""
        return self.waits_for != "startup"


@cache
def cause_table() -> dict[str, CauseInfo]:
    """Cause name -> its description, in file order."""
    lines = (DATA / "causes.csv").read_text("utf-8").splitlines()
    rows = list(csv.reader(line for line in lines if line and not line.startswith("#")))
    if not rows or rows[0] != _COLUMNS:
        raise ValueError(f"data/causes.csv: header must be {','.join(_COLUMNS)}")
    table: dict[str, CauseInfo] = {}
    for number, row in enumerate(rows[1:], start=2):
        if len(row) != len(_COLUMNS):
            raise ValueError(
                f"data/causes.csv row {number}: {len(row)} fields, not {len(_COLUMNS)}"
            )
        (
            cause,
            source,
            title_,
            pattern,
            waits,
            category,
            subcategory,
            colour,
            letter,
            fix_,
            what,
            runtime_fix,
        ) = row
        info = CauseInfo(
            cause,
            source,
            title_,
            pattern,
            waits or None,
            category,
            subcategory,
            colour or None,
            letter or None,
            fix_,
            what or None,
            runtime_fix or None,
        )
        problem = _problem(info, table)
        if problem:
            raise ValueError(f"data/causes.csv row {number} ({info.cause}): {problem}")
        table[info.cause] = info
    return table


def _problem(info: CauseInfo, seen: dict[str, CauseInfo]) -> str | None:
    """What is wrong with a row (given the rows before it), or None. Each check keeps a renderer
    or a rule from failing later, far from the table: a timeline needs distinct letters and
    colours to tell causes apart, a finding needs a title, a pattern and advice to print."""
    if not _NAME.fullmatch(info.cause):
        return "the cause must be a snake_case name"
    if info.cause in seen:
        return "listed twice"
    if info.source not in SOURCES:
        return f"source must be one of {', '.join(SOURCES)}"
    if info.icse_category not in ICSE_CATEGORIES or not info.icse_subcategory:
        return f"icse_category must be one of {', '.join(ICSE_CATEGORIES)}, with a subcategory"
    if info.source != "category" and not (info.title and info.pattern):
        return "a reported cause needs a title and a pattern"
    if info.pattern and not _NAME.fullmatch(info.pattern):
        return "the pattern must be a snake_case tag"
    if info.source == "idle":
        if info.colour is None or info.letter is None:
            return "an idle cause needs a colour and a letter"
        if not info.fix:
            return "an idle cause needs a fix (its advice is printed with every gap)"
        if info.waits_for not in WAITS_FOR:
            return f"an idle cause needs waits_for, one of {', '.join(WAITS_FOR)}"
    elif info.waits_for is not None:
        return "only an idle cause says what the idle GPU waits for"
    if info.whatif is not None and ("\n" in info.whatif or "{" in info.whatif):
        return "the what-if assumption must be one paragraph without {placeholders}"
    return _style_problem(info, seen) or _fix_problem(info)


def _style_problem(info: CauseInfo, seen: dict[str, CauseInfo]) -> str | None:
    if info.colour is not None:
        if not _COLOUR.match(info.colour):
            return "colour must be #rrggbb (lower case)"
        if info.colour == BUSY_STYLE[1] or any(s.colour == info.colour for s in seen.values()):
            return f"colour {info.colour} is taken"
    if info.letter is not None:
        if len(info.letter) != 1 or not info.letter.isprintable() or info.letter.isspace():
            return "letter must be one printable character"
        if info.letter == BUSY_STYLE[0] or any(s.letter == info.letter for s in seen.values()):
            return f"letter {info.letter!r} is taken"
    return None


def _fix_problem(info: CauseInfo) -> str | None:
    # The fix is printed as it is (gpuscope.diagnosis.fixes only adds sentences around it), so a
    # placeholder would reach the user unfilled; one paragraph, because renderers wrap it.
    if "{" in info.fix or "}" in info.fix:
        return "the fix must not hold {placeholders}: it is printed as written"
    for fix in (info.fix, info.fix_runtime or ""):
        if "{" in fix or "}" in fix:
            return "the fix must not hold {placeholders}: it is printed as written"
        if "\n" in fix or fix != fix.strip():
            return "the fix must be one paragraph without surrounding spaces"
    return None


def runtime_fixes() -> dict[str, str]:
    """Cause -> its fix in CUDA / HIP runtime terms (causes whose ``fix`` names framework calls)."""
    return {c.cause: c.fix_runtime for c in cause_table().values() if c.fix_runtime}


def describe(cause: str) -> CauseInfo:
    return cause_table()[cause]


def idle_causes() -> tuple[str, ...]:
    """The idle causes, in table order: a gap's cause code is its position here (a saved
    diagnosis stores the names beside the codes: :mod:`gpuscope.diagnosis.saved`)."""
    return tuple(c.cause for c in cause_table().values() if c.source == "idle")


def is_waste(cause: str) -> bool:
    """Whether a finding of ``cause`` is waste a fix removes (not one-time start-up)."""
    row = cause_table().get(cause)
    return row is None or row.waste


def waiting_for(waits: str) -> frozenset[str]:
    """The idle causes whose GPU waits for ``waits`` (one of :data:`WAITS_FOR`)."""
    return frozenset(c.cause for c in cause_table().values() if c.waits_for == waits)


def assumptions() -> dict[str, str]:
    """Cause -> what the what-if replay assumes when it removes it (causes with an edit)."""
    return {c.cause: c.whatif for c in cause_table().values() if c.whatif}


def title(cause: str) -> str:
    return cause_table()[cause].title


def fix(cause: str) -> str:
    return cause_table()[cause].fix


def titles(*sources: str) -> dict[str, str]:
    """Cause -> title, for the causes of the given sources."""
    return {c.cause: c.title for c in cause_table().values() if c.source in sources}


def fixes() -> dict[str, str]:
    return {c.cause: c.fix for c in cause_table().values() if c.fix}


def idle_styles() -> dict[str, tuple[str, str]]:
    """Idle cause -> (letter, colour), for timelines."""
    return {
        c.cause: (c.letter, c.colour)
        for c in cause_table().values()
        if c.letter is not None and c.colour is not None
    }


def icse_categories() -> dict[str, tuple[str, str]]:
    return {c.cause: (c.icse_category, c.icse_subcategory) for c in cause_table().values()}
