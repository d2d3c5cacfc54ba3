# The C .pftrace walker (see _pfscan.c for the contract).

VERSION: int
EVENT_COLUMNS: int
STAGE_COLUMNS: int

def scan(
    data: bytes, wanted: tuple[bytes, ...], ids: tuple[bytes, ...], /
) -> tuple[bytes, bytes, bytes, bytes, bytes, list[bytes]]: ...
