"""feeder.DataLoader: torch.utils.data.DataLoader's interface, run on feeder's workers.

Map-style and iterable datasets written in Python run in worker processes
that feeder's C loader forks and watches (feeder_dataset_create_batches): the
sampler's batches reach the workers through the loader's task channel, each
worker writes its collated batch straight into a shared-memory slot
(feeder/_payload.py), and the main process takes it back without a copy of
array data. The sampling, collation, seeding and error rules are torch's own,
reused where torch exposes them, so the same seed gives the same batches.
"""
import array
import itertools
import math
import multiprocessing
import multiprocessing.util
import random
import warnings

import torch
from torch._utils import ExceptionWrapper
from torch.utils.data import (BatchSampler, IterableDataset, RandomSampler, SequentialSampler,
                              default_collate, default_convert)
from torch.utils.data._utils import collate as _tcollate
from torch.utils.data._utils import worker as _tworker

from . import _feeder, _payload, _pin

__all__ = ["DataLoader", "get_worker_info", "default_collate", "default_convert"]

# A Python epoch runs as one or more of the C loader's epochs ("chunks"):
# C epoch = python epoch << CHUNK_BITS | chunk.
CHUNK_BITS = 20
# Batches a chunk holds when the sampler has no length, and rounds over the
# workers a chunk holds for an iterable dataset.
CHUNK_BATCHES = 256
ITERABLE_ROUNDS = 32
# Room of a slot; pages are backed only where a batch writes, and a larger
# batch overflows into a memfd of its own, so this is no limit.
DEFAULT_ROOM = 64 << 20
# Longest batch a batch sampler may give (unless batch_size is larger).
MAX_BATCH = 4096

_worker_info = None


def get_worker_info():
    """In a worker process of feeder.DataLoader: its WorkerInfo (id,
    num_workers, seed, dataset), the same object
    torch.utils.data.get_worker_info() returns there. None in the main
    process."""
    return _worker_info


def _stack_in_slot(batch, *, collate_fn_map=None):
    """default_collate's tensor rule, made in the slot: a stack of equal CPU
    tensors becomes a Stack the writer makes with torch.stack(out=slot);
    anything else is torch's own collate_tensor_fn (its result or its
    error)."""
    elem = batch[0]
    if type(elem) is torch.Tensor and elem.device.type == "cpu" and \
            elem.layout == torch.strided and not elem.requires_grad:
        shape, dtype = elem.shape, elem.dtype
        if all(type(t) is torch.Tensor and t.shape == shape and t.dtype == dtype and
               t.device.type == "cpu" and t.layout == torch.strided and not t.requires_grad
               for t in batch):
            return _payload.Stack(batch, (len(batch),) + tuple(shape), dtype)
    return _tcollate.collate_tensor_fn(batch, collate_fn_map=collate_fn_map)


def _as_multiprocessing_child():
    """What multiprocessing does first in a child it forks (torch's workers
    are such children), done in feeder's workers, which the C loader forks:
    the parent's multiprocessing objects are made new for this process (a
    Queue forgets the parent's feeder thread and locks, which would leave
    what the dataset puts to it unsent), and the parent's finalisers are
    forgotten."""
    util = multiprocessing.util
    registry, run = getattr(util, "_finalizer_registry", None), getattr(util, "_run_after_forkers", None)
    if registry is not None and run is not None:  # private: skipped where Python has changed them
        registry.clear()
        run()


_SLOT_COLLATE_MAP = dict(_tcollate.default_collate_fn_map)
_SLOT_COLLATE_MAP[torch.Tensor] = _stack_in_slot


def _slot_collate(batch):
    return _tcollate.collate(batch, collate_fn_map=_SLOT_COLLATE_MAP)


