"""A LightningModule trained by Lightning's Trainer with strategy="ddp", in the shape of
Lightning's own docs (a LightningModule, a DataLoader, Trainer.fit). It knows nothing of mgpu-tui.

Launched by torchrun (Lightning sees the environment and starts no process of its own) or alone
(Lightning's own launcher starts the other ranks by running this script again, or with
``--strategy ddp_spawn`` spawns them, and again for ``trainer.test`` with ``--test``). Each rank
prints its own account when its training ends (a callback: under ddp_spawn the spawned processes
train, not the script's), the truth the tests compare mgpu-tui's figures with:
    RESULT {"rank": 0, "world_size": 2, "steps": 12, "batch": 8, "loss": 0.123}
``FAIL_RANK=N`` plants an IndexError in rank N's third training step.
``--test`` runs trainer.test after fit (with strategy="ddp_spawn", Lightning starts the ranks' processes
again for it).
"""

import argparse
import json
import os
import sys

import lightning as L
import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset


class Regressor(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.net = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 1))
        self.last_loss = None

    def training_step(self, batch, batch_idx):
        x, y = batch
        if self.global_step == 2 and os.environ.get("FAIL_RANK") == str(self.global_rank):
            x = x[:, 10**6]  # an IndexError, as a wrong feature count gives
        loss = F.mse_loss(self.net(x), y)
        self.last_loss = float(loss.detach())
        self.log("train_loss", loss)
        return loss

    def test_step(self, batch, batch_idx):
        x, y = batch
        self.log("test_loss", F.mse_loss(self.net(x), y), sync_dist=True)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.05)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--devices", type=int, default=2)
    parser.add_argument("--strategy", default="ddp")  # "auto" on one device: no DDP at all
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--samples", type=int, default=96)
    parser.add_argument("--accumulate", type=int, default=1)  # accumulate_grad_batches
    parser.add_argument("--accelerator", default="cpu")  # "gpu" on a GPU box (scripts/gpu_check.py)
    parser.add_argument("--test", action="store_true")  # trainer.test after fit, as the docs show it
    args = parser.parse_args()
    L.seed_everything(0, verbose=False)
    x = torch.randn(args.samples, 16)
    data = TensorDataset(x, x.sum(dim=1, keepdim=True) * 0.1)
    model = Regressor()
    trainer = L.Trainer(
        accelerator=args.accelerator,
        devices=args.devices,
        strategy=args.strategy,
        max_epochs=args.epochs,
        accumulate_grad_batches=args.accumulate,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        callbacks=[Account(args.batch)],
    )
    trainer.fit(model, DataLoader(data, batch_size=args.batch))
    if args.test:
        trainer.test(model, DataLoader(data, batch_size=args.batch), verbose=False)


class Account(L.Callback):
    """Each rank's own account when its training ends, in the process that trained."""

    def __init__(self, batch):
        self.batch = batch

    def on_train_end(self, trainer, module):
        result = {
            "rank": trainer.global_rank,
            "world_size": trainer.world_size,
            "steps": trainer.global_step,
            "batch": self.batch,
            "loss": module.last_loss,
        }
        sys.stdout.write(f"RESULT {json.dumps(result)}\n")  # one write: the ranks may share a pipe
        sys.stdout.flush()


if __name__ == "__main__":
    main()
