"""docs/FORMAT.md is enough to read a stoker dataset: a check on the spec.

The reader these tests use, `format_spec_reader.py` beside this file, was written from
docs/FORMAT.md alone (no stoker code, no `lmdb` module, no stoker package inside it; the
standard library and numpy). Here the `stoker` CLI writes datasets of every kind the
converter makes (and `stoker.Writer` written parts), and the reader must read every byte of
them the way FORMAT.md says: manifest fields and digests, the LMDB pages and their layout,
keys, record headers and CRCs, and records equal to their sources (JPEG bytes, PNG pixels, or the stoker package's
`Dataset[i]` as the oracle for resized pixels). The damage tests show the reader fails
where FORMAT.md says a reader must. (The `lmdb` module appears only in one test, to write a
shard the way older builds did; that test is skipped where the module is missing.) When one
of these tests fails after a format change, update docs/FORMAT.md and then the reader, in
that order.
"""

import json
import shutil
import struct
import subprocess
import sys
import zlib
from pathlib import Path

import numpy as np
import pytest

import format_spec_reader as spec
import stoker
from conftest import SAMPLE

CLASSES = sorted(p.name for p in SAMPLE.iterdir() if p.is_dir())
# ImageFolder order: classes sorted, each class's files sorted (FORMAT.md, "How a source is read").
SOURCES = [(f, CLASSES.index(c)) for c in CLASSES for f in sorted((SAMPLE / c).iterdir())]


@pytest.fixture(scope="module")
def convert(stoker_cli, tmp_path_factory):
    """`convert(src, *flags)`: a new dataset converted by the CLI; returns its path."""
    runs = iter(range(1_000_000))

    def run(src, *flags, out=None):
        out = out or tmp_path_factory.mktemp(f"spec-{next(runs)}") / "ds"
        subprocess.run(
            [str(stoker_cli), "convert", *map(str, flags), str(src), str(out)],
            check=True,
            capture_output=True,
        )
        return out

    return run


def write_png(path, pixels, bits=8):
    """A minimal PNG (filter 0 on every row), so the expected pixels are known exactly."""
    h, w = pixels.shape[:2]
    channels = 1 if pixels.ndim == 2 else pixels.shape[2]
    raw = pixels.astype(">u2" if bits == 16 else np.uint8).tobytes()
    row = len(raw) // h
    data = b"".join(b"\0" + raw[y * row : (y + 1) * row] for y in range(h))

    def chunk(kind, body):
        return (
            struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))
        )

    ihdr = struct.pack(">IIBBBBB", w, h, bits, {1: 0, 3: 2}[channels], 0, 0, 0)
    path.write_bytes(
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", ihdr)
        + chunk(b"IDAT", zlib.compress(data))
        + chunk(b"IEND", b"")
    )


def shuffled_positions(n, seed):
    """The listing positions in stored order under `--shuffle --seed SEED` (FORMAT.md,
    "Writing", "Shuffled order", as written there)."""
    m64 = (1 << 64) - 1

    def mix(z):
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & m64
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & m64
        return z ^ (z >> 31)

    state = 0x9E3779B97F4A7C15
    for word in (seed, 0x73746F7265000003):
        state = mix(state ^ mix((word + 0x2545F4914F6CDD1D) & m64))

    def below(bound):
        nonlocal state
        threshold = (-bound & m64) % bound
        while True:
            state = (state + 0x9E3779B97F4A7C15) & m64
            product = mix(state) * bound
            if product & m64 >= threshold:
                return product >> 64

    order = list(range(n))
    for i in range(n - 1, 0, -1):
        j = below(i + 1)
        order[i], order[j] = order[j], order[i]
    return order


def record_bytes(records):
    return [(r.label, r.encoding, r.channels, r.height, r.width, r.payload) for r in records]