class _WorkerSide:
    """What a worker runs, made in the main process before the fork; its
    methods are the C loader's worker_init and batch callbacks."""

    def __init__(self, loader, base_seed):
        self.dataset = loader.dataset
        self.iterable = isinstance(loader.dataset, IterableDataset)
        self.auto_collation = loader.batch_sampler is not None
        self.batch_size = loader.batch_size
        self.drop_last = loader.drop_last
        self.num_workers = loader.num_workers
        self.worker_init_fn = loader.worker_init_fn
        self.base_seed = base_seed
        collate = loader.collate_fn
        self.collate = _slot_collate if collate is default_collate else collate
        self.getitems = getattr(loader.dataset, "__getitems__", None)
        self.worker_id = None
        self.init_error = None
        self.it = None
        self.it_key = None
        self.ended = False

    def init(self, worker_id):
        """In the worker, right after the fork: what multiprocessing's own
        start of a child does, torch's seeding rule, the worker info, then
        the user's worker_init_fn."""
        global _worker_info
        self.worker_id = worker_id
        try:
            _as_multiprocessing_child()
            torch.set_num_threads(1)
            seed = self.base_seed + worker_id
            random.seed(seed)
            torch.manual_seed(seed)
            try:
                import numpy as np
                np.random.seed(_tworker._generate_state(self.base_seed, worker_id))
            except ImportError:
                pass
            info = _tworker.WorkerInfo(id=worker_id, num_workers=self.num_workers, seed=seed,
                                       dataset=self.dataset)
            _tworker._worker_info = info
            _worker_info = info
            if self.worker_init_fn is not None:
                self.worker_init_fn(worker_id)
        except Exception:
            self.init_error = ExceptionWrapper(where=f"in DataLoader worker process {worker_id}")

    def _error(self, room, where):
        w = ExceptionWrapper(where=f"in DataLoader worker process {self.worker_id}{where}")
        try:
            return _payload.write(room, w, _payload.KIND_ERROR)
        except Exception:  # an exception class the main process cannot unpickle
            w.exc_type = RuntimeError
            return _payload.write(room, w, _payload.KIND_ERROR)

    def _iterable_batch(self, key):
        """The worker's next batch of its own stream, or _END when the stream
        has ended; a new Python epoch (key) starts the stream again."""
        if self.it_key != key:
            self.it_key = key
            self.it = iter(self.dataset)
            self.ended = False
        if self.ended:
            return _END
        data, self.ended = _stream_batch(self.it, self.batch_size, self.drop_last)
        return data if data is _END else self.collate(data)

    def fetch(self, epoch, number, worker_id, indices, room):
        if self.init_error is not None:
            return _payload.write(room, self.init_error, _payload.KIND_ERROR)
        at = ""
        try:
            if self.iterable:
                at = f" (batch {number})"
                data = self._iterable_batch(epoch >> CHUNK_BITS)
                if data is _END:
                    return _payload.write(room, None, _payload.KIND_END)
            elif not self.auto_collation:
                at = f" (index {indices[0]})"
                data = self.collate(self.dataset[indices[0]])
            elif self.getitems:
                at = f" (batch {number}, indices {indices[0]}..{indices[-1]})" if indices else ""
                data = self.collate(self.getitems(indices))
            else:
                samples = []
                for i in indices:
                    at = f" (batch {number}, index {i})"
                    samples.append(self.dataset[i])
                at = f" (batch {number}, in collate_fn)"
                data = self.collate(samples)
        except Exception:
            return self._error(room, at)
        try:
            return _payload.write(room, data)
        except Exception:
            return self._error(room, f" (batch {number}, writing it to its slot)")


_END = object()


def _stream_batch(it, batch_size, drop_last):
    """The next batch of a stream as torch's _IterableDatasetFetcher takes it:
    one item (batch_size None) or up to batch_size items. Returns (batch,
    ended); batch is _END when nothing is left, or only a short last batch
    that drop_last drops."""
    if batch_size is None:
        try:
            return next(it), False
        except StopIteration:
            return _END, True
    data, ended = [], False
    for _ in range(batch_size):
        try:
            data.append(next(it))
        except StopIteration:
            ended = True
            break
    if not data or (drop_last and len(data) < batch_size):
        return _END, ended
    return data, ended


