"""The protobuf wire format at the level of a Perfetto ``Trace``'s packets: the sniff, and where
the last whole packet of a file cut short ends. Pure Python; neither decodes a packet's content."""

from __future__ import annotations

#: ``Trace.packet`` (field 1, length-delimited): the tag every packet of a trace starts with.
PACKET_TAG = 0x0A
#: The ``TracePacket`` fields PyTorch's exporters write first: a clock snapshot (6), a timestamp
#: (8), a sequence id (10), a track event (11), interned data (12), sequence flags (13), GPU
#: counters (52), render stages (53), a track descriptor (60); 58 is the timestamp's clock id.
_PACKET_FIELDS = frozenset({6, 8, 10, 11, 12, 13, 52, 53, 58, 60})
#: Fields that say "trace content" (the others are bookkeeping every packet has).
_CONTENT_FIELDS = frozenset({6, 11, 12, 52, 53, 60})
_WIRE_TYPES = frozenset({0, 1, 2, 5})
_SNIFF_PACKETS = 3


def _varint(data: bytes, at: int) -> tuple[int, int]:
    """The varint at ``at`` and the offset after it; (-1, -1) when it runs past the data."""
    value = shift = 0
    while at < len(data) and shift < 70:
        byte = data[at]
        at += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, at
        shift += 7
    return -1, -1


def _packet_fields_valid(data: bytes, start: int, end: int) -> bool | None:
    """Whether the fields of one packet are ones PyTorch writes (None: the head ends inside)."""
    at, content = start, False
    while at < end:
        tag, at = _varint(data, at)
        if tag < 0:
            return None
        number, wire = tag >> 3, tag & 7
        if number not in _PACKET_FIELDS or wire not in _WIRE_TYPES:
            return False
        content |= number in _CONTENT_FIELDS
        if wire == 0:
            _, at = _varint(data, at)
            if at < 0:
                return None
        elif wire == 1:
            at += 8
        elif wire == 5:
            at += 4
        else:
            length, at = _varint(data, at)
            if at < 0:
                return None
            at += length
    if at > len(data):
        return None if content else True
    return content if at == end else False


def looks_like_pftrace(head: bytes) -> bool:
    """A Perfetto ``Trace`` whose first packets hold only ``TracePacket`` fields PyTorch's
    exporters write, at least one of them trace content (JSON, SQLite and CSV never parse so)."""
    at, seen = 0, 0
    while at < len(head) and seen < _SNIFF_PACKETS:
        if head[at] != PACKET_TAG:
            return False
        length, start = _varint(head, at + 1)
        if start < 0 or length <= 0:
            return seen > 0 and start < 0
        end = start + length
        valid = _packet_fields_valid(head, start, min(end, len(head)))
        if valid is False:
            return False
        seen += 1
        if valid is None or end >= len(head):
            return True
        at = end
    return seen > 0


def whole_packets(data: bytes) -> int:
    """The offset where the last whole packet ends (0: none): a file cut mid-write is read up to
    there. Only the framing is followed; a packet's content is checked when it is decoded."""
    at = 0
    while at < len(data):
        if data[at] != PACKET_TAG:
            return at
        length, start = _varint(data, at + 1)
        if start < 0 or start + length > len(data):
            return at
        at = start + length
    return at
