"""Transforms named and parameterised like torchvision.transforms.v2, compiled
into feeder's C pipeline.

    import feeder
    from feeder import transforms as T
    train = feeder.ImageFolder("/data/train", transform=T.Compose([
        T.RandomResizedCrop(224), T.RandomHorizontalFlip(),
        T.TrivialAugmentWide(), T.ToDtype(torch.float32, scale=True),
        T.Normalize([0.485, 0.456, 0.406], [0.229, 0.224, 0.225])]))
    loader = feeder.DataLoader(train, batch_size=256, shuffle=True, num_workers=8)

A Compose is read once, in order, into what feeder's workers run: the crop
(RandomResizedCrop; Resize then CenterCrop; or Resize to (h, w)) decodes
only the rows and columns it keeps; flips and the colour, blur, erasing and
auto-augment steps run on the uint8 sample in the worker (with torchvision's
definitions, every random choice drawn from (seed, epoch, index)); ToDtype
and Normalize make the batch float (on the GPU with device=, else on the
host). A transform with no native equivalent raises TypeError naming it.
Differences from torchvision, on purpose: the resize is feeder's
antialiased one (bytes close to torchvision's, not equal); RandomErasing
erases uint8 pixels before Normalize (value=0 is black, where torchvision
after Normalize erases to the mean colour).
"""
import dataclasses
import math

__all__ = ["Compose", "RandomResizedCrop", "Resize", "CenterCrop", "RandomHorizontalFlip",
           "RandomVerticalFlip", "ColorJitter", "RandomGrayscale", "GaussianBlur",
           "RandomRotation", "RandAugment", "TrivialAugmentWide", "RandomErasing", "ToDtype",
           "Normalize", "ToImage", "PILToTensor", "ToTensor", "InterpolationMode"]


class InterpolationMode:
    """torchvision's names; feeder resamples with NEAREST or BILINEAR."""
    NEAREST = "nearest"
    BILINEAR = "bilinear"
    BICUBIC = "bicubic"


def _interp(mode, what):
    mode = getattr(mode, "value", mode)
    if mode in ("nearest", 0):
        return 0
    if mode in ("bilinear", 2, 1):
        return 1
    raise TypeError(f"feeder.transforms.{what}: interpolation {mode!r} has no native equivalent "
                    "(nearest or bilinear)")


def _fill(fill, what):
    if fill is None:
        return -1
    if isinstance(fill, (int, float)) and 0 <= fill <= 255:
        return int(fill)
    raise TypeError(f"feeder.transforms.{what}: fill {fill!r}: one value in 0..255 or None")


def _pair(size, what):
    if isinstance(size, int):
        return size, size
    size = tuple(size)
    if len(size) == 1:
        return size[0], size[0]
    if len(size) == 2:
        return int(size[0]), int(size[1])
    raise ValueError(f"feeder.transforms.{what}: size {size!r}: an int or (height, width)")


class Transform:
    """A step of a Compose; compile() tells feeder's pipeline what it does."""

    def _compile(self, plan):
        raise NotImplementedError

    def torchvision(self):
        """The torchvision.transforms.v2 transform this one stands for (with
        a torchvision before 0.15, the transforms module's own)."""
        name = type(self).__name__
        try:
            from torchvision.transforms import v2 as tv
        except ImportError:
            import torchvision.transforms as tv
            if name in ("ToImage", "PILToTensor"):
                return _identity
            if name == "ToDtype":
                return tv.ConvertImageDtype(self._args[0])
        return getattr(tv, name)(*self._args, **self._kwargs)

    def __init__(self, *args, **kwargs):
        self._args, self._kwargs = args, kwargs

    def __repr__(self):
        a = [repr(x) for x in self._args] + [f"{k}={v!r}" for k, v in self._kwargs.items()]
        return f"{type(self).__name__}({', '.join(a)})"

    def __call__(self, img):
        """One image (a PIL image or a uint8 tensor), through the torchvision
        equivalent (for inspection: feeder.ImageFolder.__getitem__)."""
        import torch
        if not isinstance(img, torch.Tensor):
            from torchvision.transforms.functional import pil_to_tensor
            img = pil_to_tensor(img)
        return self.torchvision()(img)


