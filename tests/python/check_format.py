#!/usr/bin/env python3
"""Reads a stoker dataset with the `lmdb` package, independently of the Rust code, and checks
it against docs/FORMAT.md.

Usage: check_format.py DATASET INDEX [EXPECTED_PAYLOAD_FILE]

Checks, for every shard listed in manifest.json: the file opens read-only without a lock
file, keys are 8-byte big-endian integers key_base..key_base+count in order (key_base defaults to
first_index; a merged dataset's shards keep their part's keys), and the
file's size and digest (format version 2: XXH3-64; version 1: CRC32C) match the manifest. For record INDEX it checks magic, version,
encoding, header CRC32C, payload length and payload CRC32C, and (if given) that the payload is
byte-equal to EXPECTED_PAYLOAD_FILE. Prints the parsed header of INDEX as JSON on stdout.
Exits 1 with a message on the first mismatch, 2 if `lmdb` cannot be imported.
"""

import json
import os
import struct
import sys

try:
    import lmdb
except ImportError as e:  # the Rust test decides whether this may be skipped
    print(f"cannot import lmdb: {e} (pip install lmdb)", file=sys.stderr)
    sys.exit(2)


def _crc32c_table():
    poly = 0x82F63B78  # Castagnoli, reflected
    table = []
    for i in range(256):
        c = i
        for _ in range(8):
            c = (c >> 1) ^ poly if c & 1 else c >> 1
        table.append(c)
    return table


_TABLE = _crc32c_table()