def test_jpeg_records_are_the_source_files(convert):
    ds = convert(SAMPLE)
    m, records = spec.read_dataset(ds)
    assert m["format_version"] == 2 and m["encoding"] == "jpeg" and m["classes"] == CLASSES
    assert m["provenance"]["flags"]["order"] == "classes"
    assert [(r.payload, r.label) for r in records] == [(f.read_bytes(), c) for f, c in SOURCES]
    assert m["audit"]["jpeg_files"] == len(SOURCES)
    # "Source map": each record's input, relative to SRC.
    assert spec.read_sources(ds) == [bytes(f.relative_to(SAMPLE)) for f, _ in SOURCES]
    # "Determinism: the same inputs and flags give byte-identical shards and manifest."
    again = convert(SAMPLE)
    for name in ["manifest.json", "sources.bin"] + [s["file"] for s in m["shards"]]:
        assert (again / name).read_bytes() == (ds / name).read_bytes(), name


def test_file_mode_is_0644_less_the_umask(stoker_cli, tmp_path):
    out = tmp_path / "ds"
    subprocess.run(
        [str(stoker_cli), "convert", str(SAMPLE), str(out)],
        check=True,
        capture_output=True,
        umask=0o027,
    )
    # What a file created 0644 gets there under the same umask: 0640, or what a default
    # ACL of the temporary folder makes of it.
    reference = out / "reference"
    make = f"import os; os.close(os.open({str(reference)!r}, os.O_CREAT | os.O_WRONLY, 0o644))"
    subprocess.run([sys.executable, "-c", make], check=True, umask=0o027)
    want = reference.stat().st_mode & 0o777
    reference.unlink()
    assert {(p.name, p.stat().st_mode & 0o777) for p in out.iterdir()} == {
        ("manifest.json", want),
        ("shard-00000.lmdb", want),
        ("sources.bin", want),
    }
    spec.read_dataset(out)


def test_shuffled_order_is_the_documented_permutation(convert, stoker_cli, tmp_path):
    ds = convert(SAMPLE, "--shuffle", "--seed", 7)
    m, records = spec.read_dataset(ds)
    assert (
        m["provenance"]["flags"]["order"] == "shuffled"
        and m["provenance"]["flags"]["shuffle"] == "7"
    )
    expected = [SOURCES[p] for p in shuffled_positions(len(SOURCES), 7)]
    assert [(r.payload, r.label) for r in records] == [(f.read_bytes(), c) for f, c in expected]
    # Parts slice the shuffled listing.
    out = tmp_path / "parts"
    for i in range(2):
        convert(SAMPLE, "--shuffle", "--seed", 7, "--part", i, "--parts", 2, out=out)
    subprocess.run([str(stoker_cli), "merge", str(out)], check=True, capture_output=True)
    assert record_bytes(spec.read_dataset(out)[1]) == record_bytes(records)


def test_shard_cuts(convert):
    whole = record_bytes(spec.read_dataset(convert(SAMPLE))[1])
    # --shard-size: a new shard starts before a record that would take the current
    # shard's record bytes (header + payload) past S.
    size = 64 * 1024
    m, records = spec.read_dataset(convert(SAMPLE, "--shard-size", "64K"))
    assert len(m["shards"]) > 3 and record_bytes(records) == whole
    lengths = [32 + len(r.payload) for r in records]
    for a, b in zip(m["shards"], m["shards"][1:]):
        held = sum(lengths[a["first_index"] : b["first_index"]])
        assert held <= size or a["count"] == 1
        assert held + lengths[b["first_index"]] > size
    # --shards N: every shard but the last holds ceil(inputs / N) records (here each
    # holds more than 64 KiB of records).
    m, records = spec.read_dataset(convert(SAMPLE, "--shards", 4))
    assert [s["count"] for s in m["shards"]] == [4, 4, 4, 3] and record_bytes(records) == whole


