# The C Kineto event scanner (see _kscan.c for the contract).

VERSION: int

class GzipError(Exception): ...
class LimitError(Exception): ...

class Block:
    """A column of the scanner's, as a read-only buffer."""

    def __buffer__(self, flags: int, /) -> memoryview: ...

#: The scanner's columns for a file (see ``_kscan.c``).
Scanned = tuple[
    int,
    int,
    dict[str, Block],
    list[bytes],
    list[bytes],
    bytes,
    tuple[bytes, list[bytes]],
    Block,
    Block,
    Block,
]

def scan_file(
    fd: int, piece_bytes: int, hurry: bytearray, max_text: int, max_bytes: int, /
) -> tuple[bytes, Scanned, bytes, bool]: ...
def use_zlib_ng(library: str | None, /) -> bool: ...
def mallopt(param: int, value: int, /) -> bool: ...
