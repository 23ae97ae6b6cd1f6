"""Finding the key of many encoded records at once, without decoding them.

A record is canonical MessagePack (:mod:`litstore.format.codec`): a map whose entries
are sorted. Decoding a small record costs about a microsecond in msgpack, almost all
of it building Python objects; ``verify`` needs only each record's key and the
assurance that the record decodes. :func:`scan_keys` reads both from the bytes of
many records at once with numpy, one step per map entry for all records together.

It takes the records that are *flat*: a map whose every key and value is a scalar
(nil, bool, int, float, str, bin), the common shape of small records. For those it
parses the structure to the last byte (a record must end where its payload does) and
finds the key field; a field name that occurs twice sends the record to the decoder
(where the last one would win). Every other record (nested values, extension types
such as arrays and tuples, damage) is left to the caller to decode one by one:
``scanned`` is false for it.

Most chunks hold records of one shape (the same fields, keys of one width): the first
record's shape (:class:`_Shape`) is read once, and the records that have it are
recognised by comparing the bytes the scan's decisions depend on (a few 8-byte words
each, read at the chunk's stride when its records are all of one length), about five
times faster than the general scan, which reads the rest.

What it does not check: that the strings of a record are UTF-8, which decoding
would. The caller checks the key's (``verify`` makes an Arrow string array of the
keys); the other strings of a record are checked by its content hash only, so a
record that a writer committed with a string that is not UTF-8 is not found by the
scan (litstore's own writer cannot commit one: it encodes Python ``str``). Pure:
numpy in, numpy out.
"""

from __future__ import annotations

from dataclasses import astuple, dataclass, fields

import numpy as np

_INT_MAX = np.uint64(2**63 - 1)

#: Map entries a record may have for the scan; a record with more is decoded instead.
MAX_FIELDS = 64


def _table() -> np.ndarray:
    """Per first byte of a token: its kind, header bytes, length bytes after the type byte and fixed body
    length, packed in one integer (one lookup per token instead of four)."""
    kind = np.zeros(256, np.int64)  # 0 unsupported, 1 other scalar, 2 str, 3 bin, 4 int
    header = np.zeros(256, np.int64)
    length_bytes = np.zeros(256, np.int64)
    fixed = np.zeros(256, np.int64)
    for byte in [*range(0x00, 0x80), *range(0xE0, 0x100)]:
        header[byte], kind[byte] = 1, _INT  # positive and negative fixints
    for byte in (0xC0, 0xC2, 0xC3):
        header[byte], kind[byte] = 1, 1  # nil, false, true
    for byte, size in ((0xCA, 5), (0xCB, 9)):
        header[byte], kind[byte] = size, 1  # float32, float64
    for byte, size in ((0xCC, 2), (0xCD, 3), (0xCE, 5), (0xCF, 9), (0xD0, 2), (0xD1, 3), (0xD2, 5), (0xD3, 9)):
        header[byte], kind[byte] = size, _INT  # uint8..64, int8..64
    for byte in range(0xA0, 0xC0):
        header[byte], fixed[byte], kind[byte] = 1, byte & 0x1F, _STR  # fixstr
    for byte, count in ((0xD9, 1), (0xDA, 2), (0xDB, 4)):
        header[byte], length_bytes[byte], kind[byte] = 1 + count, count, _STR  # str8/16/32
    for byte, count in ((0xC4, 1), (0xC5, 2), (0xC6, 4)):
        header[byte], length_bytes[byte], kind[byte] = 1 + count, count, 3  # bin8/16/32
    return kind | header << 4 | length_bytes << 8 | fixed << 12


_STR, _INT = 2, 4
_TOKENS = _table()


@dataclass(frozen=True)
class ScannedKeys:
    """What :func:`scan_keys` found, one entry per record.

    Attributes:
        scanned: the record is flat and was read to its end; the fields below hold for it.
            Where false, decode the record to learn its key.
        valid: (scanned records) it holds the key field, of the store's key type.
        starts, lengths: (str keys) where the key's UTF-8 bytes lie in the buffer.
        values: (int keys) the key.
    """

    scanned: np.ndarray
    valid: np.ndarray
    starts: np.ndarray
    lengths: np.ndarray
    values: np.ndarray


def _big_endian(buffer: np.ndarray, positions: np.ndarray, width: int) -> np.ndarray:
    """The unsigned big-endian integers of ``width`` bytes at ``positions`` (all within ``buffer``)."""
    value = np.zeros(len(positions), np.uint64)
    for offset in range(width):
        value = (value << np.uint64(8)) | buffer[positions + offset].astype(np.uint64)
    return value


