"""Hashes: key hashes for lookup, content hashes for change detection, fingerprints.

- ``key_hash``: xxh3_64 of the key's bytes (UTF-8 for str keys, 8 bytes little-endian
  two's complement for int keys). Used to find a record, never trusted alone: every
  hit is confirmed by comparing the stored key.
- ``content_hash``: xxh3_128 of the record's canonical encoding (16 bytes). Two
  records are the same content exactly when their encodings are equal.
- fingerprint of a version: the sum, modulo 2**128, of xxh3_128(key bytes + content
  hash) over its live records. Sums do not depend on order and can be updated in
  O(records changed): add the pairs a commit adds, subtract those it removes.
- split hash: xxh3_64 of the key bytes with a fixed seed, independent of ``key_hash``
  so the split a key lands in is uncorrelated with its place in the chunks.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import xxhash

from litstore.format import columnar, xxh3

FINGERPRINT_MODULUS = 2**128
_SPLIT_SEED = 0x5EED_5917


def key_bytes(key: str | int) -> bytes:
    """The bytes that identify ``key``; the store's key type is fixed, so no type tag."""
    if isinstance(key, str):
        return key.encode("utf-8", "surrogatepass")
    return key.to_bytes(8, "little", signed=True)


def is_key(key: object, key_type: str) -> bool:
    """Whether ``key`` can be a key of a store whose keys are ``key_type`` (``"str"``/``"int"``).

    Int keys are int64 (bools are not keys); anything else can never be in the store.
    """
    if key_type == "str":
        return isinstance(key, str)
    return isinstance(key, int) and not isinstance(key, bool) and -(2**63) <= key < 2**63


def normalize_key(key: object) -> object:
    """The key as the store holds it: numpy integers become ``int``; anything else is unchanged.

    Every path that takes a key (writes, lookups, ``in``, deletes) normalizes it, so
    ``np.int64(5)`` finds what ``append`` stored under ``5``.
    """
    if isinstance(key, np.integer) and not isinstance(key, np.bool_):
        return int(key)
    if isinstance(key, np.str_):
        return str(key)
    return key


def key_hash(key: str | int) -> int:
    return xxhash.xxh3_64_intdigest(key_bytes(key))


def key_hashes(keys: Iterable[str | int]) -> np.ndarray:
    """``key_hash`` of each key, as a uint64 array."""
    if isinstance(keys, list) and set(map(type, keys)) <= {str}:
        return str_key_hashes(keys)  # the common case, in C loops
    digest = xxhash.xxh3_64_intdigest
    return np.fromiter(
        (digest(key.encode("utf-8", "surrogatepass") if type(key) is str else key_bytes(key)) for key in keys),
        dtype=np.uint64,
    )


def str_key_hashes(keys: list[str]) -> np.ndarray:
    """``key_hash`` of each of ``keys``, all of them ``str`` (the caller checked): a uint64 array."""
    digest = xxhash.xxh3_64_intdigest
    try:  # valid UTF-8, hashed in C loops
        return np.fromiter(map(digest, map(str.encode, keys)), dtype=np.uint64, count=len(keys))
    except UnicodeEncodeError:  # a lone surrogate: encoded with surrogatepass
        return np.fromiter((digest(key.encode("utf-8", "surrogatepass")) for key in keys), np.uint64, len(keys))


def split_unit(key: str | int) -> float:
    """A number in [0, 1) fixed by the key: where a hash split places it."""
    return xxhash.xxh3_64_intdigest(key_bytes(key), seed=_SPLIT_SEED) / 2.0**64


def split_units(keys: Iterable[str | int]) -> np.ndarray:
    """``split_unit`` of each key, as a float64 array (the same numbers, computed in one pass)."""
    digest = xxhash.xxh3_64_intdigest
    seed = _SPLIT_SEED
    hashes = np.fromiter(
        (digest(key.encode("utf-8", "surrogatepass") if type(key) is str else key_bytes(key), seed) for key in keys),
        dtype=np.uint64,
    )
    return hashes / 2.0**64