def _identity(x):
    return x


class Compose(Transform):
    def __init__(self, transforms):
        super().__init__(list(transforms))
        self.transforms = list(transforms)

    def torchvision(self):
        try:
            from torchvision.transforms import v2 as tv
        except ImportError:
            import torchvision.transforms as tv
        return tv.Compose([t.torchvision() for t in self.transforms])

    def _compile(self, plan):
        for t in self.transforms:
            if not isinstance(t, Transform):
                raise TypeError(f"feeder.transforms.Compose: {t!r} is not a feeder transform "
                                "(use feeder.transforms, or a Python dataset for torchvision's)")
            t._compile(plan)


@dataclasses.dataclass
class _Plan:
    """What a pipeline compiles to: feeder.Loader's keyword arguments, plus
    the host-side float conversion."""

    kw: dict = dataclasses.field(default_factory=dict)
    augment: list = dataclasses.field(default_factory=list)
    crop: object = None
    pending_resize: object = None
    dtype: object = None
    scale: bool = False
    mean: object = None
    std: object = None

    def need_crop(self, what):
        if self.pending_resize is not None:
            raise TypeError(f"feeder.transforms.{what}: Resize({self.pending_resize}) must be "
                            "followed by CenterCrop (or be Resize((h, w)))")
        if self.crop is None:
            raise TypeError(f"feeder.transforms.{what} comes before the crop: start the pipeline "
                            "with RandomResizedCrop, Resize + CenterCrop, or Resize((h, w))")

    def step(self, what, step):
        self.need_crop(what)
        if self.dtype is not None:
            raise TypeError(f"feeder.transforms.{what} after ToDtype/Normalize: feeder runs it on "
                            "uint8 pixels, so put it before them")
        self.augment.append(step)


def compile(transform):
    """The Loader arguments and host conversion of a feeder transform (a
    Compose or one transform)."""
    plan = _Plan()
    if not isinstance(transform, Transform):
        raise TypeError(f"feeder: {transform!r} is not a feeder.transforms transform")
    transform._compile(plan)
    plan.need_crop("Compose")
    if plan.augment:
        plan.kw["augment"] = plan.augment
    if plan.crop == "train" and "flip_prob" not in plan.kw:
        plan.kw["flip_prob"] = 0.0
    if plan.mean is not None and plan.dtype is None:
        raise TypeError("feeder.transforms.Normalize needs ToDtype(torch.float32, scale=True) "
                        "before it")
    return plan


class RandomResizedCrop(Transform):
    def __init__(self, size, scale=(0.08, 1.0), ratio=(3.0 / 4.0, 4.0 / 3.0),
                 interpolation=InterpolationMode.BILINEAR, antialias=True):
        super().__init__(size, scale=scale, ratio=ratio, antialias=antialias)
        self.size, self.scale, self.ratio = _pair(size, "RandomResizedCrop"), scale, ratio
        _interp(interpolation, "RandomResizedCrop")

    def _compile(self, plan):
        if plan.crop is not None or plan.pending_resize is not None:
            raise TypeError("feeder.transforms.RandomResizedCrop: one crop per pipeline")
        plan.crop = "train"
        plan.kw.update(pipeline="train", size=self.size, scale=tuple(self.scale),
                       ratio=tuple(self.ratio))


