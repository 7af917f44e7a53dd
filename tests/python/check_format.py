#!/usr/bin/env python3
"""Reads a stoker dataset with the `lmdb` package, independently of the Rust code, and checks
it against docs/FORMAT.md.

Usage: check_format.py DATASET INDEX [EXPECTED_PAYLOAD_FILE]

Checks, for every shard listed in manifest.json: the file opens read-only without a lock
file, keys are 8-byte big-endian integers first_index..first_index+count in order, and the
file's size and CRC32C match the manifest. For record INDEX it checks magic, version,
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
    if manifest.get("format") != "stoker-lmdb" or manifest.get("format_version") != 1:
        fail(f"manifest format {manifest.get('format')!r} v{manifest.get('format_version')}")
    found = None
    total = 0
    for shard in manifest["shards"]:
        path = os.path.join(root, shard["file"])
        with open(path, "rb") as f:
            data = f.read()
        if len(data) != shard["bytes"]:
            fail(f"{path}: {len(data)} bytes, manifest says {shard['bytes']}")
        if crc32c(data) != shard["crc32c"]:
            fail(f"{path}: file CRC32C differs from the manifest")
        env = lmdb.open(path, subdir=False, readonly=True, lock=False)
        try:
            with env.begin() as txn:
                want = shard["first_index"]
                for key, value in txn.cursor():
                    if len(key) != 8:
                        fail(f"{path}: key of {len(key)} bytes")
                    (k,) = struct.unpack(">Q", key)
                    if k != want:
                        fail(f"{path}: key {k}, expected {want}")
                    want += 1
                    if k == index:
                        found = bytes(value)
                if want != shard["first_index"] + shard["count"]:
                    fail(f"{path}: {want - shard['first_index']} records, manifest says {shard['count']}")
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