def content_hash(encoded: bytes | memoryview) -> bytes:
    """The 16-byte content hash of a record's canonical encoding."""
    return xxhash.xxh3_128_digest(encoded)


def content_hash_rows(encoded: Iterable[bytes | memoryview]) -> np.ndarray:
    """``content_hash`` of each encoding, as the rows of an ``(n, 16)`` uint8 array (one C loop)."""
    digests = b"".join(map(xxhash.xxh3_128_digest, encoded))
    return np.frombuffer(digests, dtype=np.uint8).reshape(-1, 16)


def pair_hash(key: str | int, content: bytes) -> int:
    """The fingerprint contribution of one live record."""
    return xxhash.xxh3_128_intdigest(key_bytes(key) + content)


def fingerprint_sum(keys: Iterable[str | int], contents: Iterable[bytes]) -> int:
    """Sum modulo 2**128 of ``pair_hash`` over matching keys and content hashes."""
    if isinstance(keys, list) and set(map(type, keys)) <= {str}:
        try:  # the common case in C loops: valid UTF-8 str keys
            pairs = map(bytes.__add__, map(str.encode, keys), contents)
            return sum(map(xxhash.xxh3_128_intdigest, pairs)) % FINGERPRINT_MODULUS
        except UnicodeEncodeError:
            pass  # a lone surrogate: encoded with surrogatepass below
    return sum(map(pair_hash, keys, contents)) % FINGERPRINT_MODULUS


def fingerprint_hex(value: int) -> str:
    return f"{value % FINGERPRINT_MODULUS:032x}"


def content_hashes(encodings: pa.LargeBinaryArray, skip: int = 0) -> list[bytes]:
    """``content_hash`` of each record encoding in ``encodings``, in order, without the first ``skip`` bytes of each.

    ``skip=4`` hashes framed items (:func:`~litstore.format.columnar.encode_table`
    with ``sized``) without their length prefix.
    """
    digests: list[bytes] = []
    for part in _hashed_parts(encodings, skip):
        digests += part
    return digests


def content_hash_array(encodings: pa.LargeBinaryArray, skip: int = 0) -> np.ndarray:
    """:func:`content_hashes` as the rows of an ``(n, 16)`` uint8 array, without a list of ``bytes`` in between.

    Encodings that :func:`litstore.format.xxh3.suits` (short ones, or all of one length:
    keys, fingerprint pairs) are hashed a whole column at a time, with no Python call each.
    """
    offsets = columnar.value_offsets(encodings)
    if not skip and xxh3.suits(offsets):
        return xxh3.hash128(encodings.buffers()[2] or b"", offsets)
    parts = [np.empty(0, "S16")]
    parts += (np.fromiter(part, "S16") for part in _hashed_parts(encodings, skip))
    return np.concatenate(parts).view(np.uint8).reshape(-1, 16)


def _hashed_parts(encodings: pa.LargeBinaryArray, skip: int) -> Iterator[Iterator[bytes]]:
    """The content hashes of ``encodings`` (see :func:`content_hashes`), as iterators over consecutive slices."""
    offsets = columnar.value_offsets(encodings)
    if len(encodings) and int(offsets[-1] - offsets[0]) < (_SMALL_ITEM + skip) * len(encodings):
        # Small items (fingerprint pairs, small records): bytes made by Arrow cost less than
        # slicing the buffer from Python (2-3x below ~500 bytes an item; a copy each above).
        if skip:
            encodings = pc.binary_slice(encodings, skip, 2**40)  # one copy without the prefixes, in C
        for start in range(0, len(encodings), _HASH_SLICE):
            yield map(xxhash.xxh3_128_digest, encodings.slice(start, _HASH_SLICE).to_pylist())
        return
    data = memoryview(encodings.buffers()[2] or b"")
    spans = map(slice, (offsets[:-1] + skip).tolist(), offsets[1:].tolist())
    yield map(xxhash.xxh3_128_digest, map(data.__getitem__, spans))