class Resize(Transform):
    def __init__(self, size, interpolation=InterpolationMode.BILINEAR, max_size=None,
                 antialias=True):
        super().__init__(size, antialias=antialias)
        if max_size is not None:
            raise TypeError("feeder.transforms.Resize: max_size has no native equivalent")
        _interp(interpolation, "Resize")
        self.size = size

    def _compile(self, plan):
        if plan.crop is not None or plan.pending_resize is not None:
            raise TypeError("feeder.transforms.Resize: one crop per pipeline (Resize + CenterCrop "
                            "is one)")
        if isinstance(self.size, int) or len(tuple(self.size)) == 1:
            plan.pending_resize = self.size if isinstance(self.size, int) else tuple(self.size)[0]
        else:
            plan.crop = "resize"
            plan.kw.update(pipeline="resize", size=_pair(self.size, "Resize"))


class CenterCrop(Transform):
    def __init__(self, size):
        super().__init__(size)
        self.size = _pair(size, "CenterCrop")

    def _compile(self, plan):
        if plan.pending_resize is None:
            raise TypeError("feeder.transforms.CenterCrop needs Resize(shorter_side) right before "
                            "it (feeder's eval crop)")
        plan.crop = "eval"
        plan.kw.update(pipeline="eval", resize=int(plan.pending_resize), size=self.size)
        plan.pending_resize = None


class RandomHorizontalFlip(Transform):
    def __init__(self, p=0.5):
        super().__init__(p=p)
        self.p = p

    def _compile(self, plan):
        plan.need_crop("RandomHorizontalFlip")
        if plan.crop == "train" and not plan.augment and "flip_prob" not in plan.kw:
            plan.kw["flip_prob"] = float(self.p)  # the crop's own flip
        else:
            plan.step("RandomHorizontalFlip", ("flip", 0, float(self.p)))


class RandomVerticalFlip(Transform):
    def __init__(self, p=0.5):
        super().__init__(p=p)
        self.p = p

    def _compile(self, plan):
        plan.step("RandomVerticalFlip", ("flip", 1, float(self.p)))


def _symmetric(v, centre, what, name):
    if isinstance(v, (int, float)):
        return float(v)
    lo, hi = v
    if not math.isclose(centre - lo, hi - centre):
        raise TypeError(f"feeder.transforms.{what}: {name}={v!r}: feeder takes a range "
                        f"symmetric around {centre} (one number)")
    return float(hi - centre)


class ColorJitter(Transform):
    def __init__(self, brightness=0, contrast=0, saturation=0, hue=0):
        super().__init__(brightness=brightness, contrast=contrast, saturation=saturation, hue=hue)
        self.v = (_symmetric(brightness, 1, "ColorJitter", "brightness"),
                  _symmetric(contrast, 1, "ColorJitter", "contrast"),
                  _symmetric(saturation, 1, "ColorJitter", "saturation"),
                  _symmetric(hue, 0, "ColorJitter", "hue"))

    def _compile(self, plan):
        plan.step("ColorJitter", ("color_jitter",) + self.v)


class RandomGrayscale(Transform):
    def __init__(self, p=0.1):
        super().__init__(p=p)
        self.p = p

    def _compile(self, plan):
        plan.step("RandomGrayscale", ("grayscale", float(self.p)))


class GaussianBlur(Transform):
    def __init__(self, kernel_size, sigma=(0.1, 2.0)):
        super().__init__(kernel_size, sigma=sigma)
        k = _pair(kernel_size, "GaussianBlur")
        if k[0] != k[1]:
            raise TypeError("feeder.transforms.GaussianBlur: a square kernel only")
        self.k = k[0]
        self.sigma = (float(sigma), float(sigma)) if isinstance(sigma, (int, float)) \
            else (float(sigma[0]), float(sigma[1]))

    def _compile(self, plan):
        plan.step("GaussianBlur", ("blur", self.k) + self.sigma)


class RandomRotation(Transform):
    def __init__(self, degrees, interpolation=InterpolationMode.NEAREST, expand=False,
                 center=None, fill=0):
        super().__init__(degrees, fill=fill)
        if expand or center is not None:
            raise TypeError("feeder.transforms.RandomRotation: expand and center have no native "
                            "equivalent")
        self.d = _symmetric(degrees, 0, "RandomRotation", "degrees")
        self.interp = _interp(interpolation, "RandomRotation")
        self.fill = _fill(fill, "RandomRotation")

    def _compile(self, plan):
        plan.step("RandomRotation", ("rotate", self.d, self.interp, self.fill))


