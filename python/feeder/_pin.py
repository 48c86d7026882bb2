"""pin_memory for feeder.DataLoader's batches, and the copies that take a batch
out of its slot: torch's results, one thread's copies.

torch's DataLoader pins on a thread of its own that runs with one intra-op
thread (torch.utils.data._utils.pin_memory._pin_memory_loop sets
torch.set_num_threads(1)). feeder.DataLoader pins on the iterating thread,
whose intra-op threads (one a core by default) would split every copy over
all the cores the workers decode on: at 15 workers on 16 cores that halved
the loader's rate, and one thread's copy cost nothing measurable
(docs/BENCHMARKS.md, "feeder.DataLoader against torch's DataLoader").

So a plain contiguous CPU tensor is copied here into a page-locked block from
torch's own host allocator (the one Tensor.pin_memory uses, so a
non_blocking copy from it is tracked on its stream as torch's are) by one
memmove that runs without the GIL. Lists, tuples and dicts are walked here;
anything else (named tuples, a batch type with its own pin_memory(), a
tensor subclass, a strided view, another pin_memory_device) is left to
torch's pin_memory, which returns the tensors pinned here as they are.
"""
import ctypes

import torch
from torch.utils.data._utils import pin_memory as _tpin

_PLAIN = (str, bytes, int, float, bool, type(None))


def _copyable(t):
    return (t.layout is torch.strided and t.device.type == "cpu" and t.is_contiguous()
            and not (t.requires_grad or t.is_quantized or t.is_conj() or t.is_neg()
                     or t.has_names()))


def _pinned_empty(t):
    return torch.empty(t.shape, dtype=t.dtype, pin_memory=True)


def _copy_into(out, t):
    n = t.numel() * t.element_size()
    if n:
        ctypes.memmove(out.data_ptr(), t.data_ptr(), n)  # releases the GIL
    return out


def clone(t):
    """t.clone(), by one thread without the GIL for a plain contiguous CPU
    tensor (what copies a batch out of its slot on the iterating thread,
    where the intra-op threads would compete with the workers)."""
    if type(t) is not torch.Tensor or not _copyable(t):
        return t.clone()
    return _copy_into(torch.empty(t.shape, dtype=t.dtype), t)


def walk(data, empty=_pinned_empty):
    """(data with each plain contiguous CPU tensor copied into empty(t),
    True when nothing is left for torch's pin_memory)."""
    kind = type(data)
    if kind is torch.Tensor:
        if not _copyable(data):
            return data, False
        return _copy_into(empty(data), data), True
    if kind is list or kind is tuple:
        pairs = [walk(x, empty) for x in data]
        items = [x for x, _ in pairs]
        return (items if kind is list else tuple(items)), all(w for _, w in pairs)
    if kind is dict:
        pairs = {k: walk(v, empty) for k, v in data.items()}
        return {k: x for k, (x, _) in pairs.items()}, all(w for _, w in pairs.values())
    return data, kind in _PLAIN


def pin(data, device=None):
    """torch.utils.data's pin_memory(data, device), the copies made by one
    thread (the module's text says why)."""
    if device:
        return _tpin.pin_memory(data, device)
    out, whole = walk(data)
    return out if whole else _tpin.pin_memory(out)