def _check_context(ctx, num_workers):
    """feeder forks its workers itself, from a state CPython is told of
    (PyOS_BeforeFork / AfterFork): the fork start method is the one it has."""
    if ctx is None:
        return None
    if num_workers == 0:
        raise ValueError("multiprocessing_context can only be used with multi-process loading "
                         f"(num_workers > 0), but got num_workers={num_workers}")
    if isinstance(ctx, str):
        method = ctx
        if method not in multiprocessing.get_all_start_methods():
            raise ValueError("multiprocessing_context option should specify a valid start method "
                             f"in {multiprocessing.get_all_start_methods()!r}, but got "
                             f"multiprocessing_context={ctx!r}")
    elif isinstance(ctx, multiprocessing.context.BaseContext):
        method = ctx.get_start_method()
    else:
        raise TypeError("multiprocessing_context option should be a valid context object or a "
                        f"string specifying the start method, but got "
                        f"multiprocessing_context={ctx}")
    if method != "fork":
        raise ValueError(
            f"feeder.DataLoader: multiprocessing_context={method!r} is not supported: feeder's "
            "workers are forked by its C loader (which watches them and moves batches through "
            "shared memory it maps before the fork), so 'fork' is the only start method; it is "
            "safe with CUDA initialised in this process as long as the dataset does not use "
            "CUDA in the workers (as with torch's 'fork'). Use torch.utils.data.DataLoader for "
            f"{method!r}.")
    return ctx


