"""How a worker's batch travels through its shared-memory slot.

A worker writes one batch (whatever collate_fn returned: tensors, numpy
arrays, numbers, strings, dicts, tuples, custom objects, nested) into the
slot's room as

    [ header, 64 bytes | leaf table, 16 bytes a leaf | pickle | arrays... ]

The pickle is the batch with every array leaf (a CPU tensor, a numpy array,
or a stack default_collate has not made yet) replaced by a reference to its
entry in the leaf table; the leaves' bytes are written once, straight into
the room (a default_collate stack is made there by torch.stack(out=...)), and
never pickled. What does not fit in the room goes to an extra memfd the
loader passes back to the main process with the batch, so a batch has no size
limit. The main process rebuilds the batch with each large leaf a view of the
slot (the slot returns to the loader when the last view dies) and each small
one copied out (a kept label never holds a slot).
"""
import io
import os
import pickle
import struct

import numpy as np
import torch

from . import _pin

MAGIC = b"FDRB"
VERSION = 1
KIND_DATA, KIND_ERROR, KIND_END = 0, 1, 2
HEADER = struct.Struct("<4sHHIQQQQQ")  # magic, version, kind, nleaves, table_off, pickle_off,
#                                        pickle_len, where (0 room / 1 extra), extra_used
assert HEADER.size <= 64
ALIGN = 64
IN_EXTRA = 1 << 63

# Leaves below this many bytes are copied out in the main process, so keeping
# them (labels, ids, masks) never holds a batch slot.
SMALL_LEAF = 64 * 1024


def _align(n):
    return (n + ALIGN - 1) // ALIGN * ALIGN


class Stack:
    """A stack default_collate has not made yet: torch.stack(items) of equal
    shape and dtype, made by the writer straight into the slot."""

    __slots__ = ("items", "shape", "dtype")

    def __init__(self, items, shape, dtype):
        self.items = items
        self.shape = shape
        self.dtype = dtype

    def materialize(self):
        return torch.stack(self.items, 0)


_NP_TORCH = {np.dtype(k): v for k, v in [
    ("bool", torch.bool), ("uint8", torch.uint8), ("int8", torch.int8), ("int16", torch.int16),
    ("int32", torch.int32), ("int64", torch.int64), ("float16", torch.float16),
    ("float32", torch.float32), ("float64", torch.float64), ("complex64", torch.complex64),
    ("complex128", torch.complex128)]}


def _leaf_of(obj):
    """(kind, dtype name, shape, nbytes, source) for an array leaf, or None."""
    if isinstance(obj, Stack):
        return ("t", str(obj.dtype)[6:], tuple(obj.shape),
                int(np.prod(obj.shape, dtype=np.int64)) * obj.items[0].element_size(), obj)
    if type(obj) is torch.Tensor and obj.device.type == "cpu" and obj.layout == torch.strided \
            and not obj.is_quantized and not obj.requires_grad and not obj.is_conj() \
            and not obj.is_neg():
        return ("t", str(obj.dtype)[6:], tuple(obj.shape), obj.numel() * obj.element_size(), obj)
    if type(obj) is np.ndarray and obj.dtype in _NP_TORCH and obj.dtype.isnative:
        return ("n", obj.dtype.str, obj.shape, obj.nbytes, obj)
    return None


class _Pickler(pickle.Pickler):
    def __init__(self, f, leaves):
        super().__init__(f, protocol=pickle.HIGHEST_PROTOCOL)
        self.leaves = leaves

    def persistent_id(self, obj):
        leaf = _leaf_of(obj)
        if leaf is None:
            return None
        self.leaves.append(leaf)
        return (len(self.leaves) - 1, leaf[0], leaf[1], leaf[2])


def _view(buf, off, nbytes):
    """A writable uint8 tensor over buf[off:off + nbytes]."""
    return torch.frombuffer(buf, dtype=torch.uint8, count=nbytes, offset=off)


def _write_leaf(dst, leaf):
    kind, _, shape, nbytes, src = leaf
    if nbytes == 0:
        return
    if isinstance(src, Stack):
        out = dst.view(src.dtype).view(shape)
        torch.stack(src.items, 0, out=out)
    elif kind == "t":
        dst.view(src.dtype).view(shape).copy_(src)
    else:
        dst.view(_NP_TORCH[src.dtype]).view(shape).copy_(torch.from_numpy(np.ascontiguousarray(src)))


