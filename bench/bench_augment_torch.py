#!/usr/bin/python3
"""torchvision's time per image for the ops bench_augment times, on one core.

Same image (gradients plus noise, 224 x 224 x 3 uint8, as a CHW tensor),
same parameters, torch.set_num_threads(1). torchvision.transforms.v2 is used
when this torchvision has it (0.16 and later), else transforms.functional /
the v1 transform classes on tensors (Debian 12 ships torchvision 0.14, which
has no v2). Times are the thread's CPU time (time.thread_time; bench_augment
uses CLOCK_THREAD_CPUTIME_ID), so other work on a shared machine does not
count. Each figure is the median of 5 rounds of at least S / 5 seconds.

    /usr/bin/python3 bench/bench_augment_torch.py [--seconds S] [--json FILE]
        [--compare bench_augment.json]

--compare reads bench_augment's --json output and prints the two side by
side with the ratio (torchvision's time / ours, NHWC and NCHW).
"""
import argparse
import json
import math
import time

import torch
import torchvision

try:
    from torchvision.transforms import v2 as T
    import torchvision.transforms.v2.functional as F
    API = "transforms.v2"
except ImportError:
    import torchvision.transforms as T
    import torchvision.transforms.functional as F
    API = "transforms (v1; this torchvision has no v2)"
from torchvision.transforms import InterpolationMode as IM

W = H = 224
BATCH = 32


def make_image():
    # Not bit-identical to bench_augment's noise (a different generator);
    # the ops' speed does not depend on it.
    g = torch.Generator().manual_seed(5)
    y = torch.arange(H).view(H, 1).expand(H, W)
    x = torch.arange(W).view(1, W).expand(H, W)
    base = torch.stack([x, y, (x + y) // 2])
    noise = torch.randint(-32, 32, (3, H, W), generator=g)
    return (base + noise).clamp(0, 255).to(torch.uint8)


def mixup(batch, alpha=0.2):
    # torchvision's references/classification/transforms.py RandomMixup on
    # the float batch it expects.
    b = batch.float()
    lam = float(torch._sample_dirichlet(torch.tensor([alpha, alpha]))[0])
    rolled = b.roll(1, 0)
    b.mul_(lam).add_(rolled.mul_(1.0 - lam))
    return b


def cutmix(batch, alpha=1.0):
    lam = float(torch._sample_dirichlet(torch.tensor([alpha, alpha]))[0])
    rolled = batch.roll(1, 0)
    r_x = torch.randint(W, (1,))
    r_y = torch.randint(H, (1,))
    r = 0.5 * math.sqrt(1.0 - lam)
    rw, rh = int(r * W), int(r * H)
    x1, y1 = int(torch.clamp(r_x - rw, min=0)), int(torch.clamp(r_y - rh, min=0))
    x2, y2 = int(torch.clamp(r_x + rw, max=W)), int(torch.clamp(r_y + rh, max=H))
    batch[:, :, y1:y2, x1:x2] = rolled[:, :, y1:y2, x1:x2]
    return batch


def ops():
    jitter = T.ColorJitter(0.4, 0.4, 0.4, 0.1)
    erase = T.RandomErasing(p=1.0, scale=(0.02, 0.33), ratio=(0.3, 3.3), value=0)
    trivial = T.TrivialAugmentWide(num_magnitude_bins=31, interpolation=IM.NEAREST)
    randaug = T.RandAugment(num_ops=2, magnitude=9, num_magnitude_bins=31,
                            interpolation=IM.NEAREST)
    return [
        ("hflip", lambda i: F.hflip(i)),
        ("vflip", lambda i: F.vflip(i)),
        ("rotate_nearest", lambda i: F.rotate(i, 30.0, interpolation=IM.NEAREST)),
        ("rotate_bilinear", lambda i: F.rotate(i, 30.0, interpolation=IM.BILINEAR)),
        ("affine_bilinear", lambda i: F.affine(i, angle=10.0, translate=[3, -2], scale=1.1,
                                               shear=[5.0, -8.0], interpolation=IM.BILINEAR,
                                               fill=[0.0, 0.0, 0.0])),
        ("brightness", lambda i: F.adjust_brightness(i, 1.3)),
        ("contrast", lambda i: F.adjust_contrast(i, 1.3)),
        ("saturation", lambda i: F.adjust_saturation(i, 1.3)),
        ("hue", lambda i: F.adjust_hue(i, 0.1)),
        ("grayscale", lambda i: F.rgb_to_grayscale(i, num_output_channels=3)),
        ("gaussian_blur", lambda i: F.gaussian_blur(i, [9, 9], [2.0, 2.0])),
        ("posterize", lambda i: F.posterize(i, 4)),
        ("solarize", lambda i: F.solarize(i, 128)),
        ("autocontrast", lambda i: F.autocontrast(i)),
        ("equalize", lambda i: F.equalize(i)),
        ("sharpness", lambda i: F.adjust_sharpness(i, 1.5)),
        ("color_jitter", jitter),
        ("random_erasing", lambda i: erase(i.clone())),  # RandomErasing works in place
        ("trivial_augment", trivial),
        ("randaugment", randaug),
        ("mixup", "batch"),
        ("cutmix", "batch"),
    ]


def time_op(fn, arg, seconds, per):
    rounds = []
    for _ in range(5):
        n, t0 = 0, time.thread_time()
        while True:
            fn(arg)
            n += 1
            el = time.thread_time() - t0
            if el >= seconds / 5:
                break
        rounds.append(el * 1e6 / n / per)
    rounds.sort()
    return rounds[2]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=1.0)
    ap.add_argument("--json")
    ap.add_argument("--compare")
    a = ap.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    img = make_image()
    batch = img.unsqueeze(0).repeat(BATCH, 1, 1, 1)
    res = {}
    for name, fn in ops():
        if fn == "batch":
            f = mixup if name == "mixup" else cutmix
            res[name] = time_op(lambda b: f(b.clone()), batch, a.seconds, BATCH)
        else:
            res[name] = time_op(fn, img, a.seconds, 1)
    out = {"torch": torch.__version__, "torchvision": torchvision.__version__, "api": API,
           "threads": torch.get_num_threads(), "us_per_image": res}
    print(f"torchvision {torchvision.__version__} ({API}), torch {torch.__version__}, "
          f"1 thread, {W}x{H}x3 uint8\n")
    ours = json.load(open(a.compare))["us_per_image"] if a.compare else None
    if ours:
        print("| op | torchvision µs | feeder NHWC µs | feeder NCHW µs | speed-up NHWC | speed-up NCHW |")
        print("| --- | ---: | ---: | ---: | ---: | ---: |")
        for k, v in res.items():
            o = ours.get(k)
            if o:
                print(f"| {k} | {v:.1f} | {o['nhwc']:.1f} | {o['nchw']:.1f} | "
                      f"{v / o['nhwc']:.1f}x | {v / o['nchw']:.1f}x |")
    else:
        print("| op | torchvision µs/image |")
        print("| --- | ---: |")
        for k, v in res.items():
            print(f"| {k} | {v:.1f} |")
    print()
    print(json.dumps(out))
    if a.json:
        with open(a.json, "w") as f:
            json.dump(out, f)


if __name__ == "__main__":
    main()