class DataLoader:
    """torch.utils.data.DataLoader on feeder's workers: the same arguments,
    defaults and batches (torch's samplers, collation and seeding rules), with
    each worker's batch written straight into shared memory and taken back
    without pickling array data. `from feeder import DataLoader` is the
    switch.

    DataLoader(dataset, batch_size=1, shuffle=None, sampler=None,
               batch_sampler=None, num_workers=0, collate_fn=None,
               pin_memory=False, drop_last=False, timeout=0,
               worker_init_fn=None, multiprocessing_context=None,
               generator=None, *, prefetch_factor=None,
               persistent_workers=False, pin_memory_device="",
               in_order=True, batch_room=None)

    `dataset` is any map-style dataset (__getitem__, optionally __len__ and
    __getitems__) or IterableDataset; a feeder.ImageFolder with a
    feeder.transforms pipeline runs on feeder's C pipeline instead (see
    feeder.ImageFolder). What differs from torch, on purpose:

    - Workers are forked by feeder's C loader: multiprocessing_context may
      only be None or 'fork' ('spawn' and 'forkserver' raise, saying why).
    - An exception in a worker is re-raised with its type and traceback as
      torch does ("Caught ValueError in DataLoader worker process 0 (batch 3,
      index 17)"): the message also names the batch and the sample index.
    - A batch's large arrays (64 KiB and up) are views of its shared-memory
      slot; the slot returns to the loader when the last of them is freed.
      While more than half of the slots are held by kept tensors, further
      batches are copied out instead, so keeping batches never stalls the
      loader. Small arrays (labels, ids, masks) are always copies.
    - With num_workers > 0 the sampler's batches for an epoch are drawn when
      the epoch begins (iter()); a sampler without __len__ is drawn 256
      batches at a time, so an endless sampler gives an endless epoch.
      Sampler indices must be integers (0 <= i < 2**62).
    - batch_room (feeder's addition): bytes of each slot's room for a batch
      (default 64 MiB, address space only); larger batches still work.
    - pin_memory copies each tensor on one thread, without the GIL, in the
      iterating thread (torch pins on a thread of its own, with one intra-op
      thread): the process's intra-op threads would compete with the workers.
    - On a feeder.ImageFolder a batch_sampler needs an int batch_size
      attribute (the most indices one of its batches holds; torch's
      BatchSampler has one): the slots are made before its first batch.
    """

    def __init__(self, dataset, batch_size=1, shuffle=None, sampler=None, batch_sampler=None,
                 num_workers=0, collate_fn=None, pin_memory=False, drop_last=False, timeout=0,
                 worker_init_fn=None, multiprocessing_context=None, generator=None, *,
                 prefetch_factor=None, persistent_workers=False, pin_memory_device="",
                 in_order=True, batch_room=None, **native):
        self._native = None
        if isinstance(dataset, _feeder.Dataset):
            self._native = _Native(dataset, sampler=sampler, batch_sampler=batch_sampler,
                                   collate_fn=collate_fn, worker_init_fn=worker_init_fn,
                                   batch_room=batch_room, **native)
        elif native:
            raise TypeError(f"DataLoader: {', '.join(sorted(native))}: feeder's own arguments "
                            "for its native datasets (feeder.ImageFolder, ...); this dataset is "
                            f"a Python one ({type(dataset).__name__})")
        if not isinstance(num_workers, int) or isinstance(num_workers, bool) or num_workers < 0:
            raise ValueError("num_workers option should be non-negative; use num_workers=0 to "
                             "disable multiprocessing.")
        if not isinstance(timeout, (int, float)) or math.isnan(timeout) or timeout < 0:
            raise ValueError("timeout option should be non-negative")
        if num_workers == 0 and prefetch_factor is not None:
            raise ValueError("prefetch_factor option could only be specified in multiprocessing."
                             "let num_workers > 0 to enable multiprocessing, otherwise set "
                             "prefetch_factor to None.")
        if num_workers > 0 and prefetch_factor is None:
            prefetch_factor = 2
        if prefetch_factor is not None and (not isinstance(prefetch_factor, int) or
                                            prefetch_factor < 1):
            raise ValueError(f"prefetch_factor option should be a positive int, got "
                             f"{prefetch_factor!r}")
        if persistent_workers and num_workers == 0:
            raise ValueError("persistent_workers option needs num_workers > 0")
        if batch_room is not None and (not isinstance(batch_room, int) or batch_room < 4096):
            raise ValueError(f"batch_room should be an int of at least 4096 bytes, got "
                             f"{batch_room!r}")
        self._ready = False
        self.dataset = dataset
        self.num_workers = num_workers
        self.prefetch_factor = prefetch_factor
        self.pin_memory = pin_memory
        self.pin_memory_device = pin_memory_device
        self.timeout = timeout
        self.worker_init_fn = worker_init_fn
        self.multiprocessing_context = _check_context(multiprocessing_context, num_workers)
        self.in_order = in_order
        self.batch_room = batch_room or DEFAULT_ROOM
        if isinstance(dataset, IterableDataset):
            if shuffle not in {False, None}:
                raise ValueError("DataLoader with IterableDataset: expected unspecified shuffle "
                                 f"option, but got shuffle={shuffle}")
            if sampler is not None:
                raise ValueError("DataLoader with IterableDataset: expected unspecified sampler "
                                 f"option, but got sampler={sampler}")
            if batch_sampler is not None:
                raise ValueError("DataLoader with IterableDataset: expected unspecified "
                                 f"batch_sampler option, but got batch_sampler={batch_sampler}")
        else:
            shuffle = bool(shuffle)
        self.sampler_shuffle = shuffle
        if sampler is not None and shuffle:
            raise ValueError("sampler option is mutually exclusive with shuffle")
        if batch_sampler is not None:
            if batch_size != 1 or shuffle or sampler is not None or drop_last:
                raise ValueError("batch_sampler option is mutually exclusive with batch_size, "
                                 "shuffle, sampler, and drop_last")
            batch_size = None
            drop_last = False
        elif batch_size is None and drop_last:
            raise ValueError("batch_size=None option disables auto-batching and is mutually "
                             "exclusive with drop_last")
        if sampler is None and not isinstance(dataset, IterableDataset):
            sampler = (RandomSampler(dataset, generator=generator) if shuffle
                       else SequentialSampler(dataset))
        if batch_size is not None and batch_sampler is None and \
                not isinstance(dataset, IterableDataset):
            batch_sampler = BatchSampler(sampler, batch_size, drop_last)
        self.batch_size = batch_size
        self.drop_last = drop_last
        self.sampler = sampler
        self.batch_sampler = batch_sampler
        if isinstance(dataset, IterableDataset) and batch_size is not None:
            self.batch_sampler = _IterableBatches(batch_size)
        self.generator = generator
        if collate_fn is None:
            collate_fn = default_collate if self.batch_sampler is not None else default_convert
        self.collate_fn = collate_fn
        self.persistent_workers = persistent_workers
        self._engine = None  # persistent workers: the BatchLoader kept between epochs
        self._base_seed = None
        self._epoch = 0
        self._iterator = None
        self._ready = True

    def __setattr__(self, attr, val):
        if getattr(self, "_ready", False) and attr in (
                "batch_size", "batch_sampler", "sampler", "drop_last", "dataset",
                "persistent_workers"):
            raise ValueError(f"{attr} attribute should not be set after "
                             f"{self.__class__.__name__} is initialized")
        super().__setattr__(attr, val)

    @property
    def _auto_collation(self):
        return self.batch_sampler is not None

    def __len__(self):
        if self._native is not None:
            if self._native.batch_sampler is not None:
                return len(self._native.batch_sampler)
            n = len(self.dataset if self._native.sampler is None else self._native.sampler)
            return n // self.batch_size if self.drop_last else math.ceil(n / self.batch_size)
        if isinstance(self.dataset, IterableDataset):
            length = len(self.dataset)
            if self.batch_size is not None:
                length = length // self.batch_size if self.drop_last else \
                    math.ceil(length / self.batch_size)
            return length
        return len(self.batch_sampler if self.batch_sampler is not None else self.sampler)

    def _pin(self):
        if self.pin_memory_device:
            return self.pin_memory
        return self.pin_memory and torch.cuda.is_available()

    def __iter__(self):
        if self._native is not None:
            return self._native.epoch(self)
        # torch's order of draws from the generator: the workers' base seed
        # when an iterator is made, then the sampler's.
        if self.num_workers == 0:
            torch.empty((), dtype=torch.int64).random_(generator=self.generator)
            return _SingleProcessIter(self)
        if self._iterator is not None:
            self._iterator._abandon()
        if self.persistent_workers and self._engine is not None:
            engine = self._engine
        else:
            self._base_seed = torch.empty((), dtype=torch.int64).random_(
                generator=self.generator).item()
            engine = self._make_engine()
            if self.persistent_workers:
                self._engine = engine
        it = _MultiProcessIter(self, engine, self._epoch, own=not self.persistent_workers)
        self._epoch += 1
        self._iterator = it
        return it

    def _make_engine(self):
        side = _WorkerSide(self, self._base_seed)
        # The slots' index room (8 bytes an index): a batch sampler's batches
        # may be longer than batch_size.
        self._max_batch = max(MAX_BATCH, self.batch_size or 1)
        return _feeder.BatchLoader(side.fetch, side.init, 1 << 62, self.num_workers,
                                   self.prefetch_factor, True, bool(self.in_order),
                                   float(self.timeout), self.batch_room, self._max_batch,
                                   self._base_seed & ((1 << 53) - 1))

    def __del__(self):
        engine = getattr(self, "_engine", None)
        if engine is not None:
            engine.close()