def _tokens(
    buffer: np.ndarray, at: np.ndarray, ends: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The scalar tokens starting at ``at`` in records ending at ``ends``: kind, header bytes, body length, and
    whether each is a supported token that lies within its record."""
    inside = at < ends
    packed = _TOKENS[buffer[np.where(inside, at, 0)].astype(np.intp)]
    kind = packed & 0xF
    header = (packed >> 4) & 0xF
    length_bytes = (packed >> 8) & 0xF
    length = packed >> 12
    fits = inside & (kind > 0) & (at + header <= ends)
    for width in (1, 2, 4):
        sized = np.flatnonzero(fits & (length_bytes == width))
        if len(sized):
            length[sized] = _big_endian(buffer, at[sized] + 1, width).astype(np.int64)
    fits &= at + header + length <= ends
    return kind, header, length, fits


def _map_headers(buffer: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each record's entry count and where its first entry starts; count -1 where it is not a map."""
    count = np.full(len(starts), -1, np.int64)
    body = starts.copy()
    present = np.flatnonzero(starts < ends)
    first = buffer[starts[present]]
    small = present[(first >= 0x80) & (first <= 0x8F)]
    count[small] = buffer[starts[small]] & 0x0F
    body[small] += 1
    for marker, width in ((0xDE, 2), (0xDF, 4)):
        large = present[(first == marker)]
        large = large[starts[large] + 1 + width <= ends[large]]
        count[large] = _big_endian(buffer, starts[large] + 1, width).astype(np.int64)
        body[large] += 1 + width
    return count, body


#: Records scanned together: their per-record arrays stay in the processor's cache.
_BATCH = 8192


def scan_keys(buffer: np.ndarray, starts: np.ndarray, ends: np.ndarray, key_field: str, key_type: str) -> ScannedKeys:
    """The key field of each record ``buffer[starts[i]:ends[i]]`` (canonical MessagePack, see the module docstring).

    ``buffer`` is a ``uint8`` array; the records must not overlap and must come in the
    order they lie in ``buffer``. ``key_type`` is the store's (``"str"`` or ``"int"``).
    """
    name = np.frombuffer(key_field.encode("utf-8", "surrogatepass"), np.uint8)
    shape = _Shape.of(buffer, starts, ends, name, key_type)
    if shape is None:
        return _scanned(buffer, starts, ends, name, key_type)
    alike = shape.matches(buffer, starts, ends)
    if alike.all():
        return shape.keys(buffer, starts)
    same, rest = np.flatnonzero(alike), np.flatnonzero(~alike)
    parts = (
        (same, shape.keys(buffer, starts[same])),
        (rest, _scanned(buffer, starts[rest], ends[rest], name, key_type)),
    )
    flags = (np.zeros(len(starts), bool) for _ in range(2))
    found = ScannedKeys(*flags, *(np.zeros(len(starts), np.int64) for _ in range(3)))
    for rows, part in parts:
        for column in fields(ScannedKeys):
            getattr(found, column.name)[rows] = getattr(part, column.name)
    return found


def _scanned(buffer: np.ndarray, starts: np.ndarray, ends: np.ndarray, name: np.ndarray, key_type: str) -> ScannedKeys:
    """:func:`scan_keys` by the general scan, :data:`_BATCH` records at a time."""
    parts = [
        _scan(buffer, starts[at : at + _BATCH], ends[at : at + _BATCH], name, key_type)
        for at in range(0, len(starts), _BATCH)
    ]
    if not parts:
        empty = np.zeros(0, np.int64)
        return ScannedKeys(np.zeros(0, bool), np.zeros(0, bool), empty, empty, empty)
    return ScannedKeys(*(np.concatenate(column) for column in zip(*(astuple(part) for part in parts))))


@dataclass(frozen=True)
class _Shape:
    """The layout of one flat record that holds the key: what the scan reads of it, by offset from its start.

    The scan's every decision about a record depends only on its length, its map
    header, each field's name token (every byte), and of each value token the class
    of its type byte (``_TOKENS``: kind, header size, length bytes, fixstr length) and
    its length bytes. A record of the same length whose bytes at those offsets are
    equal (and whose value type bytes are of the same classes) is therefore scanned
    exactly as this one: flat, read to its end, its key at the same offset. Records of
    one shape (the common case: every record of a chunk has the same fields, keys of
    one width) are recognised by a few byte comparisons each instead of a parse;
    the others go through the general scan.
    """

    length: int
    exact: tuple[tuple[int, int], ...]  # (offset, byte) that must be equal
    classes: tuple[tuple[int, int], ...]  # (offset, _TOKENS entry) of value type bytes
    key_at: int  # offset of the key's value token
    key_start: int  # (str keys) offset of its bytes
    key_length: int
    key_type: str

    @classmethod
    def of(
        cls, buffer: np.ndarray, starts: np.ndarray, ends: np.ndarray, name: np.ndarray, key_type: str
    ) -> _Shape | None:
        """The shape of the first record, if the scan finds its key (else ``None``: no shortcut)."""
        if len(starts) < _SHAPE_MIN:
            return None
        start, end = int(starts[0]), int(ends[0])
        scan = _scan(buffer, starts[:1], ends[:1], name, key_type)
        if not scan.valid[0]:
            return None
        record = buffer[start:end].tolist()
        first = record[0]
        width = 0 if 0x80 <= first <= 0x8F else 2 if first == 0xDE else 4
        count = first & 0x0F if not width else int.from_bytes(bytes(record[1 : 1 + width]), "big")
        exact = [(offset, record[offset]) for offset in range(1 + width)]
        classes = []
        cursor = 1 + width
        key_at = -1
        for _ in range(count):
            header, _, length = _token_size(record, cursor)
            value_at = cursor + header + length
            exact += [(offset, record[offset]) for offset in range(cursor, value_at)]
            is_name = int(_TOKENS[record[cursor]]) & 0xF == _STR and length == len(name)
            if is_name and bytes(record[cursor + header : value_at]) == name.tobytes():
                key_at = value_at
            value_header, value_length_bytes, value_length = _token_size(record, value_at)
            if int(_TOKENS[record[value_at]]) in _ONE_BYTE_CLASSES:
                exact.append((value_at, record[value_at]))
            else:
                classes.append((value_at, int(_TOKENS[record[value_at]])))
            exact += [(offset, record[offset]) for offset in range(value_at + 1, value_at + 1 + value_length_bytes)]
            cursor = value_at + value_header + value_length
        key_start = int(scan.starts[0]) - start
        return cls(end - start, tuple(exact), tuple(classes), key_at, key_start, int(scan.lengths[0]), key_type)

    def matches(self, buffer: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
        """Which records have this shape."""
        alike: np.ndarray = ends - starts == self.length
        steps = np.diff(starts)
        if self.length >= 8 and len(steps) and alike.all() and (steps == steps[0]).all():
            # Records at one stride (a chunk's items of one length): a strided view of them, no gather.
            stride = int(steps[0]) if len(steps) else self.length
            first = int(starts[0])
            for offset, mask, value in _windows(self.exact, self.length):
                word = np.ndarray(len(starts), "<u8", buffer, first + offset, (stride,))
                alike &= (word & mask) == value
            for offset, entry in self.classes:
                if entry not in _ONE_BYTE_CLASSES:
                    column = np.ndarray(len(starts), np.uint8, buffer, first + offset, (stride,))
                    alike &= _TOKENS[column] == entry
            return alike
        at = np.where(alike, starts, 0)  # (a record of another length may lie too near the buffer's end)
        for offset, byte in self.exact:
            alike &= buffer[at + offset] == byte
        for offset, entry in self.classes:
            alike &= _TOKENS[buffer[at + offset]] == entry
        return alike

    def keys(self, buffer: np.ndarray, starts: np.ndarray) -> ScannedKeys:
        """What the scan finds of records of this shape (all of ``starts``)."""
        count = len(starts)
        found = np.ones(count, bool)
        if self.key_type == "str":
            values = np.zeros(count, np.int64)
            return ScannedKeys(found, found.copy(), starts + self.key_start, np.full(count, self.key_length), values)
        numbers, fits = _int_values(buffer, starts + self.key_at)  # (a uint64 past int64's range is no key)
        empty = np.zeros(count, np.int64)
        return ScannedKeys(found, fits, empty, empty.copy(), numbers)


def _windows(exact: tuple[tuple[int, int], ...], length: int) -> list[tuple[int, np.uint64, np.uint64]]:
    """Bytes ``exact`` as 8-byte words of a record ``length`` long: (offset, mask, value) with
    ``word & mask == value`` where the bytes are as given (an unaligned little-endian read at each offset)."""
    windows = []
    pending = sorted(exact)
    while pending:
        offset = min(pending[0][0], length - 8)
        mask = value = 0
        inside = [(at, byte) for at, byte in pending if at < offset + 8]
        for at, byte in inside:
            mask |= 0xFF << (8 * (at - offset))
            value |= byte << (8 * (at - offset))
        pending = pending[len(inside) :]
        windows.append((offset, np.uint64(mask), np.uint64(value)))
    return windows


def _one_byte_classes() -> set[int]:
    """The ``_TOKENS`` entries only one byte has: comparing such a class is comparing the byte."""
    entries, counts = np.unique(_TOKENS, return_counts=True)
    return {int(entry) for entry, count in zip(entries, counts, strict=True) if count == 1}


_ONE_BYTE_CLASSES = _one_byte_classes()

#: Records below this many are scanned without looking for a shape.
_SHAPE_MIN = 64


def _token_size(record: list[int], at: int) -> tuple[int, int, int]:
    """Header bytes, length bytes and body length of the token at ``at`` of a record the scan has read."""
    packed = int(_TOKENS[record[at]])
    header, length_bytes, length = (packed >> 4) & 0xF, (packed >> 8) & 0xF, packed >> 12
    if length_bytes:
        length = int.from_bytes(bytes(record[at + 1 : at + 1 + length_bytes]), "big")
    return header, length_bytes, length


def _scan(buffer: np.ndarray, starts: np.ndarray, ends: np.ndarray, name: np.ndarray, key_type: str) -> ScannedKeys:
    count = len(starts)
    entries, cursor = _map_headers(buffer, starts, ends)
    scanned = entries >= 0
    found = np.zeros(count, np.int64)  # how often the key field's name was seen
    key_at = np.zeros(count, np.int64)  # where the key's value token starts
    steps = int(entries.max()) if count else 0
    if steps > MAX_FIELDS:
        scanned &= entries <= MAX_FIELDS  # more entries than the scan reads
        steps = MAX_FIELDS
    for step in range(steps):
        live = scanned & (entries > step)
        kind, header, length, fits = _tokens(buffer, cursor, ends)
        value_at = cursor + header + length
        _, value_header, value_length, value_fits = _tokens(buffer, value_at, ends)
        good = fits & value_fits
        scanned &= good | ~live
        live &= good
        named = live & (kind == _STR) & (length == len(name))
        where = np.flatnonzero(named)
        if len(where) and len(name):
            text = buffer[(cursor[where] + header[where])[:, None] + np.arange(len(name))]
            named[where] = (text == name).all(axis=1)
        found += named
        key_at = np.where(named, value_at, key_at)
        cursor = np.where(live, value_at + value_header + value_length, cursor)
    scanned &= (cursor == ends) & (found <= 1)
    valid = scanned & (found == 1)
    key_starts = np.zeros(count, np.int64)
    key_lengths = np.zeros(count, np.int64)
    values = np.zeros(count, np.int64)
    holders = np.flatnonzero(valid)
    if len(holders):
        kind, header, length, _ = _tokens(buffer, key_at[holders], ends[holders])
        if key_type == "str":
            valid[holders[kind != _STR]] = False
            key_starts[holders] = key_at[holders] + header
            key_lengths[holders] = length
        else:
            numbers, fits = _int_values(buffer, key_at[holders])
            valid[holders[(kind != _INT) | ~fits]] = False
            values[holders] = numbers
    return ScannedKeys(scanned, valid, key_starts, key_lengths, values)


def _int_values(buffer: np.ndarray, at: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The integers whose tokens start at ``at`` (each a whole int token), and whether each fits an int64."""
    first = buffer[at].astype(np.int64)
    values = np.where(first < 0x80, first, first - 256)  # positive and negative fixints
    fits = np.ones(len(at), bool)
    for marker, width, signed in (
        (0xCC, 1, False), (0xCD, 2, False), (0xCE, 4, False), (0xCF, 8, False),
        (0xD0, 1, True), (0xD1, 2, True), (0xD2, 4, True), (0xD3, 8, True),
    ):  # fmt: skip
        sized = np.flatnonzero(first == marker)
        if not len(sized):
            continue
        raw = _big_endian(buffer, at[sized] + 1, width)
        if signed:
            sign = np.uint64(1 << (8 * width - 1))
            values[sized] = (
                (raw ^ sign).astype(np.int64) - np.int64(1 << (8 * width - 1)) if width < 8 else raw.view(np.int64)
            )
        else:
            fits[sized] = raw <= _INT_MAX
            values[sized] = np.minimum(raw, _INT_MAX).astype(np.int64)
    return values, fits