def test_parts_and_merge_read_like_one_conversion(convert, stoker_cli, tmp_path):
    plain_m, plain = spec.read_dataset(convert(SAMPLE))
    out = tmp_path / "parts"
    for i in range(3):
        convert(SAMPLE, "--part", i, "--parts", 3, out=out)
        part = out / f"part-{i:05d}-of-00003"
        m, records = spec.read_dataset(part)
        assert m["part"]["index"] == i and m["part"]["inputs"] == len(SOURCES)
        assert record_bytes(records) == record_bytes(
            plain[m["part"]["first_input"] : m["part"]["end_input"]]
        )
    subprocess.run([str(stoker_cli), "merge", str(out)], check=True, capture_output=True)
    m, records = spec.read_dataset(out)
    assert "part" not in m and [s.get("key_base") for s in m["shards"]] == [None, 0, 0]
    assert spec.read_sources(out) == spec.read_sources(convert(SAMPLE))
    assert record_bytes(records) == record_bytes(plain)
    for field in ("samples", "classes", "encoding", "payload_bytes", "provenance", "audit"):
        assert m[field] == plain_m[field], field


def test_an_empty_part_and_its_merge(convert, stoker_cli, tmp_path):
    src = tmp_path / "src" / "only"
    src.mkdir(parents=True)
    for f, _ in SOURCES[:2]:
        shutil.copy(f, src)
    out = tmp_path / "parts"
    for i in range(3):
        convert(src.parent, "--part", i, "--parts", 3, out=out)
    m, records = spec.read_dataset(out / "part-00000-of-00003")
    assert m["samples"] == 0 and m["shards"] == [] and records == []
    subprocess.run([str(stoker_cli), "merge", str(out)], check=True, capture_output=True)
    m, records = spec.read_dataset(out)
    assert [r.payload for r in records] == [f.read_bytes() for f, _ in SOURCES[:2]]


def test_written_parts_and_their_merge(tmp_path):
    """Parts written by `stoker.Writer` read as FORMAT.md's "Written parts" says: `part`
    with `written: true`, `inputs` 0, and a `listing` recomputed here from the classes and
    the flags; their merge reads like one writer's dataset of all the samples."""
    samples = [(label, f.read_bytes()) for f, label in SOURCES]
    cuts = [0, 6, 6, len(samples)]  # part 1 is empty
    out = tmp_path / "parts"
    listings = set()
    for i in range(3):
        with stoker.Writer(out, classes=CLASSES, part=i, parts=3, check=False) as w:
            for label, data in samples[cuts[i] : cuts[i + 1]]:
                w.write(data, label)
        m, records = spec.read_dataset(out / f"part-{i:05d}-of-00003")
        p, flags = m["part"], m["provenance"]["flags"]
        assert p == {
            "index": i,
            "count": 3,
            "inputs": 0,
            "first_input": 0,
            "end_input": cuts[i + 1] - cuts[i],
            "listing": p["listing"],
            "written": True,
            "records": f"{spec.records_sum(records):016x}",
        }
        assert flags["order"] == "written" and "listing" not in flags
        # FORMAT.md's recipe, spelled out once more here.
        flags_json = json.dumps(
            {k: v for k, v in flags.items() if k != "order"},
            sort_keys=True,
            separators=(",", ":"),
            ensure_ascii=False,
        )
        data = b"stoker.Writer part\0" + b"".join(c.encode() + b"\0" for c in CLASSES)
        assert p["listing"] == f"{spec.crc32c(data + flags_json.encode()):08x}"
        listings.add(p["listing"])
        assert [(r.label, r.payload) for r in records] == samples[cuts[i] : cuts[i + 1]]
    assert len(listings) == 1
    stoker.merge(out)
    m, records = spec.read_dataset(out)
    assert "part" not in m and m["provenance"]["flags"]["order"] == "written"
    assert [(r.label, r.payload) for r in records] == samples
    # A part written with other classes has another listing (and is not merged with these).
    with stoker.Writer(tmp_path / "other", classes=CLASSES[::-1], part=0, parts=1) as w:
        pass
    m, _ = spec.read_dataset(tmp_path / "other" / "part-00000-of-00001")
    assert m["part"]["listing"] not in listings