def crc32c(data, crc=0):
    crc ^= 0xFFFFFFFF
    t = _TABLE
    for b in data:
        crc = t[(crc ^ b) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


_SECRET = bytes.fromhex(
    "b8fe6c3923a44bbe7c01812cf721ad1cded46de9839097db7240a4a4b7b3671f"
    "cb79e64eccc0e578825ad07dccff7221b8084674f743248ee03590e6813a264c"
    "3c2852bb91c300cb88d0658b1b532ea371644897a20df94e3819ef46a9deacd8"
    "a8fa763fe39c343ff9dcbbc7c70b4f1d8a51e04bcdb45931c89f7ec9d9787364"
    "eac5ac8334d3ebc3c581a0fffa1363eb170ddd51b7f0da49d316552629d4689e"
    + "2b16be587d47a1fc8ff8b8d17ad031ce45cb3a8f95160428afd7fbcabb4b407e"
)
_M64 = (1 << 64) - 1
_P32_1, _P32_2, _P32_3 = 0x9E3779B1, 0x85EBCA77, 0xC2B2AE3D
_P64 = [0x9E3779B185EBCA87, 0xC2B2AE3D27D4EB4F, 0x165667B19E3779F9, 0x85EBCA77C2B2AE63,
        0x27D4EB2F165667C5]


def xxh3_64(data):
    """XXH3-64 with seed 0 and the default secret, for inputs over 240 bytes (every shard
    is): the reference algorithm's long-input path, written out for this check only."""
    n = len(data)
    assert n > 240, "shards are longer than 240 bytes"
    acc = [_P32_3, _P64[0], _P64[1], _P64[2], _P64[3], _P32_2, _P64[4], _P32_1]
    sec = [struct.unpack_from("<Q", _SECRET, o)[0] for o in range(0, 192 - 7, 1)]

    def stripe(off, soff):
        lanes = struct.unpack_from("<8Q", data, off)
        for i in range(8):
            v = lanes[i]
            k = v ^ sec[soff + 8 * i]
            acc[i ^ 1] = (acc[i ^ 1] + v) & _M64
            acc[i] = (acc[i] + (k & 0xFFFFFFFF) * (k >> 32)) & _M64

    per_block = (192 - 64) // 8
    block = 64 * per_block
    blocks = (n - 1) // block
    for b in range(blocks):
        for s in range(per_block):
            stripe(b * block + s * 64, s * 8)
        for i in range(8):
            a = acc[i]
            a ^= a >> 47
            a ^= sec[192 - 64 + 8 * i]
            acc[i] = (a * _P32_1) & _M64
    for s in range(((n - 1) - block * blocks) // 64):
        stripe(blocks * block + s * 64, s * 8)
    stripe(n - 64, 192 - 64 - 7)
    h = (n * _P64[0]) & _M64
    for i in range(4):
        p = (acc[2 * i] ^ sec[11 + 16 * i]) * (acc[2 * i + 1] ^ sec[11 + 16 * i + 8])
        h = (h + ((p & _M64) ^ (p >> 64))) & _M64
    h ^= h >> 37
    h = (h * 0x165667919E3779F9) & _M64
    return h ^ (h >> 32)


HEADER = struct.Struct("<4sHBBIIIIII")  # FORMAT.md: 32 bytes, little-endian
assert HEADER.size == 32
ENCODINGS = {0: "jpeg", 1: "raw"}


def fail(msg):
    print(f"check_format: {msg}", file=sys.stderr)
    sys.exit(1)


def main():
    if len(sys.argv) not in (3, 4):
        print(__doc__, file=sys.stderr)
        sys.exit(64)
    root, index = sys.argv[1], int(sys.argv[2])
    expected = None
    if len(sys.argv) == 4:
        with open(sys.argv[3], "rb") as f:
            expected = f.read()
    assert crc32c(b"123456789") == 0xE3069283, "CRC32C self-test"

    with open(os.path.join(root, "manifest.json"), "rb") as f:
        manifest = json.load(f)
    version = manifest.get("format_version")
    if manifest.get("format") != "stoker-lmdb" or version not in (1, 2):
        fail(f"manifest format {manifest.get('format')!r} v{version}")
    found = None
    total = 0
    for shard in manifest["shards"]:
        path = os.path.join(root, shard["file"])
        with open(path, "rb") as f:
            data = f.read()
        if len(data) != shard["bytes"]:
            fail(f"{path}: {len(data)} bytes, manifest says {shard['bytes']}")
        if version == 1 and crc32c(data) != shard["crc32c"]:
            fail(f"{path}: file CRC32C differs from the manifest")
        if version == 2 and f"{xxh3_64(data):016x}" != shard["xxh3"]:
            fail(f"{path}: file XXH3-64 differs from the manifest")
        env = lmdb.open(path, subdir=False, readonly=True, lock=False)
        try:
            with env.begin() as txn:
                # A shard's keys start at key_base when given (merged parts), else at first_index.
                base = shard.get("key_base", shard["first_index"])
                want = base
                for key, value in txn.cursor():
                    if len(key) != 8:
                        fail(f"{path}: key of {len(key)} bytes")
                    (k,) = struct.unpack(">Q", key)
                    if k != want:
                        fail(f"{path}: key {k}, expected {want}")
                    want += 1
                    if k - base + shard["first_index"] == index:
                        found = bytes(value)
                if want != base + shard["count"]:
                    fail(f"{path}: {want - base} records, manifest says {shard['count']}")
        finally:
            env.close()
        if os.path.exists(path + "-lock"):
            fail(f"{path}: opening read-only created a lock file")
        total += shard["count"]
    if total != manifest["samples"]:
        fail(f"shards hold {total} records, manifest says {manifest['samples']}")
    if found is None:
        fail(f"no record {index}")

    (magic, version, encoding, channels, height, width, label, payload_len, crc,
     header_crc) = HEADER.unpack_from(found, 0)
    if magic != b"STKR":
        fail(f"magic {magic!r}")
    if version != 1:
        fail(f"record version {version}")
    if encoding not in ENCODINGS:
        fail(f"encoding byte {encoding}")
    if crc32c(found[:28]) != header_crc:
        fail("header CRC32C mismatch")
    payload = found[32:]
    if len(payload) != payload_len:
        fail(f"payload is {len(payload)} bytes, header says {payload_len}")
    if crc32c(payload) != crc:
        fail("payload CRC32C mismatch")
    if ENCODINGS[encoding] == "raw" and height * width * channels != payload_len:
        fail("raw payload length is not height*width*channels")
    if expected is not None and payload != expected:
        fail(f"payload differs from {sys.argv[3]}")
    print(json.dumps({
        "index": index, "encoding": ENCODINGS[encoding], "channels": channels,
        "height": height, "width": width, "label": label,
        "payload_len": payload_len, "crc32c": crc,
    }))


if __name__ == "__main__":
    main()