#: Average item size below which :func:`content_hashes` hashes ``bytes`` made by Arrow.
_SMALL_ITEM = 256


def key_hash_array(keys: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """``key_hash`` of each key of an Arrow ``string`` or integer column, as a uint64 array.

    Hashes the keys' bytes as Arrow holds them (UTF-8 text, or 8 little-endian bytes
    per int), a whole column at a time where :func:`litstore.format.xxh3.suits` says so
    (short keys, or keys of one length): no Python object per key. Other text keys are
    handed to xxhash as ``bytes`` that Arrow makes, a slice of rows at a time.
    """
    chunks = keys.chunks if isinstance(keys, pa.ChunkedArray) else [keys]
    parts = [np.empty(0, np.uint64)]
    digest = xxhash.xxh3_64_intdigest
    for chunk in chunks:
        if chunk.null_count:
            raise ValueError("a key column with nulls")
        if pa.types.is_integer(chunk.type):
            wide = chunk.cast(pa.int64())
            values = np.frombuffer(wide.buffers()[1] or b"", dtype="<i8", count=wide.offset + len(wide))
            data = np.ascontiguousarray(values[wide.offset :])
            parts.append(xxh3.hash64(data, np.arange(0, 8 * len(chunk) + 1, 8, dtype=np.int64)))
            continue
        binary = chunk.cast(pa.large_binary())
        offsets = columnar.value_offsets(binary)
        if xxh3.suits(offsets):
            parts.append(xxh3.hash64(binary.buffers()[2] or b"", offsets))
            continue
        for start in range(0, len(binary), _HASH_SLICE):  # long keys of mixed lengths: a call each is cheaper
            texts = binary.slice(start, _HASH_SLICE).to_pylist()
            parts.append(np.fromiter(map(digest, texts), dtype=np.uint64, count=len(texts)))
    return np.concatenate(parts)


#: Rows of a text key column turned into ``bytes`` at once by :func:`key_hash_array`.
_HASH_SLICE = 1 << 13


def keyprint(key: str | int) -> bytes:
    """xxh3-128 of the key's bytes: which key a key run's entry is for (a 64-bit key hash can collide)."""
    return xxhash.xxh3_128_digest(key_bytes(key))


def keyprint_array(keys: pa.Array | pa.ChunkedArray) -> bytes:
    """:func:`keyprint` of each key of an Arrow ``string`` or integer column, 16 bytes each, joined."""
    return keyprint_rows(keys).tobytes()


def keyprint_rows(keys: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """:func:`keyprint` of each key of an Arrow ``string`` or integer column, as the rows of an ``(n, 16)`` array."""
    keys = keys.combine_chunks() if isinstance(keys, pa.ChunkedArray) else keys
    if pa.types.is_integer(keys.type):
        raw = np.asarray(keys.cast(pa.int64()).to_numpy(), dtype="<i8").tobytes()
        keys = pa.FixedSizeBinaryArray.from_buffers(pa.binary(8), len(keys), [None, pa.py_buffer(raw)])
    return content_hash_array(keys.cast(pa.large_binary()))


def fingerprint_of(keys: pa.Array | pa.ChunkedArray, contents: pa.Array | pa.ChunkedArray) -> int:
    """:func:`fingerprint_sum` of Arrow columns of keys (``string`` or integers) and content hashes (no nulls).

    The same number, computed without a Python object per key or hash: about a quarter
    of the cost, which matters on every write and on a diff's fingerprint check.
    """
    if not len(keys):
        return 0  # (combining no chunks makes an array with pa.array, see below)
    return digest_sum(pair_hashes(keys, contents))


def pair_hashes(keys: pa.Array | pa.ChunkedArray, contents: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """:func:`pair_hash` of each key (``string`` or integers) and content hash (no nulls), as ``(n, 16)`` big-endian
    digest bytes, without a Python object per key or hash."""
    keys = keys.combine_chunks() if isinstance(keys, pa.ChunkedArray) else keys
    contents = contents.combine_chunks() if isinstance(contents, pa.ChunkedArray) else contents
    # From buffers, not to_numpy() and pa.scalar(): those import pandas (a third of a second
    # a process), which a fresh process's diff would otherwise pay for a few rows.
    if pa.types.is_integer(keys.type):
        wide = keys.cast(pa.int64())
        values = np.frombuffer(wide.buffers()[1] or b"", dtype=np.int64, count=wide.offset + len(wide))[wide.offset :]
        raw = values.astype("<i8").tobytes()
        keys = pa.FixedSizeBinaryArray.from_buffers(pa.binary(8), len(keys), [None, pa.py_buffer(raw)])
    fixed = _fixed_width(keys)
    if fixed is not None and fixed.shape[1] + 16 <= xxh3.MIDSIZE_MAX:
        return fixed_pair_hashes(fixed, contents)
    no_offsets = pa.py_buffer(np.zeros(2, dtype=np.int64))
    empty = pa.LargeBinaryArray.from_buffers(pa.large_binary(), 1, [None, no_offsets, pa.py_buffer(b"")])[0]
    pairs = pc.binary_join_element_wise(keys.cast(pa.large_binary()), contents.cast(pa.large_binary()), empty)
    return content_hash_array(pairs)


def _fixed_width(keys: pa.Array) -> np.ndarray | None:
    """The bytes of ``keys`` (binary or string, no nulls) as the rows of an ``(n, width)`` array when every key
    is ``width`` bytes long (fixed-width ids, int keys); ``None`` otherwise."""
    if pa.types.is_fixed_size_binary(keys.type):
        width = keys.type.byte_width
        data = np.frombuffer(keys.buffers()[1] or b"", np.uint8, count=width * (keys.offset + len(keys)))
        return data[width * keys.offset :].reshape(-1, width)
    if not (pa.types.is_string(keys.type) or pa.types.is_large_string(keys.type)) or not len(keys):
        return None
    offsets = columnar.value_offsets(keys.cast(pa.large_string()))
    widths = np.diff(offsets)
    width = int(widths[0])
    if not width or not (widths == width).all():
        return None
    data = np.frombuffer(keys.cast(pa.large_string()).buffers()[2], np.uint8)
    return data[int(offsets[0]) : int(offsets[-1])].reshape(-1, width)


def fixed_pair_hashes(keys: np.ndarray, contents: pa.Array) -> np.ndarray:
    """:func:`pair_hashes` of keys all ``width`` bytes long (the rows of ``keys``, text keys' UTF-8 bytes or int
    keys' 8 little-endian bytes; a strided view will do) and ``contents``: their inputs laid out at a fixed
    stride in one array, which :func:`litstore.format.xxh3.hash128` reads without gathering (half the cost of
    joining them with Arrow and hashing inputs of any length)."""
    count, width = keys.shape
    joined = np.empty((count, width + 16), np.uint8)
    joined[:, :width] = keys
    raw = np.frombuffer(contents.buffers()[1] or b"", np.uint8, count=16 * (contents.offset + count))
    joined[:, width:] = raw[16 * contents.offset :].reshape(-1, 16)
    return xxh3.hash128(joined.reshape(-1), np.arange(0, (width + 16) * count + 1, width + 16, dtype=np.int64))


def digest_sum(digests: np.ndarray) -> int:
    """The sum modulo 2**128 of ``(n, 16)`` big-endian 128-bit digests (a fingerprint from pair hashes)."""
    # Each digest is two big-endian 64-bit words: each word's two 32-bit halves are summed
    # in uint64 (no overflow below 2**32 rows), then carried into one number. (Per word,
    # not per 4-byte limb of an (n, 4) array: a third of the time.)
    words = np.ascontiguousarray(digests).view(">u8").reshape(-1, 2)
    low_half = np.uint64(0xFFFFFFFF)
    total = 0
    for place in range(2):
        native = words[:, place].astype(np.uint64)
        shift = 64 * (1 - place)
        total += int((native & low_half).sum()) << shift
        total += int((native >> np.uint64(32)).sum()) << (shift + 32)
    return total % FINGERPRINT_MODULUS