def test_raw_pixels_inline_and_on_overflow_pages(convert):
    # 16x12: 608-byte values stored in the leaves, four leaves under a branch page.
    # 40x30: 3632-byte values, each on overflow pages.
    for flags in (["--size", "16x12"], ["--size", "40x30", "--resize", "stretch", "--shards", 2]):
        ds = convert(SAMPLE, "--encoding", "raw", *flags)
        m, records = spec.read_dataset(ds)
        oracle = stoker.Dataset(ds)
        assert m["encoding"] == "raw" and len(records) == len(oracle) == len(SOURCES)
        for r in records:
            payload, label = oracle[r.index]
            assert r.label == label == SOURCES[r.index][1]
            assert np.array_equal(
                spec.pixels(r), np.frombuffer(payload, np.uint8).reshape(r.height, r.width, 3)
            )


def test_page_layout_edges(convert, tmp_path):
    """The layout rules at the sizes where they matter: a new leaf started by a value on
    overflow pages (the full leaf comes first, then the run), and a three-level tree whose
    231 leaves spread over two branch pages (116 + 115) under the root."""
    write_png(tmp_path / "p.png", np.full((1, 1, 3), 7))
    for rows, size, depth in ((170, "26x26", 2), (17300, "1x1", 3)):
        listing = tmp_path / f"{rows}.csv"
        listing.write_text("".join(f"p.png,{i % 3}\n" for i in range(rows)))
        ds = convert(tmp_path, "--list", listing, "--encoding", "raw", "--size", size)
        m, records = spec.read_dataset(ds)  # checks every page against FORMAT.md's plan
        assert len(records) == rows and all(r.payload == records[0].payload for r in records)
        meta = spec.parse_meta((ds / "shard-00000.lmdb").read_bytes()[4096:8192], 1)
        assert meta.main_db[0] == depth


