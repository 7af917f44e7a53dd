"""An independent reader of stoker datasets, written from docs/FORMAT.md alone.

This is a check on the spec, not a second implementation to keep in step with the code:
it was written by reading docs/FORMAT.md (and LMDB's public file format, which FORMAT.md
names and whose bytes it spells out in "The shard file, byte by byte") without looking at
stoker's Rust code, and it uses neither the `lmdb` module nor stoker's Python package.
Standard library and numpy only, so it ports line by line to another language. When it
disagrees with a dataset that stoker wrote, either FORMAT.md or this file is wrong; fix
FORMAT.md first if that is where the reading came from.

`read_dataset(path)` opens a dataset directory and returns its manifest and every record,
raising `SpecError` at the first thing that breaks a rule FORMAT.md states; with
`layout=False` it reads any LMDB shard (those older builds wrote through LMDB's own writer)
and skips the rules of stoker's own writer. Comments quote or name the FORMAT.md sections
the checks come from.
"""

import json
import os
import re
import stat
import struct
from dataclasses import dataclass
from pathlib import Path

import numpy as np


class SpecError(ValueError):
    """The dataset breaks a rule of docs/FORMAT.md."""


def _require(cond, message):
    if not cond:
        raise SpecError(message)


# ---------------------------------------------------------------------------------------
# Checksums: CRC-32C ("Values (records)") and XXH3-64 with seed 0 ("manifest.json").

_CRC32C_TABLE = []
for _i in range(256):
    _c = _i
    for _ in range(8):
        _c = (_c >> 1) ^ (0x82F63B78 if _c & 1 else 0)
    _CRC32C_TABLE.append(_c)


def crc32c(data, crc=0):
    """CRC-32C (Castagnoli, reflected, init and final xor 0xFFFFFFFF), continuing `crc`."""
    table = _CRC32C_TABLE
    c = crc ^ 0xFFFFFFFF
    for b in data:
        c = table[(c ^ b) & 0xFF] ^ (c >> 8)
    return c ^ 0xFFFFFFFF


assert crc32c(b"123456789") == 0xE3069283  # FORMAT.md's check value

_M64 = (1 << 64) - 1
_P32_1, _P32_2, _P32_3 = 0x9E3779B1, 0x85EBCA77, 0xC2B2AE3D
_P64_1, _P64_2, _P64_3 = 0x9E3779B185EBCA87, 0xC2B2AE3D27D4EB4F, 0x165667B19E3779F9
_P64_4, _P64_5 = 0x85EBCA77C2B2AE63, 0x27D4EB2F165667C5
_PRIME_MX1 = 0x165667919E3779F9
# XXH3's default 192-byte secret (xxhash.h, XXH3_kSecret).
_XXH3_SECRET = bytes.fromhex(
    "b8fe6c3923a44bbe7c01812cf721ad1cded46de9839097db7240a4a4b7b3671f"
    "cb79e64eccc0e578825ad07dccff7221b8084674f743248ee03590e6813a264c"
    "3c2852bb91c300cb88d0658b1b532ea371644897a20df94e3819ef46a9deacd8"
    "a8fa763fe39c343ff9dcbbc7c70b4f1d8a51e04bcdb45931c89f7ec9d9787364"
    "eac5ac8334d3ebc3c581a0fffa1363eb170ddd51b7f0da49d316552629d4689e"
    "2b16be587d47a1fc8ff8b8d17ad031ce45cb3a8f95160428afd7fbcabb4b407e"
)


def _secret64(offset, count):
    return np.frombuffer(_XXH3_SECRET, dtype="<u8", count=count, offset=offset).astype(np.uint64)


_STRIPE_KEYS = np.stack([_secret64(8 * s, 8) for s in range(16)])  # (stripe, lane)
_SCRAMBLE_KEY = _secret64(192 - 64, 8)
_LAST_KEY = _secret64(192 - 64 - 7, 8)
_SWAP = [i ^ 1 for i in range(8)]


def _accumulate(acc, stripes, keys):
    """XXH3's scalar accumulate over `stripes` (n, 8 lanes) with `keys` (n, 8)."""
    if len(stripes) == 0:
        return acc
    dk = stripes ^ keys
    products = (dk & np.uint64(0xFFFFFFFF)) * (dk >> np.uint64(32))
    return (
        acc + products.sum(axis=0, dtype=np.uint64) + stripes[:, _SWAP].sum(axis=0, dtype=np.uint64)
    )


_PRIME_MX2 = 0x9FB21C651E98DF25


def _le64(b, at):
    return struct.unpack_from("<Q", b, at)[0]


def _le32(b, at):
    return struct.unpack_from("<I", b, at)[0]


def _fold64(a, b):
    p = a * b
    return (p & _M64) ^ (p >> 64)


def _xxh64_avalanche(h):
    h ^= h >> 33
    h = (h * _P64_2) & _M64
    h ^= h >> 29
    h = (h * _P64_3) & _M64
    return h ^ (h >> 32)


def _xxh3_avalanche(h):
    h ^= h >> 37
    h = (h * _PRIME_MX1) & _M64
    return h ^ (h >> 32)


def _mix16(data, at, key_at):
    lo = _le64(data, at) ^ _le64(_XXH3_SECRET, key_at)
    hi = _le64(data, at + 8) ^ _le64(_XXH3_SECRET, key_at + 8)
    return _fold64(lo, hi)


