# The C Kineto event scanner (see _kscan.c for the contract).

class GzipError(Exception): ...

def scan_file(
    data: bytes, piece_bytes: int, hurry: bytearray, /
) -> tuple[
    bytes,
    tuple[int, int, dict[str, bytes], list[bytes], list[bytes], bytes, bytes, bytes],
    bytes,
    bool,
]: ...
