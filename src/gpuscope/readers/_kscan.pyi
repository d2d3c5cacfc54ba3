# The C Kineto event scanner (see _kscan.c for the contract).

def scan(
    text: bytes, first: bool, start: int, stop: int, /
) -> tuple[
    int, bool, int, int, dict[str, bytes], list[bytes], list[bytes], bytes, bytes, bytes
]: ...
