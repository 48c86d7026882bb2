"""feeder: a C data loader for PyTorch training loops.

    import feeder
    ds = feeder.ImageFolder("/data/imagenet/train")
    loader = feeder.Loader(ds, batch_size=256, shuffle=True, num_workers=8,
                           pipeline="train", size=224)
    for epoch in range(90):
        loader.set_epoch(epoch)
        for images, labels in loader:      # uint8 N x 3 x 224 x 224, int64 N
            ...

Worker processes read, decode and crop straight into shared-memory batch
slots; each batch reaches Python as a view of its slot (DLPack), not a copy.
A slot goes back to the loader when the last tensor viewing it is freed, so
keeping a tensor keeps its data valid; keeping more batches alive than the
loader has slots (num_workers x prefetch_factor) raises BusyError.
"""
import os

from . import _feeder
from ._feeder import (  # noqa: F401
    Array,
    BusyError,
    DatasetError,
    FeederError,
    LoaderTimeoutError,
    OptionError,
    SampleError,
    StateError,
    WorkerError,
    cuda,
    library_version,
    strerror,
)

_LAZY = ("DataLoader", "get_worker_info", "default_collate", "default_convert")


def __getattr__(name):
    # feeder.DataLoader needs torch; `import feeder` alone does not.
    if name in _LAZY:
        from . import _dataloader
        return getattr(_dataloader, name)
    raise AttributeError(f"module 'feeder' has no attribute {name!r}")

__version__ = "0.1.0"

__all__ = [
    "ImageFolder", "FileList", "Packed", "TarShards", "Loader", "Array", "FeederError", "SampleError",
    "WorkerError", "LoaderTimeoutError", "BusyError", "OptionError", "StateError",
    "DatasetError", "library_version", "cuda", "DataLoader", "get_worker_info",
    "default_collate", "default_convert",
]


class ImageFolder(_feeder.Dataset):
    """A folder with one sub-folder per class, as torchvision's ImageFolder:
    labels are the positions of the sorted class names; every .jpg, .jpeg,
    .jfif, .png and .webp file below a class folder is a sample (the format
    is read from the bytes), ordered by class, then path.

    ImageFolder(root, transform=None, target_transform=None)

    `transform` is a feeder.transforms pipeline (torchvision.transforms.v2's
    names and parameters), which feeder.DataLoader runs in feeder's C
    pipeline; torchvision's `classes`, `class_to_idx`, `samples`, `targets`
    and `imgs` are here, and ds[i] gives one sample (image, target) decoded
    with Pillow through the transform's torchvision equivalent, for
    inspection (the loader's bytes come from feeder's decoder and resize:
    close, not equal)."""

    def __init__(self, root, transform=None, target_transform=None):
        super().__init__(0, root)
        self.root = os.fspath(root)
        self.transform = transform
        self.target_transform = target_transform
        self._samples = None

    @property
    def class_to_idx(self):
        return {c: i for i, c in enumerate(self.classes)}

    @property
    def samples(self):
        if self._samples is None:
            self._samples = [(self.path(i), self.label(i)) for i in range(len(self))]
        return self._samples

    imgs = samples

    @property
    def targets(self):
        return [s[1] for s in self.samples]

    def __getitem__(self, index):
        from PIL import Image
        path, target = self.samples[index]
        with open(path, "rb") as f:
            img = Image.open(f).convert("RGB")
        if self.transform is not None:
            img = self.transform(img)
        if self.target_transform is not None:
            target = self.target_transform(target)
        return img, target


class FileList(_feeder.Dataset):
    """A list file of "relative/path label" lines, paths relative to `root`
    (default: the list file's folder). Paths leaving the root are refused
    unless allow_escape=True."""

    def __init__(self, path, root=None, allow_escape=False):
        super().__init__(1, path, root, allow_escape)


class Packed(_feeder.Dataset):
    """A packed file made by feeder-pack (RAW tensors, which a Loader delivers
    in the pack's own shape and layout unless size or layout is given, or
    JPEG records), or a fields packed file (feeder_pack_fields): then
    `fields` lists its schema and a Loader over it yields dicts, a tensor per
    field plus NAME_lengths (padded, ragged) and NAME_offsets (ragged)."""

    def __init__(self, path):
        super().__init__(2, path)


class TarShards(_feeder.Dataset):
    """WebDataset tar shards, read in place: one .tar or a brace range of
    them ("shards/train-{000000..000127}.tar"). A sample is a key's .jpg
    (else .jpeg, .png, .webp) member with its .cls label; samples in shard
    order, then member order. Each shard's index is cached beside it as
    <shard>.idx."""

    def __init__(self, pattern):
        super().__init__(3, pattern)


