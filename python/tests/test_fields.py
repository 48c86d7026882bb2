"""Fields packed files (format version 3) through the binding: written here
in pure Python from docs/FORMAT.md alone (a check of the format page too),
opened with feeder.Packed, and iterated as dicts of tensors; and one written
from tar shards by feeder-pack --mode fields."""
import os
import struct

import pytest
import torch

import feeder

# CRC-32C (Castagnoli, reflected 0x82F63B78), as docs/FORMAT.md defines it.
_T = []
for _n in range(256):
    _c = _n
    for _ in range(8):
        _c = (_c >> 1) ^ 0x82F63B78 if _c & 1 else _c >> 1
    _T.append(_c)


def crc32c(data, crc=0):
    crc ^= 0xFFFFFFFF
    for b in data:
        crc = _T[(crc ^ b) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


def pad8(b):
    return b + bytes(-len(b) % 8)


def align(n, a=4096):
    return -(-n // a) * a


# name, elem (feeder_elem), batching, ndim, shape
SCHEMA = [("tokens", 2, 1, 1, (6, 0, 0, 0)),     # i32, padded, up to 6
          ("boxes", 6, 2, 2, (3, 4, 0, 0)),      # f32 [n, 4], ragged, up to 3
          ("y", 3, 0, 0, (0, 0, 0, 0))]          # i64 scalar


def sample(i):
    return ([i * 10 + j for j in range(i % 6 + 1)],
            [[i + j / 4 + k for k in range(4)] for j in range(i % 4)],
            i * 7)


def record(i):
    tok, box, y = sample(i)
    head = pad8(struct.pack("<3I", len(tok), len(box), 1))
    return (head + pad8(struct.pack(f"<{len(tok)}i", *tok))
            + pad8(struct.pack(f"<{4 * len(box)}f", *[v for r in box for v in r]))
            + pad8(struct.pack("<q", y)))


def write_pack(path, n):
    recs = [record(i) for i in range(n)]
    schema = struct.pack("<II", len(SCHEMA), 0) + b"".join(
        name.encode().ljust(32, b"\0") + struct.pack("<3I4I12x", e, b, nd, *sh)
        for name, e, b, nd, sh in SCHEMA)
    index_off = 4096
    labels_off = align(index_off + 24 * n)
    fields_off = align(labels_off + 8 * n)
    records_off = align(fields_off + len(schema))
    offs, at = [], records_off
    for r in recs:
        offs.append(at)
        at += len(r)
    hdr = bytearray(4096)
    hdr[0:8] = b"FEEDPACK"
    struct.pack_into("<IIIIIIIIII", hdr, 8, 3, 4096, 3, 1, 0, 0, 0, 0, 1, 0)
    struct.pack_into("<QQQQQQQQQ", hdr, 48, n, 0, index_off, labels_off, 0, 0, 0, records_off,
                     at - records_off)
    struct.pack_into("<IIQQQQ", hdr, 120, 0, 1, 0, n, fields_off, len(schema))
    struct.pack_into("<I", hdr, 4092, crc32c(bytes(hdr[:4092])))
    with open(path, "wb") as f:
        f.write(hdr)
        f.seek(index_off)
        f.write(b"".join(struct.pack("<QQII", o, len(r), crc32c(r), 0) for o, r in zip(offs, recs)))
        f.seek(labels_off)
        f.write(bytes(8 * n))
        f.seek(fields_off)
        f.write(schema)
        f.seek(records_off)
        f.write(b"".join(recs))
        f.truncate(align(at))


def test_crc32c_is_castagnoli():
    assert crc32c(b"123456789") == 0xE3069283


@pytest.fixture(scope="module")
def pack(tmp_path_factory):
    p = str(tmp_path_factory.mktemp("fields") / "f.pack")
    write_pack(p, 10)
    return p


def test_schema_and_info(pack):
    ds = feeder.Packed(pack)
    assert len(ds) == 10
    assert ds.fields == [("tokens", "i32", "padded", (6,)), ("boxes", "f32", "ragged", (3, 4)),
                         ("y", "i64", "fixed", ())]
    info = ds.packed_info()
    assert info["kind"] == "fields" and info["version"] == 3 and info["records"] == 10


def test_batches_are_dicts_with_every_value(pack):
    for workers in (0, 2):
        ld = feeder.Loader(feeder.Packed(pack), batch_size=4, num_workers=workers)
        seen = 0
        for b in ld:
            assert set(b) == {"tokens", "tokens_lengths", "boxes", "boxes_lengths",
                              "boxes_offsets", "y"}
            idx = list(range(seen, seen + len(b["y"])))
            toks = [sample(i)[0] for i in idx]
            longest = max(len(t) for t in toks)
            assert b["tokens"].dtype == torch.int32
            assert tuple(b["tokens"].shape) == (len(idx), longest)
            for r, t in enumerate(toks):
                assert b["tokens"][r].tolist() == t + [0] * (longest - len(t))
            assert b["tokens_lengths"].tolist() == [len(t) for t in toks]
            boxes = [r for i in idx for r in sample(i)[1]]
            assert b["boxes"].dtype == torch.float32
            assert b["boxes"].shape == (len(boxes), 4) and b["boxes"].tolist() == boxes
            offs = [0]
            for i in idx:
                offs.append(offs[-1] + len(sample(i)[1]))
            assert b["boxes_offsets"].tolist() == offs
            assert b["y"].dtype == torch.int64 and b["y"].tolist() == [i * 7 for i in idx]
            seen += len(idx)
        assert seen == 10


def test_shuffled_same_for_any_worker_count(pack):
    def run(workers):
        ld = feeder.Loader(feeder.Packed(pack), batch_size=3, num_workers=workers, shuffle=True,
                           seed=4)
        return [{k: v.tolist() for k, v in b.items()} for b in ld]
    a = run(0)
    assert a == run(2)
    assert sorted(y for b in a for y in b["y"]) == [i * 7 for i in range(10)]


def test_damaged_record_raises_naming_it(tmp_path):
    p = str(tmp_path / "bad.pack")
    write_pack(p, 6)
    with open(p, "r+b") as f:  # a token of record 0, after its 16-byte rows header
        data = bytearray(f.read())
        ro = struct.unpack_from("<Q", data, 104)[0]
        data[ro + 16] ^= 0x55
        f.seek(0)
        f.write(data)
    ld = feeder.Loader(feeder.Packed(p), batch_size=2, num_workers=0)
    with pytest.raises(feeder.FeederError, match=r"record 0 of .*bad\.pack: crc32c mismatch"):
        for _ in ld:
            pass


def test_image_datasets_have_no_fields(dataset):
    assert dataset.fields is None


def _tar_shard(path, keys):
    """A WebDataset shard: each (key, {ext: bytes}) as members in that order."""
    import io
    import tarfile
    with tarfile.open(path, "w", format=tarfile.USTAR_FORMAT) as t:
        for key, members in keys:
            for ext, data in members.items():
                ti = tarfile.TarInfo(f"{key}.{ext}")
                ti.size = len(data)
                t.addfile(ti, io.BytesIO(data))


def _key(s, k):
    return (f"s{s}/{k:03d}",
            {"jpg": bytes((s * 31 + k * 7 + j) & 0xFF for j in range(50 + 97 * k + 13 * s)),
             "cls": f"{s * 10 + k}\n".encode(),
             "json": ('{"s": %d, "k": %d%s}' % (s, k, ", \"odd\": 1" if k % 2 else "")).encode()})


def test_feeder_pack_fields_from_tar_shards(tmp_path):
    """feeder-pack --mode fields writes a shard set as a FIELDS pack: every key a
    record in shard then member order, every member extension a field."""
    import subprocess
    tool = os.path.join(os.environ.get("FEEDER_BUILD_DIR", ""), "tools", "feeder-pack")
    if not os.path.exists(tool):
        pytest.skip("no feeder-pack (tests/python_check.sh sets FEEDER_BUILD_DIR)")
    keys = [[_key(s, k) for k in range(n)] for s, n in enumerate((4, 3))]
    for s, ks in enumerate(keys):
        _tar_shard(str(tmp_path / f"S-{s}.tar"), ks)
    out = str(tmp_path / "f.pack")
    subprocess.run([tool, "--mode", "fields", "--data", str(tmp_path / "S-{0..1}.tar"),
                    "--out", out, "--quiet", "--verify"], check=True)
    want = [m for ks in keys for _, m in ks]
    ds = feeder.Packed(out)
    assert len(ds) == 7
    assert ds.fields == [("jpg", "u8", "ragged", (max(len(m["jpg"]) for m in want),)),
                         ("label", "i64", "fixed", ()),
                         ("json", "u8", "ragged", (max(len(m["json"]) for m in want),))]
    seen = 0
    for b in feeder.Loader(ds, batch_size=3, num_workers=2):
        n = len(b["label"])
        assert b["label"].tolist() == [int(m["cls"]) for m in want[seen:seen + n]]
        for f in ("jpg", "json"):
            offs = b[f + "_offsets"].tolist()
            got = bytes(b[f].numpy().tobytes())
            assert [got[offs[j]:offs[j + 1]] for j in range(n)] == \
                [m[f] for m in want[seen:seen + n]]
        seen += n
    assert seen == 7