_NATIVE_KW = ("device", "decoder", "io", "on_error", "max_restarts", "trace", "channels",
              "gpu_prefetch")


class _Native:
    """A feeder dataset (feeder.ImageFolder with a feeder.transforms pipeline,
    a RAW Packed file, ...) through DataLoader: feeder.Loader, its C pipeline
    end to end, with the DataLoader's arguments."""

    def __init__(self, dataset, sampler, batch_sampler, collate_fn, worker_init_fn, batch_room,
                 **native):
        for name, value in (("collate_fn", collate_fn), ("worker_init_fn", worker_init_fn),
                            ("batch_room", batch_room)):
            if value is not None:
                raise ValueError(
                    f"DataLoader: {name}= with {type(dataset).__name__}: feeder's native "
                    "pipeline takes sampler, batch_sampler, shuffle, generator, drop_last and "
                    f"the worker options; for {name}= use a Python dataset (e.g. "
                    "torchvision.datasets.ImageFolder)")
        room = getattr(batch_sampler, "batch_size", None)
        if batch_sampler is not None and (not isinstance(room, int) or isinstance(room, bool)
                                          or room < 1):
            raise ValueError(
                f"DataLoader: batch_sampler= with {type(dataset).__name__}: feeder's slots are "
                "made before the first batch is drawn, so the batch sampler needs an int "
                "batch_size attribute, the most indices one of its batches holds (torch's "
                f"BatchSampler has one); got batch_size={room!r}")
        self.sampler = sampler
        self.batch_sampler = batch_sampler
        bad = sorted(set(native) - set(_NATIVE_KW))
        if bad:
            raise TypeError(f"DataLoader got an unexpected keyword argument {bad[0]!r}")
        if getattr(dataset, "target_transform", None) is not None:
            raise ValueError("DataLoader: target_transform has no native equivalent; map the "
                             "labels in the training loop")
        self.native = native
        self.loader = None
        transform = getattr(dataset, "transform", None)
        if transform is not None:
            from . import transforms
            self.plan = transforms.compile(transform)
        else:
            self.plan = None

    def _make(self, dl):
        kw = dict(batch_size=dl.batch_size, shuffle=bool(dl.sampler_shuffle),
                  num_workers=dl.num_workers, persistent_workers=dl.persistent_workers,
                  drop_last=dl.drop_last, layout="NCHW",
                  # inf waits forever, as with a Python dataset: Loader's 0.
                  timeout=0.0 if math.isinf(dl.timeout) else float(dl.timeout),
                  in_order=bool(dl.in_order))
        if dl.prefetch_factor is not None:
            kw["prefetch_factor"] = dl.prefetch_factor
        if self.sampler is not None:  # drawn once an epoch, as torch's iterator does
            kw["sampler"] = self.sampler
        if self.batch_sampler is not None:  # the same; its batch_size sizes the slots
            for k in ("batch_size", "shuffle", "drop_last"):
                del kw[k]
            kw["batch_sampler"] = self.batch_sampler
        # Reproducible per generator: the order and every random crop come from this seed.
        kw["seed"] = torch.empty((), dtype=torch.int64).random_(
            generator=dl.generator).item() & ((1 << 53) - 1)
        plan = self.plan
        if plan is not None:
            kw.update(plan.kw)
        kw.update(self.native)
        self.host_float = None
        if plan is not None and plan.dtype is not None:
            if kw.get("device") is not None:
                kw["dtype"] = str(plan.dtype)[6:]
                kw["mean"] = plan.mean or [0.0, 0.0, 0.0]
                kw["std"] = plan.std or [1.0, 1.0, 1.0]
            else:
                self.host_float = plan
        self.loader = _feeder_module().Loader(dl.dataset, **kw)

    def epoch(self, dl):
        if self.loader is None:
            self._make(dl)
        return self._iter(dl, iter(self.loader))

    def _iter(self, dl, it):
        pin = dl._pin()
        table = None if self.host_float is None else _float_table(self.host_float)
        on_device = self.native.get("device") is not None
        for images, labels in it:
            # Device batches live in a ring of gpu_prefetch buffers, host ones in the slots.
            room = self.native.get("gpu_prefetch", 2) if on_device else self.loader.slots
            host_pin = pin and images.device.type == "cpu"
            if table is not None:
                # New memory, so the slot goes back at once; pinned here when asked for
                # (but for another pin_memory_device, left to torch below).
                here = host_pin and not dl.pin_memory_device
                images = _host_float(images, table, here)
                labels = _pin.pin(labels) if here else _pin.clone(labels)
                host_pin = host_pin and not here
            elif self.loader.outstanding > max(1, room // 2) and not host_pin:
                # More than half the slots (or device buffers) held by kept batches:
                # copy this one out so its own goes back (as the Python datasets' path does;
                # pinning copies it anyway).
                images, labels = _pin.clone(images), _pin.clone(labels)
            batch = [images, labels]
            images = labels = None  # the pinned copy alone holds no slot while we wait
            if host_pin:
                batch = _pin.pin(batch, dl.pin_memory_device or None)
            yield batch


_KIND = {torch.float32: 0, torch.float16: 1, torch.bfloat16: 2}  # convert.c's empty()
# Threads of one host float conversion (convert.c's lookup).
LOOKUP_THREADS = 4


def _float_table(plan):
    """ToDtype (and Normalize) of each uint8 value, a row per channel: the
    ops torch would run on the batch, run once on the 256 values."""
    t = torch.arange(256).to(plan.dtype).div_(255).view(1, 256)
    if plan.mean is not None:
        mean = torch.tensor(plan.mean).view(-1, 1).to(plan.dtype)
        std = torch.tensor(plan.std).view(-1, 1).to(plan.dtype)
        t = t.sub(mean).div_(std)
    return t.contiguous()


def _host_float(images, table, pin):
    """A uint8 NCHW batch as ToDtype / Normalize make it, through `table` on
    LOOKUP_THREADS threads without the GIL (python/src/convert.c says why)."""
    n, c = images.shape[0], images.shape[1]
    if table.shape[0] not in (1, c):
        raise ValueError(f"feeder.transforms.Normalize: {table.shape[0]} means and stds for "
                         f"batches of {c} channels")
    if pin:
        out = torch.empty(images.shape, dtype=table.dtype, pin_memory=True)
    else:
        out = torch.utils.dlpack.from_dlpack(_feeder.empty(*images.shape, _KIND[table.dtype]))
    images = images.contiguous()
    _feeder.lookup(images.data_ptr(), out.data_ptr(), n, c, images[0, 0].numel(),
                   table.data_ptr(), table.shape[0], table.element_size(), LOOKUP_THREADS)
    return out


def _feeder_module():
    import feeder
    return feeder


class _IterableBatches:
    """An IterableDataset's batches: batch_size items from a worker's own
    stream (torch's _InfiniteConstantSampler batched)."""

    def __init__(self, batch_size):
        self.batch_size = batch_size


class _SingleProcessIter:
    """num_workers=0: the batches in this process, as torch makes them."""

    def __init__(self, loader):
        self.loader = loader
        self.dataset = loader.dataset
        self.collate = loader.collate_fn
        self.pin = loader._pin()
        self.auto = loader._auto_collation
        if isinstance(self.dataset, IterableDataset):
            self.it = iter(self.dataset)
            self.ended = False
            self.batches = None
        else:
            self.batches = iter(loader.batch_sampler if self.auto else loader.sampler)
        self.getitems = getattr(self.dataset, "__getitems__", None)

    def __iter__(self):
        return self

    def __len__(self):
        return len(self.loader)

    def _next_iterable(self):
        if self.ended:
            raise StopIteration
        data, self.ended = _stream_batch(self.it, self.loader.batch_size, self.loader.drop_last)
        if data is _END:
            raise StopIteration
        return self.collate(data)

    def __next__(self):
        if self.batches is None:
            data = self._next_iterable()
        else:
            index = next(self.batches)
            if not self.auto:
                data = self.collate(self.dataset[index])
            elif self.getitems:
                data = self.collate(self.getitems(index))
            else:
                data = self.collate([self.dataset[i] for i in index])
        if self.pin:
            data = _pin.pin(data, self.loader.pin_memory_device or None)
        return data


def _indices(batch):
    """A sampler's batch as C indices: non-negative ints only."""
    try:
        return [i.__index__() for i in batch]
    except (AttributeError, TypeError):
        raise TypeError(f"feeder.DataLoader: the sampler yielded {batch!r}; feeder's workers take "
                        "integer indices (use torch.utils.data.DataLoader for other keys)") \
            from None


class _MultiProcessIter:
    """num_workers > 0: one Python epoch on feeder's workers."""

    def __init__(self, loader, engine, epoch, own):
        self.loader = loader
        self.engine = engine
        self.own = own  # close the engine (stop the workers) when done
        self.epoch = epoch
        self.pin = loader._pin()
        self.nworkers = loader.num_workers
        self.iterable = isinstance(loader.dataset, IterableDataset)
        self.chunk = -1
        self.sent = 0
        self.done = False
        self.workers = None   # the running chunk's worker per batch
        self.active = list(range(self.nworkers))
        self.batches = None
        if not self.iterable:
            source = loader.batch_sampler if loader._auto_collation else loader.sampler
            try:  # a BatchSampler has __len__ even over a sampler without one
                len(source)
                self.sized = True
            except TypeError:
                self.sized = False
            self.batches = iter(source)
        self._next_chunk()

    def __iter__(self):
        return self

    def __len__(self):
        return len(self.loader)

    def _push(self, lengths, workers, indices):
        self.chunk += 1
        if self.chunk >= 1 << CHUNK_BITS:
            raise RuntimeError("feeder.DataLoader: more than 2**20 chunks in one epoch")
        self.workers = workers
        self.engine.set_epoch_batches((self.epoch << CHUNK_BITS) | self.chunk, indices,
                                      array.array("I", lengths), array.array("i", workers))

    def _next_chunk(self):
        """Give the loader the epoch's next batches; False when there are none."""
        if self.iterable:
            if not self.active:
                return False
            workers = self.active * ITERABLE_ROUNDS
            self._push([0] * len(workers), workers, array.array("Q"))
            return True
        if self.sized and self.chunk >= 0:
            return False
        take = self.batches if self.sized else itertools.islice(self.batches, CHUNK_BATCHES)
        if self.loader._auto_collation:
            batches = [_indices(b) for b in take]
        else:
            batches = [_indices([i]) for i in take]
        if not batches:
            return False
        maxlen = max(len(b) for b in batches)
        if maxlen > self.loader._max_batch:
            raise ValueError(f"feeder.DataLoader: the batch sampler yielded a batch of {maxlen} "
                             f"indices; this loader's slots hold at most "
                             f"{self.loader._max_batch}")
        # torch's rule: batch k of the epoch goes to worker k mod num_workers.
        workers = [(self.sent + k) % self.nworkers for k in range(len(batches))]
        self.sent += len(batches)
        flat = array.array("Q", itertools.chain.from_iterable(batches))
        self._push([len(b) for b in batches], workers, flat)
        if not self.sized and len(batches) < CHUNK_BATCHES:
            self.sized = True  # the sampler ran out: this chunk is the last
        return True

    def __next__(self):
        while True:
            if self.done:
                raise StopIteration
            r = self.engine.next_batch()
            if r is None:
                if not self._next_chunk():
                    self._finish()
                    raise StopIteration
                continue
            _, number, _, payload, extra = r
            copy_all = self.engine.outstanding > max(1, self.engine.slots // 2)
            kind, data = _payload.read(payload, extra, copy_all)
            del payload, extra, r
            if kind == _payload.KIND_END:
                w = self.workers[number]
                if w in self.active:
                    self.active.remove(w)
                continue
            if kind == _payload.KIND_ERROR:
                data.reraise()
            if self.pin:
                data = _pin.pin(data, self.loader.pin_memory_device or None)
            return data

    def _finish(self):
        self.done = True
        if self.own:
            self.engine.close()

    def _abandon(self):
        if not self.done:
            self._finish()

    def __del__(self):
        if getattr(self, "own", False) and not getattr(self, "done", True):
            self.engine.close()