def _xxh3_short(data):
    """XXH3-64, seed 0, default secret, for inputs of 0 to 240 bytes (a small source map)."""
    n, k = len(data), _XXH3_SECRET
    if n == 0:
        return _xxh64_avalanche(_le64(k, 56) ^ _le64(k, 64))
    if n <= 3:
        combined = (data[0] << 16) | (data[n >> 1] << 24) | data[n - 1] | (n << 8)
        return _xxh64_avalanche(combined ^ (_le32(k, 0) ^ _le32(k, 4)))
    if n <= 8:
        keyed = ((_le32(data, n - 4) + (_le32(data, 0) << 32)) & _M64) ^ (_le64(k, 8) ^ _le64(k, 16))
        h = keyed ^ (((keyed << 49) | (keyed >> 15)) & _M64) ^ (((keyed << 24) | (keyed >> 40)) & _M64)
        h = (h * _PRIME_MX2) & _M64
        h ^= (h >> 35) + n
        h = (h * _PRIME_MX2) & _M64
        return h ^ (h >> 28)
    if n <= 16:
        lo = _le64(data, 0) ^ (_le64(k, 24) ^ _le64(k, 32))
        hi = _le64(data, n - 8) ^ (_le64(k, 40) ^ _le64(k, 48))
        swapped = int.from_bytes(lo.to_bytes(8, "little"), "big")
        return _xxh3_avalanche((n + swapped + hi + _fold64(lo, hi)) & _M64)
    acc = (n * _P64_1) & _M64
    if n <= 128:
        pairs = [(0, 0), (16, 32), (32, 64), (48, 96)][: (n - 1) // 32 + 1]
        for at, key in pairs:
            acc += _mix16(data, at, key) + _mix16(data, n - 16 - at, key + 16)
        return _xxh3_avalanche(acc & _M64)
    for i in range(8):
        acc += _mix16(data, 16 * i, 16 * i)
    acc = _xxh3_avalanche(acc & _M64)
    for i in range(8, n // 16):
        acc += _mix16(data, 16 * i, 16 * (i - 8) + 3)
    acc += _mix16(data, n - 16, 136 - 17)
    return _xxh3_avalanche(acc & _M64)


def xxh3_64(data):
    """XXH3-64 with seed 0 and the default secret."""
    n = len(data)
    if n <= 240:
        return _xxh3_short(bytes(data))
    acc = np.array(
        [_P32_3, _P64_1, _P64_2, _P64_3, _P64_4, _P32_2, _P64_5, _P32_1], dtype=np.uint64
    )
    blocks = (n - 1) // 1024
    with np.errstate(over="ignore"):
        if blocks:
            lanes = np.frombuffer(data, dtype="<u8", count=blocks * 128).reshape(blocks, 16, 8)
            dk = lanes ^ _STRIPE_KEYS
            per_block = ((dk & np.uint64(0xFFFFFFFF)) * (dk >> np.uint64(32))).sum(
                axis=1, dtype=np.uint64
            )
            per_block += lanes[:, :, _SWAP].sum(axis=1, dtype=np.uint64)
            for b in range(blocks):
                acc = acc + per_block[b]
                acc ^= acc >> np.uint64(47)
                acc ^= _SCRAMBLE_KEY
                acc *= np.uint64(_P32_1)
        start = blocks * 1024
        stripes = ((n - 1) - start) // 64
        tail = np.frombuffer(data[start : start + stripes * 64], dtype="<u8").reshape(stripes, 8)
        acc = _accumulate(acc, tail, _STRIPE_KEYS[:stripes])
        last = np.frombuffer(data[n - 64 : n], dtype="<u8").reshape(1, 8)
        acc = _accumulate(acc, last, _LAST_KEY.reshape(1, 8))
    acc = [int(a) for a in acc]
    result = (n * _P64_1) & _M64
    merge_key = struct.unpack_from("<8Q", _XXH3_SECRET, 11)
    for i in range(4):
        product = (acc[2 * i] ^ merge_key[2 * i]) * (acc[2 * i + 1] ^ merge_key[2 * i + 1])
        result = (result + ((product & _M64) ^ (product >> 64))) & _M64
    result ^= result >> 37
    result = (result * _PRIME_MX1) & _M64
    return result ^ (result >> 32)


# ---------------------------------------------------------------------------------------
# manifest.json ("manifest.json", "Version 1", "Partitioned conversion and merge").

MANIFEST_FIELDS = [
    "format",
    "format_version",
    "samples",
    "encoding",
    "raw_size",
    "classes",
    "shards",
    "bytes",
    "payload_bytes",
    "provenance",
    "audit",
    "part",
    "sources",
]
OPTIONAL_FIELDS = {"audit", "part", "sources"}
AUDIT_FIELDS = [
    "jpeg_files",
    "other_images",
    "by_sof",
    "by_precision",
    "by_components",
    "by_subsampling",
    "by_color_space",
    "progressive",
    "arithmetic",
    "lossless",
    "gpu_hardware_ok",
    "gpu_hardware_rejected",
    "nvjpeg_rejected",
    "hardware_reject_reasons",
    "reencoded_for_gpu",
]
SUBSAMPLINGS = {"4:2:0", "4:4:4", "4:2:2", "4:4:0", "4:1:1", "4:1:0", "gray", "nonstandard"}
COLOR_SPACES = {"ycbcr", "gray", "rgb", "cmyk", "ycck", "other"}
ORDERS = {"classes", "flat", "list", "webdataset", "shuffled", "written"}
PART_FIELDS = ["index", "count", "inputs", "first_input", "end_input", "listing"]
RECORD_MIN_BYTES = 40  # "a record takes at least 40 bytes: key and header"


def _is_uint(v):
    return isinstance(v, int) and not isinstance(v, bool) and v >= 0


def _count_map(m, what, keys=None, pattern=None):
    _require(isinstance(m, dict), f"audit.{what} is not an object")
    _require(list(m) == sorted(m), f"audit.{what} keys are not in byte order")
    for k, v in m.items():
        _require(_is_uint(v), f"audit.{what}[{k!r}] is not a count")
        if keys is not None:
            _require(k in keys, f"audit.{what} has the undocumented key {k!r}")
        if pattern is not None:
            _require(re.fullmatch(pattern, k), f"audit.{what} has the undocumented key {k!r}")


def check_audit(audit):
    """FORMAT.md "audit": the fields in order, the documented keys, the counts adding up."""
    _require(isinstance(audit, dict), "audit is not an object")
    _require(list(audit) == AUDIT_FIELDS, f"audit fields {list(audit)} are not FORMAT.md's")
    for k in AUDIT_FIELDS:
        if not k.startswith(("by_", "hardware_")):
            _require(_is_uint(audit[k]), f"audit.{k} is not a count")
    _count_map(audit["by_sof"], "by_sof", pattern=r"SOF[0-9]+")
    _count_map(audit["by_precision"], "by_precision", keys={"8", "12", "16"})
    _count_map(audit["by_components"], "by_components", pattern=r"[0-9]+")
    _count_map(audit["by_subsampling"], "by_subsampling", keys=SUBSAMPLINGS)
    _count_map(audit["by_color_space"], "by_color_space", keys=COLOR_SPACES)
    _count_map(audit["hardware_reject_reasons"], "hardware_reject_reasons")
    # Each JPEG input counted has one SOF, one precision, one component count, one
    # subsampling and one color space, and is either taken or rejected by the hardware.
    jpegs = audit["jpeg_files"]
    for k in ("by_sof", "by_precision", "by_components", "by_subsampling", "by_color_space"):
        _require(sum(audit[k].values()) == jpegs, f"audit.{k} does not add up to jpeg_files")
    _require(
        audit["gpu_hardware_ok"] + audit["gpu_hardware_rejected"] == jpegs,
        "audit.gpu_hardware_ok + gpu_hardware_rejected is not jpeg_files",
    )
    for k in ("progressive", "arithmetic", "lossless", "nvjpeg_rejected", "reencoded_for_gpu"):
        _require(audit[k] <= jpegs, f"audit.{k} is more than jpeg_files")


def read_manifest(directory):
    """The manifest of the dataset at `directory`, checked as FORMAT.md describes."""
    path = Path(directory) / "manifest.json"
    # "A directory without `manifest.json` is not a dataset."
    _require(path.is_file(), f"{directory}: no manifest.json, not a dataset")
    raw = path.read_bytes()
    try:
        text = raw.decode("utf-8")
        m = json.loads(text)
    except (UnicodeDecodeError, ValueError) as e:
        raise SpecError(f"manifest.json is not UTF-8 JSON: {e}") from None
    _require(isinstance(m, dict), "manifest.json is not a JSON object")
    # "UTF-8 JSON, pretty-printed (serde_json's: two-space indent, non-ASCII characters not
    # escaped), fields in this order, trailing newline; an optional field is absent".
    _require(text.endswith("}\n"), "manifest.json does not end with a newline")
    _require(
        text == json.dumps(m, indent=2, ensure_ascii=False) + "\n",
        "manifest.json is not pretty-printed",
    )
    present = [f for f in MANIFEST_FIELDS if f in m]
    _require(list(m) == present, f"manifest fields {list(m)} are not in FORMAT.md's order")
    missing = set(MANIFEST_FIELDS) - OPTIONAL_FIELDS - set(m)
    _require(not missing, f"manifest lacks {sorted(missing)}")

    _require(m["format"] == "stoker-lmdb", f"format {m['format']!r} is not stoker-lmdb")
    version = m["format_version"]
    _require(version in (1, 2) and isinstance(version, int), f"unknown format_version {version!r}")
    _require(_is_uint(m["samples"]), "samples is not a u64")
    _require(m["encoding"] in ("jpeg", "raw"), f"encoding {m['encoding']!r}")
    raw_size = m["raw_size"]
    if m["encoding"] == "jpeg":
        _require(raw_size is None, "raw_size must be null for a JPEG dataset")
    else:
        _require(
            isinstance(raw_size, dict) and list(raw_size) == ["height", "width", "channels"],
            f"raw_size {raw_size!r} is not {{height, width, channels}}",
        )
        _require(all(_is_uint(v) and v > 0 for v in raw_size.values()), "raw_size values")
        _require(
            raw_size["height"] * raw_size["width"] * raw_size["channels"] <= 2**32 - 1,
            "raw_size: height × width × channels past 2^32 - 1 (a record's payload length is a u32)",
        )
    classes = m["classes"]
    _require(isinstance(classes, list) and all(isinstance(c, str) for c in classes), "classes")

    # Shards: "Shard `i` is named shard-%05d.lmdb"; "Shards partition 0 .. samples
    # contiguously, in manifest order"; the refusals listed under manifest.json.
    digest = "xxh3" if version == 2 else "crc32c"
    expected = ["file", "first_index", "count", "key_base", "bytes", digest]
    _require(isinstance(m["shards"], list), "shards is not a list")
    next_index = 0
    total_bytes = 0
    for i, s in enumerate(m["shards"]):
        _require(isinstance(s, dict), f"shard {i} is not an object")
        order = [k for k in expected if k in s]
        _require(list(s) == order, f"shard {i} fields {list(s)} (expected {expected})")
        _require(digest in s, f"shard {i} lacks its digest `{digest}`")
        for k in ("first_index", "count", "bytes") + (("key_base",) if "key_base" in s else ()):
            _require(_is_uint(s.get(k)), f"shard {i}: {k} is not a u64")
        _require(s["file"] == f"shard-{i:05d}.lmdb", f"shard {i} is named {s['file']!r}")
        _require(
            s["first_index"] == next_index,
            f"shard {i} starts at {s['first_index']}, not {next_index}",
        )
        _require(
            s["count"] * RECORD_MIN_BYTES <= s["bytes"],
            f"shard {i}: {s['count']} records cannot fit in {s['bytes']} bytes",
        )
        if version == 2:
            _require(
                re.fullmatch(r"[0-9a-f]{16}", s["xxh3"]),
                f"shard {i}: xxh3 {s['xxh3']!r} is not 16 lowercase hex digits",
            )
        else:
            _require(
                _is_uint(s["crc32c"]) and s["crc32c"] < 1 << 32, f"shard {i}: crc32c is not a u32"
            )
        next_index += s["count"]
        total_bytes += s["bytes"]
    _require(
        next_index == m["samples"], f"shards hold {next_index} records, samples is {m['samples']}"
    )
    _require(
        total_bytes == m["bytes"], f"shards add up to {total_bytes} bytes, bytes is {m['bytes']}"
    )
    _require(_is_uint(m["payload_bytes"]), "payload_bytes is not a u64")

    prov = m["provenance"]
    _require(
        isinstance(prov, dict) and list(prov) == ["tool", "tool_version", "source", "flags"],
        f"provenance fields {list(prov)}",
    )
    flags = prov["flags"]
    _require(
        isinstance(flags, dict) and all(isinstance(v, str) for v in flags.values()),
        "provenance.flags is not a string map",
    )
    _require(list(flags) == sorted(flags), "provenance.flags keys are not in byte order")
    _require(flags.get("order") in ORDERS, f"provenance.flags.order {flags.get('order')!r}")
    _require(
        ("shuffle" in flags) == (flags["order"] == "shuffled"),
        "flags.shuffle goes with order shuffled",
    )
    if "shuffle" in flags:
        _require(re.fullmatch(r"[0-9]+", flags["shuffle"]), "flags.shuffle is not a seed")
    written = flags["order"] == "written"
    if written:
        # "A dataset written from samples has no listing, and no `listing` flag."
        _require("listing" not in flags, "a written dataset has a listing flag")
    else:
        _require(
            re.fullmatch(r"[0-9a-f]{8}", flags.get("listing", "")),
            "flags.listing is not 8 hex digits",
        )
    _require(flags.get("encoding") == m["encoding"], "flags.encoding differs from encoding")
    if "audit" in m:
        check_audit(m["audit"])
    if "part" in m:
        check_part(m, written)
    return m


def output_flags_json(flags):
    """FORMAT.md "Written parts": the output flags, a written part's `provenance.flags`
    without `order`, as one compact JSON object (keys in byte order, no whitespace,
    non-ASCII characters not escaped)."""
    kept = {k: v for k, v in flags.items() if k != "order"}
    return json.dumps(kept, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def written_part_listing(classes, flags):
    """FORMAT.md "Written parts": a written part's `listing`, the CRC-32C (8 hex digits) of
    `stoker.Writer part` and a NUL byte, each class name followed by a NUL byte, then the
    output flags as JSON."""
    data = b"stoker.Writer part\0"
    data += b"".join(c.encode("utf-8") + b"\0" for c in classes)
    data += output_flags_json(flags).encode("utf-8")
    return f"{crc32c(data):08x}"


def check_part(m, written):
    """A part's manifest: "Partitioned conversion and merge" (a converted part) and
    "Written parts" (`written: true`)."""
    p = m["part"]
    flags = m["provenance"]["flags"]
    _require(isinstance(p, dict), f"part {p!r} is not an object")
    # `written` is `true` in a written part, left out (false) in a converted one; a
    # written part's `records` follows it (parts of builds before 2026-12-04 lack it).
    extra = ["written"] + (["records"] if "records" in p else []) if written else []
    _require(
        list(p) == PART_FIELDS + extra,
        f"part fields {list(p)} (expected {PART_FIELDS}, and `written`, `records` in a written part)",
    )
    if "records" in p:
        _require(re.fullmatch(r"[0-9a-f]{16}", p["records"]), "part.records is not 16 hex digits")
    _require(p.get("written", True) is True, "part.written is there but not true")
    _require(
        all(_is_uint(p[k]) for k in ("index", "count", "inputs", "first_input", "end_input")),
        "part counts",
    )
    _require(p["index"] < p["count"], "part.index >= part.count")
    _require(re.fullmatch(r"[0-9a-f]{8}", p["listing"]), "part.listing is not 8 hex digits")
    if written:
        # "`inputs` is 0, `first_input` 0 and `end_input` the number of samples given to
        # the part (records and skips)".
        _require(p["inputs"] == 0 and p["first_input"] == 0, "written part: inputs, first_input")
        _require(m["samples"] <= p["end_input"], "written part holds more records than samples")
        _require(
            p["listing"] == written_part_listing(m["classes"], flags),
            "written part: part.listing is not the fingerprint of its classes and flags",
        )
    else:
        # "converts positions floor(I·n/N) .. floor((I+1)·n/N) of the n inputs"
        n, i, c = p["inputs"], p["index"], p["count"]
        _require(
            p["first_input"] == i * n // c and p["end_input"] == (i + 1) * n // c, "part slice"
        )
        _require(
            m["samples"] <= p["end_input"] - p["first_input"],
            "part holds more samples than inputs",
        )
        _require(p["listing"] == flags["listing"], "part.listing differs from flags.listing")
    _require(all("key_base" not in s for s in m["shards"]), "a part's keys start at 0")


# ---------------------------------------------------------------------------------------
# The shard file: LMDB's layout ("Shards", "The shard file, byte by byte", "Writing").

PAGE_HEADER = 16
P_BRANCH, P_LEAF, P_OVERFLOW, P_META = 0x01, 0x02, 0x04, 0x08
F_BIGDATA = 0x01
P_INVALID = (1 << 64) - 1
MDB_MAGIC = 0xBEEFC0DE
MDB_DATA_VERSION = 1
FREE_DB_FLAGS = 0x4008  # MDB_INTEGERKEY | MDB_NOSUBDIR, as LMDB writes them
ZERO_TAIL_PAGES = 33
STOKER_PAGE_SIZE = 4096


@dataclass
class Meta:
    pgno: int
    magic: int
    version: int
    address: int
    mapsize: int
    psize: int
    free_flags: int
    free_db: tuple  # depth, branch_pages, leaf_pages, overflow_pages, entries, root
    main_pad: int
    main_flags: int
    main_db: tuple
    last_pg: int
    txnid: int


def parse_meta(page, pgno):
    """A meta page: page header, then MDB_meta (offsets from the page start)."""
    _, pad, flags, lower, upper = struct.unpack_from("<QHHHH", page, 0)
    _require(flags == P_META, f"page {pgno}: flags {flags:#x} are not P_META")
    _require(struct.unpack_from("<Q", page, 0)[0] == pgno, f"meta page {pgno} names another page")
    _require(pad == 0 and lower == 0 and upper == 0, f"meta page {pgno}: header fields not zero")
    magic, version, address, mapsize = struct.unpack_from("<IIQQ", page, 16)
    dbs = []
    for off in (40, 88):
        md_pad, md_flags, depth, branch, leaf, ovf, entries, root = struct.unpack_from(
            "<IHHQQQQQ", page, off
        )
        dbs.append((md_pad, md_flags, (depth, branch, leaf, ovf, entries, root)))
    last_pg, txnid = struct.unpack_from("<QQ", page, 136)
    _require(not any(page[152:]), f"meta page {pgno}: bytes after the meta are not zero")
    return Meta(
        pgno,
        magic,
        version,
        address,
        mapsize,
        dbs[0][0],
        dbs[0][1],
        dbs[0][2],
        dbs[1][0],
        dbs[1][1],
        dbs[1][2],
        last_pg,
        txnid,
    )


EMPTY_DB = (0, 0, 0, 0, 0, P_INVALID)


@dataclass
class Record:
    index: int
    key: int
    label: int
    encoding: int
    channels: int
    height: int
    width: int
    payload: bytes
    value_offset: int  # where the value (header + payload) starts in the shard file
    shard: int


class _Walker:
    """Descends the record tree of one shard, checking LMDB's page rules as it goes, and with
    `strict` the way stoker's writer packs pages ("The shard file, byte by byte")."""

    def __init__(self, buf, psize, npages, name, strict):
        self.buf, self.psize, self.npages, self.name = buf, psize, npages, name
        self.strict = strict
        self.seen = {}  # pgno -> ("leaf"|"branch"|"overflow", level or run length)
        self.leaves = []  # (pgno, [(key, value_len, big)])
        self.branches = {}  # level -> [(pgno, children)]
        self.items = []  # (key bytes, value offset, value length)

    def page(self, pgno, what):
        _require(2 <= pgno < self.npages, f"{self.name}: {what} page {pgno} outside the file")
        _require(pgno not in self.seen, f"{self.name}: page {pgno} reached twice")
        p = self.buf[pgno * self.psize : (pgno + 1) * self.psize]
        _require(
            struct.unpack_from("<Q", p, 0)[0] == pgno,
            f"{self.name}: page {pgno} names another page",
        )
        return p

    def nodes(self, p, pgno):
        pad, flags, lower, upper = struct.unpack_from("<HHHH", p, 8)
        _require(pad == 0, f"{self.name}: page {pgno}: mp_pad {pad}")
        _require(
            PAGE_HEADER <= lower <= upper <= self.psize and lower % 2 == 0,
            f"{self.name}: page {pgno}: lower {lower} upper {upper}",
        )
        n = (lower - PAGE_HEADER) // 2
        _require(n >= 1, f"{self.name}: page {pgno} is empty")
        ptrs = struct.unpack_from(f"<{n}H", p, PAGE_HEADER)
        if self.strict:
            _require(not any(p[lower:upper]), f"{self.name}: page {pgno}: free space not zero")
        return flags, ptrs, upper

    def node_at(self, pgno, i, off, size, end):
        """Node `i` lies at `off..off + size`: inside the node area, and with `strict`
        right below node `i - 1` (at `end`), as stoker packs them."""
        _require(off % 2 == 0, f"{self.name}: page {pgno} node {i}: odd offset {off}")
        if self.strict:
            _require(off + size == end, f"{self.name}: page {pgno} node {i} is not packed")
        else:
            _require(off + size <= self.psize, f"{self.name}: page {pgno} node {i} past the page")

    def walk(self, pgno, level):
        p = self.page(pgno, "tree")
        flags, ptrs, upper = self.nodes(p, pgno)
        if level == 1:
            _require(
                flags == P_LEAF, f"{self.name}: page {pgno} at the leaf level has flags {flags:#x}"
            )
            self.seen[pgno] = ("leaf", 1)
            self.leaf(p, pgno, ptrs, upper)
        else:
            _require(
                flags == P_BRANCH, f"{self.name}: page {pgno} at level {level} has flags {flags:#x}"
            )
            self.seen[pgno] = ("branch", level)
            children = []
            end = self.psize
            for i, off in enumerate(ptrs):
                _require(upper <= off <= self.psize - 8, f"{self.name}: page {pgno} node {i}")
                lo, hi, fl, ksize = struct.unpack_from("<HHHH", p, off)
                child = lo | hi << 16 | fl << 32
                self.node_at(pgno, i, off, 8 + ksize + (ksize & 1), end)
                _require(
                    ksize == (0 if i == 0 else 8),
                    f"{self.name}: branch page {pgno} node {i} key size {ksize}",
                )
                key = bytes(p[off + 8 : off + 8 + ksize])
                first = len(self.items)
                self.walk(child, level - 1)
                _require(len(self.items) > first, f"{self.name}: subtree {child} is empty")
                if i > 0:
                    # A separator is the first key of its child's subtree.
                    _require(
                        self.items[first][0] == key,
                        f"{self.name}: page {pgno} node {i}: not its subtree's first key",
                    )
                children.append(child)
                end = off
            if self.strict:
                _require(end == upper, f"{self.name}: page {pgno}: upper {upper} is not a node")
            self.branches.setdefault(level, []).append((pgno, children))

    def leaf(self, p, pgno, ptrs, upper):
        entries = []
        end = self.psize
        for i, off in enumerate(ptrs):
            _require(upper <= off <= self.psize - 8, f"{self.name}: page {pgno} node {i}")
            lo, hi, flags, ksize = struct.unpack_from("<HHHH", p, off)
            dsize = lo | hi << 16
            _require(ksize == 8, f"{self.name}: leaf {pgno} node {i}: key size {ksize}, not 8")
            _require(
                flags in (0, F_BIGDATA), f"{self.name}: leaf {pgno} node {i}: node flags {flags:#x}"
            )
            key = bytes(p[off + 8 : off + 16])
            big = flags == F_BIGDATA
            stored = 8 if big else dsize
            size = 16 + stored + (stored & 1)
            self.node_at(pgno, i, off, size, end)
            if big:
                run = struct.unpack_from("<Q", p, off + 16)[0]
                value_offset = self.overflow(run, dsize)
            else:
                value_offset = pgno * self.psize + off + 16
                _require(
                    not self.strict or not any(p[off + 16 + dsize : off + size]),
                    f"{self.name}: leaf {pgno}: node padding not zero",
                )
            self.items.append((key, value_offset, dsize))
            entries.append((key, dsize, big))
            end = off
        if self.strict:
            _require(end == upper, f"{self.name}: leaf {pgno}: upper {upper} is not a node")
        self.leaves.append((pgno, entries))

    def overflow(self, run, dsize):
        p = self.page(run, "overflow")
        pad, flags, pages = struct.unpack_from("<HHI", p, 8)
        _require(
            flags == P_OVERFLOW and pad == 0,
            f"{self.name}: overflow page {run} has flags {flags:#x}",
        )
        need = -(-(PAGE_HEADER + dsize) // self.psize)
        _require(
            pages == need,
            f"{self.name}: overflow run {run} has {pages} pages, a {dsize}-byte value needs {need}",
        )
        _require(run + pages <= self.npages, f"{self.name}: overflow run {run} ends past the file")
        for q in range(run + 1, run + pages):
            _require(q not in self.seen, f"{self.name}: page {q} reached twice")
            self.seen[q] = ("overflow-cont", run)
        self.seen[run] = ("overflow", pages)
        start = run * self.psize + PAGE_HEADER
        _require(
            not self.strict or not any(self.buf[start + dsize : (run + pages) * self.psize]),
            f"{self.name}: overflow run {run}: bytes after the value are not zero",
        )
        return start


def expected_layout(value_sizes, psize=STOKER_PAGE_SIZE):
    """The page plan FORMAT.md's "Writing" gives for values of these sizes, in key order:
    {"leaves": [(pgno, count)], "overflow": {record: (pgno, pages)}, "levels": [[(pgno,
    children)]], "root", "depth", "last_pg"}."""
    nodemax = (((psize - PAGE_HEADER) // 2) & ~1) - 2  # LMDB's me_nodemax: 2038 for 4 KiB
    pg = 2
    leaves, overflow, count, free = [], {}, 0, psize - PAGE_HEADER
    for k, vlen in enumerate(value_sizes):
        big = 8 + 8 + vlen > nodemax
        size = 16 + (8 if big else vlen)
        size += size & 1
        # A full leaf is written before the overflow run of the value that did not fit.
        if count and size + 2 > free:
            leaves.append((pg, count))
            pg += 1
            count, free = 0, psize - PAGE_HEADER
        if big:
            pages = -(-(PAGE_HEADER + vlen) // psize)
            overflow[k] = (pg, pages)
            pg += pages
        count += 1
        free -= size + 2
    if count:
        leaves.append((pg, count))
        pg += 1
    levels = []
    level = [p for p, _ in leaves]
    # A branch page holds a first node without key (8 bytes) and then 16-byte nodes,
    # each with its 2-byte offset.
    per_page = 1 + (psize - PAGE_HEADER - (8 + 2)) // (16 + 2)
    while len(level) > 1:
        pages = -(-len(level) // per_page)
        base, extra = divmod(len(level), pages)
        sizes = [base + (1 if i < extra else 0) for i in range(pages)]
        nxt = []
        for s in sizes:
            nxt.append((pg, s))
            pg += 1
        levels.append(nxt)
        level = [p for p, _ in nxt]
    return {
        "leaves": leaves,
        "overflow": overflow,
        "levels": levels,
        "root": level[0] if level else P_INVALID,
        "depth": (len(levels) + 1) if level else 0,
        "last_pg": pg - 1,
    }


RECORD_HEADER = struct.Struct("<4sHBBIIIIII")
RECORD_MAGIC = b"STKR"


def parse_record(value, where):
    """Header and payload of one value ("Values (records)")."""
    _require(len(value) >= 32, f"{where}: value of {len(value)} bytes is shorter than the header")
    magic, version, encoding, channels, height, width, label, plen, crc, hcrc = (
        RECORD_HEADER.unpack_from(value, 0)
    )
    _require(magic == RECORD_MAGIC, f"{where}: magic {magic!r}")
    _require(version == 1, f"{where}: record version {version}")
    _require(hcrc == crc32c(value[:28]), f"{where}: header CRC-32C does not match")
    _require(encoding in (0, 1), f"{where}: encoding {encoding}")
    _require(
        len(value) == 32 + plen, f"{where}: value is {len(value)} bytes, header says 32 + {plen}"
    )
    payload = bytes(value[32:])
    _require(crc == crc32c(payload), f"{where}: payload CRC-32C does not match")
    return encoding, channels, height, width, label, payload


def read_shard(directory, manifest, i, layout=True):
    """Every record of shard `i`, checked. `layout`: also check that the file is laid out
    exactly as FORMAT.md's "Writing" says stoker writes it (every stoker-written shard;
    not those that older builds wrote through LMDB)."""
    entry = manifest["shards"][i]
    path = Path(directory) / entry["file"]
    name = entry["file"]
    _require(path.is_file(), f"{name}: missing or not a regular file")
    st = os.stat(path)
    _require(stat.S_ISREG(st.st_mode), f"{name}: not a regular file")
    _require(
        st.st_size == entry["bytes"], f"{name}: {st.st_size} bytes, manifest says {entry['bytes']}"
    )
    mode = stat.S_IMODE(st.st_mode)  # "0644 less the converting process's umask"
    _require(mode & ~0o644 == 0 and mode & 0o400, f"{name}: mode {mode:o} is not 0644 less a umask")
    buf = path.read_bytes()
    if manifest["format_version"] == 2:
        got = f"{xxh3_64(buf):016x}"
        _require(got == entry["xxh3"], f"{name}: XXH3-64 {got}, manifest says {entry['xxh3']}")
    else:
        got = crc32c(buf)
        _require(
            got == entry["crc32c"],
            f"{name}: CRC-32C {got:#010x}, manifest says {entry['crc32c']:#010x}",
        )

    # Meta pages: page size from the file (both agree), then the newer transaction.
    _require(len(buf) >= 2 * 512, f"{name}: too short for two meta pages")
    psize = struct.unpack_from("<I", buf, 16 + 24)[0]
    _require(psize >= 512 and psize & (psize - 1) == 0, f"{name}: page size {psize}")
    _require(
        len(buf) % psize == 0 and len(buf) >= 3 * psize,
        f"{name}: size {len(buf)} is not whole pages",
    )
    npages = len(buf) // psize
    metas = [parse_meta(buf[k * psize : (k + 1) * psize], k) for k in (0, 1)]
    for mt in metas:
        _require(mt.magic == MDB_MAGIC, f"{name}: meta {mt.pgno}: magic {mt.magic:#x}")
        _require(mt.version == MDB_DATA_VERSION, f"{name}: meta {mt.pgno}: version {mt.version}")
        _require(mt.address == 0, f"{name}: meta {mt.pgno}: fixed map address")
        _require(mt.psize == psize, f"{name}: meta pages disagree on the page size")
        _require(
            mt.last_pg < npages, f"{name}: meta {mt.pgno}: last page {mt.last_pg} outside the file"
        )
        _require(
            mt.main_flags == 0, f"{name}: meta {mt.pgno}: record tree flags {mt.main_flags:#x}"
        )
    meta = max(metas, key=lambda mt: mt.txnid)
    depth, branch_pages, leaf_pages, overflow_pages, entries, root = meta.main_db
    _require(
        entries == entry["count"], f"{name}: meta says {entries} records, manifest {entry['count']}"
    )

    w = _Walker(memoryview(buf), psize, npages, name, strict=layout)
    if entries:
        _require(1 <= depth <= 64 and root != P_INVALID, f"{name}: depth {depth} root {root}")
        w.walk(root, depth)
    else:
        _require(depth == 0 and root == P_INVALID, f"{name}: an empty tree has root {root}")
    _require(
        len(w.items) == entries, f"{name}: tree holds {len(w.items)} records, meta says {entries}"
    )
    kinds = [k for k, _ in w.seen.values()]
    _require(
        kinds.count("leaf") == leaf_pages,
        f"{name}: {kinds.count('leaf')} leaf pages, meta says {leaf_pages}",
    )
    _require(
        kinds.count("branch") == branch_pages, f"{name}: branch pages, meta says {branch_pages}"
    )
    _require(
        kinds.count("overflow") + kinds.count("overflow-cont") == overflow_pages,
        f"{name}: overflow pages, meta says {overflow_pages}",
    )
    _require(max(w.seen, default=1) <= meta.last_pg, f"{name}: a page past last_pg {meta.last_pg}")

    if layout:
        check_stoker_layout(name, buf, psize, npages, metas, w)

    # Keys: u64 big-endian, key_base + (index - first_index), dense and in order.
    key_base = entry.get("key_base", entry["first_index"])
    records = []
    for n, (key, off, dsize) in enumerate(w.items):
        index = entry["first_index"] + n
        k = struct.unpack(">Q", key)[0]
        _require(k == key_base + n, f"{name}: record {n} has key {k}, expected {key_base + n}")
        where = f"{name}: record {index} (key {k})"
        enc, ch, h, wd, label, payload = parse_record(buf[off : off + dsize], where)
        records.append(Record(index, k, label, enc, ch, h, wd, payload, off, i))
    return records


def check_stoker_layout(name, buf, psize, npages, metas, w):
    """FORMAT.md "Writing": one pass, every page once in ascending order, overflow runs as
    values arrive, leaves filled as LMDB fills them, then the branch levels, then the two
    meta pages (an empty tree at transaction 0, the records at transaction 1), and 33 zero
    pages after the last used page."""
    _require(psize == STOKER_PAGE_SIZE, f"{name}: page size {psize}, stoker writes 4096")
    m0, m1 = metas
    _require(m0.txnid == 0 and m1.txnid == 1, f"{name}: meta transactions {m0.txnid}, {m1.txnid}")
    _require(m0.main_db == EMPTY_DB and m0.last_pg == 1, f"{name}: meta 0 is not the empty tree")
    for mt in metas:
        _require(
            mt.mapsize == len(buf),
            f"{name}: meta {mt.pgno}: map size {mt.mapsize} is not the file size",
        )
        _require(
            mt.free_db == EMPTY_DB and mt.free_flags == FREE_DB_FLAGS,
            f"{name}: meta {mt.pgno}: free-page tree",
        )
        _require(mt.main_pad == 0, f"{name}: meta {mt.pgno}: record tree md_pad")
    _require(
        npages == m1.last_pg + 1 + ZERO_TAIL_PAGES,
        f"{name}: {npages} pages, last_pg {m1.last_pg} + 33 zero pages expected",
    )
    _require(
        not any(buf[(m1.last_pg + 1) * psize :]), f"{name}: the pages after last_pg are not zero"
    )
    # No unused pages between the meta pages and last_pg.
    _require(
        sorted(w.seen) == list(range(2, m1.last_pg + 1)), f"{name}: pages not reached by the tree"
    )
    plan = expected_layout([d for _, _, d in w.items], psize)
    got_leaves = [(p, len(e)) for p, e in w.leaves]
    _require(
        got_leaves == plan["leaves"],
        f"{name}: leaves {got_leaves[:5]}..., FORMAT.md's plan {plan['leaves'][:5]}...",
    )
    bigs = [n for n, (_, _, big) in enumerate(e for _, es in w.leaves for e in es) if big]
    _require(bigs == sorted(plan["overflow"]), f"{name}: which values are on overflow pages")
    runs = sorted((p, pages) for p, (kind, pages) in w.seen.items() if kind == "overflow")
    _require(
        runs == sorted(plan["overflow"].values()),
        f"{name}: overflow runs are not where FORMAT.md puts them",
    )
    for level, pages in enumerate(plan["levels"], start=2):
        got = sorted((p, len(c)) for p, c in w.branches.get(level, []))
        _require(got == pages, f"{name}: branch level {level}: {got}, FORMAT.md's plan {pages}")
    _require(
        m1.main_db[0] == plan["depth"]
        and m1.main_db[5] == plan["root"]
        and m1.last_pg == plan["last_pg"],
        f"{name}: root/depth/last_pg differ from FORMAT.md's plan",
    )


# ---------------------------------------------------------------------------------------
# The source map ("Source map").

SOURCE_NAME_MAX = 65536


def read_sources(directory, m=None):
    """The names of the source map of the dataset at `directory` (bytes, record 0's
    first), or None when its manifest names none; every rule of "Source map" checked."""
    m = m or read_manifest(directory)
    entry = m.get("sources")
    if entry is None:
        return None
    _require(
        isinstance(entry, dict) and list(entry) == ["file", "records", "bytes", "xxh3"],
        f"sources {entry!r} is not {{file, records, bytes, xxh3}}",
    )
    _require(entry["file"] == "sources.bin", f"sources.file is {entry['file']!r}")
    _require(entry["records"] == m["samples"], "sources.records is not samples")
    buf = (Path(directory) / entry["file"]).read_bytes()
    _require(len(buf) == entry["bytes"], "sources.bytes is not the file's size")
    _require(f"{xxh3_64(buf):016x}" == entry["xxh3"], "sources.xxh3 is not the file's digest")
    _require(len(buf) >= 24, "source map shorter than its header and first offset")
    magic, version, reserved, n = struct.unpack_from("<4sHHQ", buf, 0)
    _require(
        (magic, version, reserved) == (b"STKS", 1, 0),
        f"source map header {buf[:8]!r}",
    )
    _require(n == m["samples"], f"source map names {n} records, samples is {m['samples']}")
    names_at = 16 + 8 * (n + 1)
    _require(names_at <= len(buf), "source map too short for its offsets")
    offsets = struct.unpack_from(f"<{n + 1}Q", buf, 16)
    _require(offsets[0] == 0, "source map offsets[0] is not 0")
    _require(
        len(buf) == 24 + 8 * n + offsets[n], "source map size is not 24 + 8n + offsets[n]"
    )
    names = []
    for i in range(n):
        a, b = offsets[i], offsets[i + 1]
        _require(a <= b and b - a <= SOURCE_NAME_MAX, f"source map name {i}: {a}..{b}")
        names.append(buf[names_at + a : names_at + b])
    return names


def read_dataset(directory, layout=True):
    """(manifest, records) of the dataset at `directory`, every rule of FORMAT.md checked."""
    m = read_manifest(directory)
    read_sources(directory, m)
    records = []
    for i in range(len(m["shards"])):
        records.extend(read_shard(directory, m, i, layout))
    enc = {"jpeg": 0, "raw": 1}[m["encoding"]]
    payload_bytes = 0
    for r in records:
        where = f"record {r.index}"
        _require(
            r.encoding == enc, f"{where}: encoding {r.encoding}, manifest says {m['encoding']}"
        )
        _require(
            r.label < len(m["classes"]),
            f"{where}: label {r.label} with {len(m['classes'])} classes",
        )
        # FORMAT.md: a raw record holds gray (1) or RGB (3) pixels; a JPEG record's header
        # says 3 (its decode's RGB).
        allowed = (1, 3) if enc == 1 else (3,)
        _require(r.channels in allowed, f"{where}: {r.channels} channels, want one of {allowed}")
        if enc == 1:
            rs = m["raw_size"]
            _require(
                (r.height, r.width, r.channels) == (rs["height"], rs["width"], rs["channels"]),
                f"{where}: size differs from raw_size",
            )
            _require(
                len(r.payload) == r.height * r.width * r.channels, f"{where}: raw payload length"
            )
        else:
            frame = jpeg_frame(r.payload)
            _require(frame is not None, f"{where}: payload is not a JPEG file")
            _require(
                (frame["height"], frame["width"]) == (r.height, r.width),
                f"{where}: header size differs from the JPEG frame",
            )
        payload_bytes += len(r.payload)
    _require(
        payload_bytes == m["payload_bytes"],
        f"payload_bytes is {m['payload_bytes']}, records hold {payload_bytes}",
    )
    if "records" in m.get("part", {}):
        _require(
            m["part"]["records"] == f"{records_sum(records):016x}",
            "part.records is not the sum over the records of FORMAT.md's terms",
        )
    return m, records


def records_sum(records):
    """FORMAT.md "Written parts", `records`: the sum modulo 2^64 of mix(v), v being bytes
    24..32 of each record's header (payload CRC-32C, then the header's own) as a
    little-endian u64, mix being splitmix64's finalizer."""
    mask = (1 << 64) - 1
    total = 0
    for r in records:
        crc = crc32c(r.payload)
        head = RECORD_HEADER.pack(
            RECORD_MAGIC, 1, r.encoding, r.channels, r.height, r.width, r.label,
            len(r.payload), crc, 0,
        )[:28]
        z = crc | crc32c(head) << 32
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & mask
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & mask
        total = (total + (z ^ (z >> 31))) & mask
    return total


def pixels(record):
    """A raw record's pixels: row-major HWC u8."""
    return np.frombuffer(record.payload, dtype=np.uint8).reshape(
        record.height, record.width, record.channels
    )


# ---------------------------------------------------------------------------------------
# JPEG payloads: enough of the marker syntax to find the frame header.

_SOF = {0xC0, 0xC1, 0xC2, 0xC3, 0xC5, 0xC6, 0xC7, 0xC9, 0xCA, 0xCB, 0xCD, 0xCE, 0xCF}


def jpeg_frame(data):
    """{"sof", "precision", "height", "width", "components": [(id, h, v)], "jfif"} of a JPEG
    file starting with SOI, or None."""
    if data[:2] != b"\xff\xd8":
        return None
    i, jfif = 2, False
    while i + 4 <= len(data):
        if data[i] != 0xFF:
            return None
        while i < len(data) and data[i] == 0xFF:
            i += 1
        marker = data[i]
        i += 1
        if 0xD0 <= marker <= 0xD7 or marker == 0x01:
            continue
        length = struct.unpack_from(">H", data, i)[0]
        if marker == 0xE0 and data[i + 2 : i + 7] == b"JFIF\0":
            jfif = True
        if marker in _SOF:
            precision, height, width, n = struct.unpack_from(">BHHB", data, i + 2)
            comps = [
                (data[i + 8 + 3 * c], data[i + 9 + 3 * c] >> 4, data[i + 9 + 3 * c] & 15)
                for c in range(n)
            ]
            return {
                "sof": marker - 0xC0,
                "precision": precision,
                "height": height,
                "width": width,
                "components": comps,
                "jfif": jfif,
            }
        if marker == 0xDA:
            return None
        i += length
    return None
