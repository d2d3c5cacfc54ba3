from typing import Any

VERSION: int

def solve(
    prev: Any,
    gap: Any,
    dur: Any,
    fixed: Any,
    launch_src: Any,
    launch_dst: Any,
    launch_delay: Any,
    event_src: Any,
    event_dst: Any,
    wait_src: Any,
    wait_dst: Any,
    wait_tail: Any,
    start_out: Any,
    end_out: Any,
) -> bool: ...
def last_containing(starts: Any, ends: Any, t: Any, order: Any, out: Any) -> None: ...
