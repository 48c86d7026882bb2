#!/usr/bin/env python3
"""The same training run under torch.utils.data.DataLoader and feeder.DataLoader.

A custom map-style Dataset (synthetic "documents": token ids, a padding mask,
an id string, a label) feeds a small bag-of-embeddings classifier. The run is
made twice with the same seeds, once per loader; the only line that changes
is the DataLoader's import. The script checks that both runs saw the same
batches (the same loss after every step) and prints both losses and each
loader's samples/s.

    python3 examples/python/migrate.py [--epochs 2] [--workers 2] [--batch 64] [--device cpu]

Exit status 0 when the two runs agree, 1 otherwise.
"""
import argparse
import sys
import time

import numpy as np
import torch
from torch import nn
from torch.utils.data import Dataset

import feeder


class Documents(Dataset):
    """A document per index: 16..128 tokens padded to 128, its mask, an id
    and a label that the tokens predict."""

    def __init__(self, n=4096, vocab=1000, classes=8):
        self.n, self.vocab, self.classes = n, vocab, classes

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        rng = np.random.default_rng(i)  # the sample depends on its index only
        label = i % self.classes
        length = int(rng.integers(16, 129))
        tokens = np.zeros(128, dtype=np.int64)
        tokens[:length] = rng.integers(0, self.vocab // self.classes, length) + \
            label * (self.vocab // self.classes)
        mask = np.zeros(128, dtype=np.bool_)
        mask[:length] = True
        return {"tokens": tokens, "mask": mask, "id": f"doc-{i}", "label": label}


class BagModel(nn.Module):
    def __init__(self, vocab=1000, classes=8, dim=32):
        super().__init__()
        self.emb = nn.Embedding(vocab, dim)
        self.out = nn.Linear(dim, classes)

    def forward(self, tokens, mask):
        e = self.emb(tokens) * mask.unsqueeze(-1)
        return self.out(e.sum(1) / mask.sum(1, keepdim=True))


def train(DataLoader, args):
    torch.manual_seed(0)
    model = BagModel().to(args.device)
    opt = torch.optim.SGD(model.parameters(), lr=0.5)
    loader = DataLoader(Documents(), batch_size=args.batch, shuffle=True,
                        num_workers=args.workers, persistent_workers=args.workers > 0,
                        pin_memory=args.device != "cpu",
                        generator=torch.Generator().manual_seed(1))
    losses, seen, t0 = [], 0, time.perf_counter()
    for _ in range(args.epochs):
        for batch in loader:
            tokens = batch["tokens"].to(args.device, non_blocking=True)
            mask = batch["mask"].to(args.device, non_blocking=True)
            label = batch["label"].to(args.device, non_blocking=True)
            loss = nn.functional.cross_entropy(model(tokens, mask), label)
            opt.zero_grad()
            loss.backward()
            opt.step()
            losses.append(loss.item())
            seen += len(batch["id"])
    return losses, seen / (time.perf_counter() - t0)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--device", default="cpu")
    args = p.parse_args()
    torch_losses, torch_rate = train(torch.utils.data.DataLoader, args)
    feeder_losses, feeder_rate = train(feeder.DataLoader, args)
    print(f"torch.utils.data.DataLoader: {len(torch_losses)} steps, loss {torch_losses[0]:.4f} -> "
          f"{torch_losses[-1]:.4f}, {torch_rate:.0f} samples/s")
    print(f"feeder.DataLoader:           {len(feeder_losses)} steps, loss {feeder_losses[0]:.4f} -> "
          f"{feeder_losses[-1]:.4f}, {feeder_rate:.0f} samples/s")
    same = len(torch_losses) == len(feeder_losses) and all(
        abs(a - b) <= 1e-6 * max(1.0, abs(a)) for a, b in zip(torch_losses, feeder_losses))
    print("the same batches, step by step" if same else "the runs differ")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
