"""What a peer's count and length fields may claim before anything is allocated for them.

Theory
------
A Kafka frame is bounded (`socket.request.max.bytes`, 100 MiB by default, checked by the framer before a
byte of the frame is buffered), but the counts inside it are not: an int32 or unsigned-varint count can
claim two billion elements in a five-byte field. A decoder that trusts the count and allocates for it (a
list presized from it, a loop that builds an object per claimed element) lets a tiny frame cost
gigabytes: the allocation CVE class (KAFKA-14063 and its relatives in other Kafka implementations).

Three rules, checked where the count is read, before the first element is decoded:

1. **Bytes first.** An element takes at least `min_size` bytes on the wire (one, for the smallest
   compact string; the codec computes the exact minimum per element type and version), so a count
   with `count * min_size` above the bytes remaining is a lie and is refused. This alone bounds every
   allocation by the frame's size.
2. **Hard caps.** Within a legal frame, a count may still buy many small Python objects per byte (an
   empty compact string is one byte; an unknown tagged field is two bytes and becomes a tuple). Kafka
   4.4 caps what any real message needs: an array at `MAX_ARRAY_ELEMENTS` (1,000,000) elements and a
   tagged-field section at `MAX_TAGGED_FIELDS` (10,000) fields. No client sends more (a Metadata
   response for 200,000 partitions holds arrays of at most a few hundred thousand entries).
3. **No presizing.** The decoders here never reserve capacity from a count: lists grow as elements
   arrive (Python's `append`), fixed-width arrays are unpacked in one call only after rule 1 has
   checked the exact byte length, and the framer's buffer for a large frame grows with the bytes that
   actually arrive (`connection._Framer`). So the initial capacity taken from a length field is zero,
   or at most what the frame already holds.

A refusal is a `RemoteProtocolError` naming the field: the connection is closed, as Kafka closes it on
a request it cannot parse.

Where the rules are applied: the generated decoders (`codec`: every array, string, bytes and tagged-field
section of every message, and of the metadata records, which share the codec), the request and response
headers' tagged fields (`headers`), and record batches (`records`: recordsCount against the records
section at seven bytes a record, headerCount against the record at two bytes a header; records are
decoded lazily, one at a time). The hand-written produce parser (`fast_produce`) presizes nothing and
reads flexible counts under 127 only; a v3-v8 count it cannot satisfy runs into the end of the frame,
having built no more than the bytes it read, and the frame goes to the codec, which refuses it. It
is left without extra checks: it is the hottest decoder, and a check there would only refuse sooner
what the codec refuses anyway.
"""

from __future__ import annotations

from .errors import RemoteProtocolError

MAX_ARRAY_ELEMENTS = 1_000_000
MAX_TAGGED_FIELDS = 10_000
MIN_TAGGED_FIELD_SIZE = 2  # a tag and a size, one byte each at the least


def refuse_array(what: str, count: int, remaining: int, min_size: int) -> RemoteProtocolError:
    """The error for an array count that breaks rule 1 or 2 (the caller has found that it does)."""
    if count > MAX_ARRAY_ELEMENTS:
        return RemoteProtocolError(
            f"{what}: array of {count} elements exceeds the maximum of {MAX_ARRAY_ELEMENTS}"
        )
    return RemoteProtocolError(
        f"{what}: tried to allocate a collection of size {count} (at least {min_size} bytes each), "
        f"but only {remaining} bytes remain"
    )


def check_tagged_field_count(what: str, count: int, remaining: int) -> None:
    """Rules 1 and 2 for the count that opens a tagged-field section."""
    if count > MAX_TAGGED_FIELDS:
        raise RemoteProtocolError(
            f"{what}: {count} tagged fields exceed the maximum of {MAX_TAGGED_FIELDS}"
        )
    if count * MIN_TAGGED_FIELD_SIZE > remaining:
        raise RemoteProtocolError(
            f"{what}: {count} tagged fields cannot fit in the {remaining} bytes remaining"
        )