class Extra:
    """The worker's memfd for what does not fit in the room; made once its
    size is known."""

    def __init__(self, size):
        self.size = size
        self.fd = os.memfd_create("feeder-batch", os.MFD_CLOEXEC)
        try:
            os.ftruncate(self.fd, size)
            import mmap
            self.map = mmap.mmap(self.fd, size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
        except BaseException:
            os.close(self.fd)
            raise

    def close_map(self):
        self.map.close()


def write(room, obj, kind=KIND_DATA):
    """Write `obj` into `room` (a writable memoryview of the slot). Returns
    (used, extra_fd, extra_bytes); the loader takes extra_fd."""
    leaves = []
    f = io.BytesIO()
    _Pickler(f, leaves).dump(obj)
    blob = f.getbuffer()
    cap = len(room)
    table_off = HEADER.size
    pickle_off = table_off + 16 * len(leaves)
    meta_end = pickle_off + len(blob)
    # Place the metadata, then every leaf: the room while it has space, then the extra.
    meta_in_extra = meta_end > cap
    room_at = HEADER.size if meta_in_extra else _align(meta_end)
    extra_at = _align(meta_end) if meta_in_extra else 0
    places = []
    for leaf in leaves:
        n = leaf[3]
        if room_at + n <= cap:
            places.append(room_at)
            room_at = _align(room_at + n)
        else:
            places.append(IN_EXTRA | extra_at)
            extra_at = _align(extra_at + n)
    extra = Extra(extra_at) if extra_at else None
    try:
        meta = extra.map if meta_in_extra else room
        table = struct.pack(f"<{2 * len(leaves)}Q", *[v for p, lf in zip(places, leaves)
                                                      for v in (p, lf[3])])
        meta[table_off:pickle_off] = table
        meta[pickle_off:meta_end] = blob
        for p, leaf in zip(places, leaves):
            buf = extra.map if p & IN_EXTRA else room
            off = p & ~IN_EXTRA
            if leaf[3]:
                _write_leaf(_view(buf, off, leaf[3]), leaf)
        room[0:HEADER.size] = HEADER.pack(MAGIC, VERSION, kind, len(leaves), table_off, pickle_off,
                                          len(blob), int(meta_in_extra), extra_at)
        used = min(room_at, cap)
        if extra:
            extra.close_map()
            return used, extra.fd, extra.size
        return used, -1, 0
    except BaseException:
        if extra:
            extra.close_map()
            os.close(extra.fd)
        raise


_ITEMSIZE = {}


def _itemsize(dt):
    n = _ITEMSIZE.get(dt)
    if n is None:
        n = _ITEMSIZE[dt] = torch.empty((), dtype=dt).element_size()
    return n


class _Unpickler(pickle.Unpickler):
    def __init__(self, f, make):
        super().__init__(f)
        self.make = make

    def persistent_load(self, pid):
        return self.make(*pid)


def read(payload, extra, copy_all=False):
    """(kind, obj) of a batch lent as `payload` (and `extra`, or None):
    large leaves are views of them, small ones (and all, with copy_all)
    copies."""
    room = memoryview(payload)
    magic, version, kind, nleaves, table_off, pickle_off, plen, meta_in_extra, _ = \
        HEADER.unpack_from(room, 0)
    if magic != MAGIC or version != VERSION:
        raise RuntimeError(f"feeder: a batch slot holds no batch of this version "
                           f"(magic {magic!r}, version {version})")
    meta = memoryview(extra) if meta_in_extra else room
    table = struct.unpack_from(f"<{2 * nleaves}Q", meta, table_off)

    def make(k, leaf_kind, dtype, shape):
        place, nbytes = table[2 * k], table[2 * k + 1]
        buf = extra if place & IN_EXTRA else payload
        off = place & ~IN_EXTRA
        if leaf_kind == "t":
            dt = getattr(torch, dtype)
            if nbytes == 0:
                return torch.empty(shape, dtype=dt)
            t = torch.frombuffer(buf, dtype=dt, count=nbytes // _itemsize(dt),
                                 offset=off).view(shape)
            return _pin.clone(t) if copy_all or nbytes < SMALL_LEAF else t
        if nbytes == 0:
            return np.empty(shape, dtype=np.dtype(dtype))
        a = np.frombuffer(buf, dtype=np.dtype(dtype), count=nbytes // np.dtype(dtype).itemsize,
                          offset=off).reshape(shape)
        return a.copy() if copy_all or nbytes < SMALL_LEAF else a

    obj = _Unpickler(io.BytesIO(meta[pickle_off:pickle_off + plen]), make).load()
    return kind, obj