class Loader(_feeder.Loader):
    """Batches of a dataset, with torch.utils.data.DataLoader's names.

    Loader(dataset, batch_size=64, shuffle=False, num_workers=0,
           prefetch_factor=2, persistent_workers=False, drop_last=False,
           timeout=0, seed=None, pipeline="eval", size=224, resize=None,
           device=None, dtype=None, mean=None, std=None, layout="NCHW",
           decoder="roi", in_order=True, on_error="fail", io="auto",
           max_restarts=0, scale=None, ratio=None, flip_prob=None,
           as_torch=None, trace=None, channels=3, augment=None, sampler=None,
           max_pixels=178956970, max_decode_bytes=268435456, max_side=65535,
           batch_sampler=None, gpu_prefetch=2, row_index_bytes=268435456)

    seed: the seed of the order and of every random crop; None (the
    default) draws one from the system, as torch does, so two runs differ
    unless the program fixes it (state_dict() records the one drawn).
    on_error: "fail" (a bad sample fails its batch), "skip" (replaced by
    the next good sample of its class) or "drop" (left out: a shorter
    batch). augment: feeder's augment pipeline as a list of steps, e.g.
    [("flip", 0, 0.5), ("color_jitter", 0.4, 0.4, 0.4, 0.1),
    ("trivial", 31, 0, -1)] (python/src/augment.c lists them;
    feeder.transforms builds it from torchvision's names).

    pipeline: "eval" (resize the shorter side to `resize`, default
    size*256/224, then centre crop), "train" (RandomResizedCrop with `scale`
    and `ratio`, flip with `flip_prob`) or "resize". size: int or (h, w).
    device: None for host batches (uint8), or "cuda:N" for batches already on
    the GPU, in `dtype` (uint8, float16, bfloat16, float32: normalised on the
    GPU with `mean` and `std`, in [0, 1] units). layout: "NCHW" (the default)
    or "NHWC". A RAW pack (feeder-pack --mode raw) brings its own shape and
    layout: unless size or layout is given, batches have the pack's (with a
    float dtype on the device, NCHW unless layout is given).
    gpu_prefetch: with a device, the batches the device ring holds (2 to
    64): the one being used, and those made ready behind it.
    sampler: the order, as torch's DataLoader takes it: any iterable of
    dataset indices with __len__ (torch's DistributedSampler for one loader
    per rank, SubsetRandomSampler, a list). It is iterated once as each
    epoch begins; set_epoch on it stays the caller's, as with torch.
    Mutually exclusive with shuffle.
    batch_sampler: the batches themselves, as torch's DataLoader takes them:
    an iterable of lists of dataset indices (torch's BatchSampler, a list of
    lists), of any lengths up to batch_size, which sizes the slots and
    defaults to the batch sampler's own batch_size attribute. Iterated once
    as each epoch begins; such an epoch never begins early, and has no
    state_dict(). Mutually exclusive with shuffle, sampler and drop_last.
    max_pixels, max_decode_bytes, max_side: the decoders' limits on one
    image (pixels, memory its decode takes, either side), read from its
    header; an image over one fails its batch (or is skipped or dropped, as
    on_error says) with a message naming the limit. 0 = no limit.
    row_index_bytes: the ROI decoder's shared row index: bytes the workers
    keep for where each JPEG's MCU rows begin, so that every decode after a
    file's first starts at its crop (docs/ARCHITECTURE.md, "The CPU decode on one core");
    0 turns it off.
    timeout: seconds to wait for a batch, 0 = forever. as_torch: yield torch
    tensors (default when torch imports) or feeder.Array views, which
    torch.from_dlpack / numpy.from_dlpack / numpy.asarray take without a copy.
    channels: 3 (RGB) or 1 (grayscale: Pillow's convert("L") for PNG and WebP,
    libjpeg's gray decode for JPEG, as Pillow's draft("L"); float batches use
    mean[0] and std[0]).

    Each iter() runs the next epoch (0, 1, ...; set_epoch(n) chooses it): the
    order and every random crop are a pure function of (seed, epoch, index),
    whatever num_workers. As with torch's DataLoader, each iter() is a fresh
    pass; unlike it (where an older iterator keeps its own workers and goes
    on), a Loader runs one epoch at a time, so iter() during an epoch ends
    that epoch early and starts the next one: the older iterator then emits a
    RuntimeWarning once and raises StopIteration. Breaking out of a loop, or
    dropping an iterator, ends its epoch quietly. state_dict() / load_state_dict() save and resume the
    position inside an epoch (load into a new Loader before iterating it).
    """

    def __repr__(self):
        return (f"<feeder.Loader {self.dataset!r} batch_size={self.batch_size} "
                f"num_workers={self.num_workers} epoch={self.epoch}>")