def test_png_pixels_and_empty_class(convert, tmp_path):
    rng = np.random.default_rng(1)
    rgb, gray16 = rng.integers(0, 256, (12, 20, 3)), rng.integers(0, 65536, (12, 20))
    src = tmp_path / "src"
    for c in ("a", "b_empty", "c"):
        (src / c).mkdir(parents=True)
    write_png(src / "a" / "rgb.png", rgb)
    write_png(src / "a" / "y16.png", gray16, bits=16)
    shutil.copy(SOURCES[0][0], src / "c" / "photo.jpg")
    # Raw at the images' own size: the pixels exactly; a 16-bit sample is (v + 128) / 257.
    m, records = spec.read_dataset(convert(src, "--encoding", "raw", "--size", "20x12"))
    assert m["classes"] == ["a", "b_empty", "c"] and [r.label for r in records] == [0, 0, 2]
    assert np.array_equal(spec.pixels(records[0]), rgb)
    assert np.array_equal(
        spec.pixels(records[1]), np.repeat(((gray16 + 128) // 257)[:, :, None], 3, axis=2)
    )
    # JPEG encoding: non-JPEG inputs are re-encoded as baseline 8-bit 4:2:0 JFIF.
    m, records = spec.read_dataset(convert(src))
    assert m["audit"]["other_images"] == 2 and records[2].payload == SOURCES[0][0].read_bytes()
    for r in records[:2]:
        frame = spec.jpeg_frame(r.payload)
        assert (frame["sof"], frame["precision"], frame["jfif"]) == (0, 8, True)
        assert [c[1:] for c in frame["components"]] == [(2, 2), (1, 1), (1, 1)]


def test_reencoded_jpegs(convert):
    # --max-side: larger images re-encoded within it; --gpu-friendly: progressive ones
    # re-encoded as baseline 4:2:0, the others kept byte for byte.
    m, records = spec.read_dataset(convert(SAMPLE, "--max-side", 64))
    for r in records:
        frame = spec.jpeg_frame(r.payload)
        assert max(r.height, r.width) <= 64 and frame["sof"] == 0 and frame["jfif"]
    m, records = spec.read_dataset(convert(SAMPLE, "--gpu-friendly"))
    assert m["audit"]["reencoded_for_gpu"] == m["audit"]["progressive"] > 0
    for r, (f, label) in zip(records, SOURCES):
        source = spec.jpeg_frame(f.read_bytes())
        frame = spec.jpeg_frame(r.payload)
        assert (r.height, r.width, r.label) == (source["height"], source["width"], label)
        if source["sof"] == 2:
            assert frame["sof"] == 0 and [c[1:] for c in frame["components"]] == [
                (2, 2),
                (1, 1),
                (1, 1),
            ]
        else:
            assert r.payload == f.read_bytes()


def test_list_file_and_flat_folder(convert, tmp_path):
    src = tmp_path / "src"
    (src / "sub").mkdir(parents=True)
    shutil.copy(SOURCES[0][0], src / "a,b.jpg")
    shutil.copy(SOURCES[1][0], src / "sub" / "x.jpg")
    listing = tmp_path / "list.csv"
    # BOM, header row, comment, blank line, a quoted path with a comma, spaces, \r\n.
    listing.write_bytes(
        b'\xef\xbb\xbfpath,label\r\n# note\r\n"a,b.jpg",4\r\n\r\n  sub/x.jpg  ,0\r\nsub/x.jpg,2\r\n'
    )
    m, records = spec.read_dataset(convert(src, "--list", listing))
    assert m["classes"] == ["0", "1", "2", "3", "4"] and m["provenance"]["flags"]["order"] == "list"
    assert [(r.payload, r.label) for r in records] == [
        (SOURCES[0][0].read_bytes(), 4),
        (SOURCES[1][0].read_bytes(), 0),
        (SOURCES[1][0].read_bytes(), 2),
    ]
    # A flat folder; a stored original keeps whatever follows its EOI.
    trailing = SOURCES[2][0].read_bytes() + b"trailing bytes"
    (src / "sub" / "t.jpg").write_bytes(trailing)
    m, records = spec.read_dataset(convert(src / "sub"))
    assert m["classes"] == ["sub"] and m["provenance"]["flags"]["order"] == "flat"
    assert [(r.payload, r.label) for r in records] == [
        (trailing, 0),
        (SOURCES[1][0].read_bytes(), 0),
    ]


def test_version_1_manifest(convert, stoker_cli, tmp_path):
    """FORMAT.md "Version 1": `crc32c` (a number, CRC-32C of the whole file) instead of
    `xxh3`. A v1 manifest made from that text is read by the reader and by stoker."""
    ds = tmp_path / "v1"
    shutil.copytree(convert(SAMPLE, "--shards", 3), ds)
    m = json.loads((ds / "manifest.json").read_text())
    m["format_version"] = 1
    for s in m["shards"]:
        del s["xxh3"]
        s["crc32c"] = spec.crc32c((ds / s["file"]).read_bytes())
    (ds / "manifest.json").write_text(json.dumps(m, indent=2) + "\n")
    assert len(spec.read_dataset(ds)[1]) == len(SOURCES) == len(stoker.Dataset(ds))
    subprocess.run([str(stoker_cli), "verify", str(ds)], check=True, capture_output=True)


def test_a_shard_written_by_lmdb_reads_the_same(convert, tmp_path):
    """FORMAT.md "Shards": shards that older builds wrote through LMDB's own writer (free
    pages reused between transactions) read the same way. The reader with `layout=False`
    reads such a file through its newer meta page and tree alone; stoker reads it too."""
    lmdb = pytest.importorskip("lmdb")
    ds = tmp_path / "ds"
    shutil.copytree(convert(SAMPLE, "--encoding", "raw", "--size", "40x30"), ds)
    m, records = spec.read_dataset(ds)
    shard = ds / m["shards"][0]["file"]
    data = shard.read_bytes()
    values = [data[r.value_offset : r.value_offset + 32 + len(r.payload)] for r in records]
    shard.unlink()
    env = lmdb.open(str(shard), subdir=False, lock=False, map_size=1 << 24)
    with env.begin(write=True) as txn:  # a first transaction whose pages are freed later
        for i in range(0, len(values), 2):
            txn.put(struct.pack(">Q", i), b"x" * 5000)
    for i, value in reversed(list(enumerate(values))):  # one transaction per record
        with env.begin(write=True) as txn:
            txn.put(struct.pack(">Q", i), value)
    env.close()
    data = shard.read_bytes()
    m["shards"][0].update(bytes=len(data), xxh3=f"{spec.xxh3_64(data):016x}")
    m["bytes"] = len(data)
    (ds / "manifest.json").write_text(json.dumps(m, indent=2) + "\n")
    assert record_bytes(spec.read_dataset(ds, layout=False)[1]) == record_bytes(records)
    with pytest.raises(spec.SpecError):
        spec.read_dataset(ds)  # not the layout stoker writes
    oracle = stoker.Dataset(ds)
    assert [oracle[r.index][0] for r in records] == [r.payload for r in records]


# ---------------------------------------------------------------------------------------
# The reader fails where FORMAT.md says a reader must.


def _edit(ds, offset_of, change, fix_digest):
    """Apply `change(bytearray, offset)` to the shard of the record `offset_of` points at."""
    m, records = spec.read_dataset(ds)
    shard, offset = offset_of(records)
    path = ds / m["shards"][shard]["file"]
    data = bytearray(path.read_bytes())
    change(data, offset)
    path.write_bytes(bytes(data))
    if fix_digest:  # as if the manifest were made with the damage: the record checks remain
        m["shards"][shard]["xxh3"] = f"{spec.xxh3_64(bytes(data)):016x}"
        (ds / "manifest.json").write_text(json.dumps(m, indent=2) + "\n")


def _flip(at):
    def change(data, offset):
        data[offset + at] ^= 0x01

    return change


def _set_label(label, fix_crc):
    def change(data, offset):
        data[offset + 16 : offset + 20] = struct.pack("<I", label)
        if fix_crc:
            data[offset + 28 : offset + 32] = struct.pack(
                "<I", spec.crc32c(bytes(data[offset : offset + 28]))
            )

    return change


def _set_payload_len(data, offset):
    plen = struct.unpack_from("<I", data, offset + 20)[0]
    data[offset + 20 : offset + 24] = struct.pack("<I", plen - 1)
    data[offset + 28 : offset + 32] = struct.pack(
        "<I", spec.crc32c(bytes(data[offset : offset + 28]))
    )


def _value(i):
    return lambda records: (records[i].shard, records[i].value_offset)


def _page_of_value(i):
    # An overflow value starts 16 bytes into its first page.
    return lambda records: (records[i].shard, records[i].value_offset - 16)


def _meta1(records):
    return 0, 4096


SHARD_DAMAGE = {
    "payload byte": (_value(3), _flip(32 + 100), False, "XXH3-64"),
    "payload byte, digest rewritten": (_value(3), _flip(32 + 100), True, "payload CRC-32C"),
    "label byte": (_value(3), _flip(16), True, "header CRC-32C"),
    "label past the classes, header CRC rewritten": (
        _value(3),
        _set_label(9, True),
        True,
        "label 9",
    ),
    "payload_len, header CRC rewritten": (_value(3), _set_payload_len, True, "header says 32 \\+"),
    "magic": (_value(3), _flip(0), True, "magic"),
    "overflow page flags": (_page_of_value(3), _flip(10), True, "overflow page"),
    "overflow page count": (_page_of_value(3), _flip(12), True, "overflow run"),
    "meta record count": (_meta1, _flip(120), True, "meta says"),
    "meta map size": (_meta1, _flip(32), True, "map size"),
    "meta magic": (_meta1, _flip(16), True, "magic"),
}


@pytest.fixture(scope="module")
def jpeg_dataset(convert):
    return convert(SAMPLE, "--shards", 3)


@pytest.mark.parametrize("damage", list(SHARD_DAMAGE))
def test_damaged_shard_fails(jpeg_dataset, tmp_path, damage):
    ds = tmp_path / "ds"
    shutil.copytree(jpeg_dataset, ds)
    offset_of, change, fix_digest, message = SHARD_DAMAGE[damage]
    _edit(ds, offset_of, change, fix_digest)
    with pytest.raises(spec.SpecError, match=message):
        spec.read_dataset(ds)


@pytest.fixture(scope="module")
def raw_dataset(convert):
    return convert(SAMPLE, "--encoding", "raw", "--size", "16x12")


@pytest.mark.parametrize(
    "damage, change, message",
    [
        ("inline payload byte", _flip(32 + 7), "payload CRC-32C"),
        ("key", _flip(-1), "has key"),  # the key's low byte, just before the value
        ("node size", _flip(-16), "not packed|value is"),  # the node header's lo size
    ],
)
def test_damaged_leaf_fails(raw_dataset, tmp_path, damage, change, message):
    ds = tmp_path / "ds"
    shutil.copytree(raw_dataset, ds)
    _edit(ds, _value(5), change, True)
    with pytest.raises(spec.SpecError, match=message):
        spec.read_dataset(ds)


MANIFEST_DAMAGE = {
    "samples": (lambda m: m.update(samples=m["samples"] + 1), "samples is"),
    "format_version": (lambda m: m.update(format_version=3), "format_version"),
    "digest missing": (lambda m: m["shards"][1].pop("xxh3"), "lacks its digest"),
    "gap": (lambda m: m["shards"][1].update(first_index=6), "starts at 6"),
    "shard bytes": (
        lambda m: [
            m["shards"][0].update(bytes=m["shards"][0]["bytes"] - 4096),
            m.update(bytes=m["bytes"] - 4096),
        ],
        "manifest says",
    ),
    "too many records": (
        lambda m: m["shards"][0].update(count=m["shards"][0]["bytes"]),
        "cannot fit",
    ),
    "payload_bytes": (lambda m: m.update(payload_bytes=m["payload_bytes"] + 1), "payload_bytes"),
    "encoding": (lambda m: m.update(encoding="raw"), "raw_size|encoding"),
}


def test_a_raw_size_past_a_records_length_is_an_invalid_manifest(raw_dataset, tmp_path):
    # FORMAT.md: at most 2^32 - 1 bytes, as the Rust reader checks at open.
    ds = tmp_path / "ds"
    shutil.copytree(raw_dataset, ds)
    m = json.loads((ds / "manifest.json").read_text())
    m["raw_size"] = {"height": 65536, "width": 65536, "channels": 1}
    (ds / "manifest.json").write_text(json.dumps(m, indent=2) + "\n")
    with pytest.raises(spec.SpecError, match=r"past 2\^32 - 1"):
        spec.read_dataset(ds)


@pytest.mark.parametrize("damage", list(MANIFEST_DAMAGE))
def test_damaged_manifest_fails(jpeg_dataset, tmp_path, damage):
    ds = tmp_path / "ds"
    shutil.copytree(jpeg_dataset, ds)
    change, message = MANIFEST_DAMAGE[damage]
    m = json.loads((ds / "manifest.json").read_text())
    change(m)
    (ds / "manifest.json").write_text(json.dumps(m, indent=2) + "\n")
    with pytest.raises(spec.SpecError, match=message):
        spec.read_dataset(ds)


def test_checksums_match_their_definitions():
    assert spec.crc32c(b"123456789") == 0xE3069283  # FORMAT.md
    # xxHash's published XXH3-64 (seed 0) values for 241..244 bytes of (i % 251).
    expected = [0x02E8CD95421C6D02, 0xDDCB33C494051832, 0x8835F9529193E3DC, 0xBC17C91EC3CF8D7F]
    for n, want in zip(range(241, 245), expected):
        assert spec.xxh3_64(bytes(i % 251 for i in range(n))) == want
