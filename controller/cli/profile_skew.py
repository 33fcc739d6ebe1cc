"""Compute a model's tensor-size skew (largest tensor's share of its bytes) from a
checkpoint (.npz, .safetensors, or a PyTorch state dict when torch is installed),
print it, and with --job record it for that job in the controller's store.

Users can instead pass the value at submit time: sbatch --comment=tiresias:skew=0.42.
"""
from __future__ import annotations

import argparse
import re

from controller.core.model import InputError
from controller.service.state.secrets import redact_url


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("file", metavar="FILE", help="checkpoint: .npz, .safetensors, .pt/.pth/.bin/.ckpt")
    p.add_argument("--job", metavar="JOBID", help="store the skew for this Slurm job")
    p.add_argument("--database-url", metavar="URL", help="store (default: the config file's database_url)")
    p.add_argument("--cluster", metavar="NAME", help="cluster name in the store (default: the config file's)")
    p.add_argument("--config", metavar="FILE", help="YAML settings (for database_url and cluster)")


def run(args) -> int:
    from controller.service.round.accounting import parse_skew_hint
    from controller.service.ops.skew import profile

    result = profile(args.file)
    hint = f"tiresias:skew={result.skew:.4f}"
    skew, problem = parse_skew_hint(hint)  # the same strict check as a user's hint
    if problem:
        raise InputError(f"{args.file}: computed {problem}")
    print(f"{result.path}: {result.file_format}, {result.tensors} tensors, {result.total_bytes} bytes; "
          f"largest {result.largest_name!r} {result.largest_bytes} bytes; skew {skew:.4f}")
    print(f"submit hint: --comment={hint}")
    if not args.job:
        return 0
    if not re.fullmatch(r"[0-9]{1,19}(?:_[0-9]{1,9})?", args.job, re.ASCII):
        raise InputError(f"--job {args.job!r} is not a Slurm job id")
    from controller.service.ops.config import load
    from controller.service.state.store import Store

    config = load(args.config, {"database_url": args.database_url, "cluster": args.cluster})
    with Store(config.store_url()) as store:
        setter = getattr(store, "set_skew", None)
        if setter is not None:
            setter(config.cluster, args.job, skew)
        else:
            records = store.load_jobs(config.cluster)
            record = records.get(args.job)
            if record is None:
                raise InputError(f"job {args.job} is not in the store for cluster {config.cluster!r} yet (the "
                                 f"controller adds jobs it observes); pass --comment={hint} at submit time instead")
            record.skew = skew
            store.save_jobs(config.cluster, [record])
    print(f"job {args.job}: skew {skew:.4f} stored in {redact_url(config.database_url)} (cluster {config.cluster})")
    return 0
