"""A PyTorch Lightning training job written as Lightning's SLURM docs show, for
tests/test_slurm_lightning.py: ``Trainer(plugins=[SLURMEnvironment(auto_requeue=True)])``
under ``srun``, with ``#SBATCH --signal=SIGUSR1@90`` in its batch script
(tests/clients/lightning_job.sbatch). Run by that script as a Slurm step:

    python lightning_job.py FOLDER STEPS

A tiny model trains STEPS steps on the CPU, half a second each. On SIGUSR1 Lightning
saves an HPC checkpoint (FOLDER/hpc_ckpt_N.ckpt) and requeues the job itself
(``scontrol requeue``); the next run finds that checkpoint and resumes from its step.
Each run logs its starting and final global step to FOLDER/steps.log.
"""
import sys
import time
from pathlib import Path

import torch
from lightning.pytorch import LightningModule, Trainer
from lightning.pytorch.plugins.environments import SLURMEnvironment
from torch.utils.data import DataLoader, TensorDataset


class Tiny(LightningModule):
    def __init__(self, log: str):
        super().__init__()
        self.log_path = log
        self.layer = torch.nn.Linear(4, 1)

    def training_step(self, batch, batch_idx):
        time.sleep(0.5)  # one unit of work
        x, y = batch
        return torch.nn.functional.mse_loss(self.layer(x), y)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.01)

    def on_train_start(self):
        self.note(f"start step={self.trainer.global_step}")

    def on_train_end(self):
        self.note(f"finished step={self.trainer.global_step}")

    def note(self, line: str) -> None:
        with open(self.log_path, "a") as out:
            out.write(line + "\n")


def main(folder: str, steps: int) -> None:
    torch.manual_seed(0)
    data = TensorDataset(torch.randn(64, 4), torch.randn(64, 1))
    trainer = Trainer(max_steps=steps, accelerator="cpu", devices=1, default_root_dir=folder, logger=False,
                      enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
                      plugins=[SLURMEnvironment(auto_requeue=True)])
    trainer.fit(Tiny(str(Path(folder) / "steps.log")), DataLoader(data, batch_size=1))


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]))