class RandAugment(Transform):
    def __init__(self, num_ops=2, magnitude=9, num_magnitude_bins=31,
                 interpolation=InterpolationMode.NEAREST, fill=None):
        super().__init__(num_ops=num_ops, magnitude=magnitude,
                         num_magnitude_bins=num_magnitude_bins, fill=fill)
        self.v = (int(num_ops), int(magnitude), int(num_magnitude_bins),
                  _interp(interpolation, "RandAugment"), _fill(fill, "RandAugment"))

    def _compile(self, plan):
        plan.step("RandAugment", ("randaugment",) + self.v)


class TrivialAugmentWide(Transform):
    def __init__(self, num_magnitude_bins=31, interpolation=InterpolationMode.NEAREST, fill=None):
        super().__init__(num_magnitude_bins=num_magnitude_bins, fill=fill)
        self.v = (int(num_magnitude_bins), _interp(interpolation, "TrivialAugmentWide"),
                  _fill(fill, "TrivialAugmentWide"))

    def _compile(self, plan):
        plan.step("TrivialAugmentWide", ("trivial",) + self.v)


class RandomErasing(Transform):
    def __init__(self, p=0.5, scale=(0.02, 0.33), ratio=(0.3, 3.3), value=0, inplace=False):
        super().__init__(p=p, scale=scale, ratio=ratio, value=value)
        if not isinstance(value, (int, float)) or not 0 <= value <= 255:
            raise TypeError(f"feeder.transforms.RandomErasing: value={value!r}: one value in "
                            "0..255 (feeder erases uint8 pixels)")
        self.v = (float(p), float(scale[0]), float(scale[1]), float(ratio[0]), float(ratio[1]),
                  int(value))

    def _compile(self, plan):
        plan.need_crop("RandomErasing")
        plan.augment.append(("erase",) + self.v)  # on uint8, whatever its place in the list


class ToDtype(Transform):
    def __init__(self, dtype, scale=False):
        super().__init__(dtype, scale=scale)
        self.dtype, self.scale = dtype, scale

    def _compile(self, plan):
        import torch
        dtype = self.dtype
        if isinstance(dtype, dict):
            dtype = next(iter(dtype.values()))
        if dtype == torch.uint8:
            return
        if dtype not in (torch.float32, torch.float16, torch.bfloat16):
            raise TypeError(f"feeder.transforms.ToDtype: {dtype} has no native equivalent "
                            "(uint8, float32, float16, bfloat16)")
        if not self.scale:
            raise TypeError("feeder.transforms.ToDtype: scale=False (floats in 0..255) has no "
                            "native equivalent; use scale=True")
        plan.dtype, plan.scale = dtype, True


class ToTensor(Transform):
    """torchvision's ToTensor: float32 in [0, 1] (as ToDtype(float32, scale=True))."""

    def __init__(self):
        super().__init__()

    def torchvision(self):
        import torch
        import torchvision.transforms as tv
        return tv.ConvertImageDtype(torch.float32)  # __call__ gives it a uint8 tensor

    def _compile(self, plan):
        import torch
        plan.dtype, plan.scale = torch.float32, True


class Normalize(Transform):
    def __init__(self, mean, std, inplace=False):
        super().__init__(mean, std)
        self.mean, self.std = [float(m) for m in mean], [float(s) for s in std]

    def _compile(self, plan):
        if plan.dtype is None:
            raise TypeError("feeder.transforms.Normalize needs ToDtype(torch.float32, "
                            "scale=True) before it")
        plan.mean, plan.std = self.mean, self.std


class ToImage(Transform):
    """Already an image tensor in feeder's pipeline: nothing to do."""

    def __init__(self):
        super().__init__()

    def _compile(self, plan):
        pass


class PILToTensor(ToImage):
    pass
