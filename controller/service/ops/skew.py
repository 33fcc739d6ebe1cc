"""Tensor-size skew of a model: the share of its bytes held by its largest tensor (0..1).

Placement uses it (a model dominated by one huge tensor is communication-bound and
wants consolidated GPUs). Readers, by file type:

  * ``.npz``: numpy, ``allow_pickle=False``;
  * ``.safetensors``: parsed here (8-byte little-endian header length, then a JSON
    header mapping names to dtype/shape/data_offsets); tensor data is never read;
  * ``.pt`` / ``.pth`` / ``.bin`` / ``.ckpt``: a PyTorch state dict, only when torch is
    importable (``torch.load(..., weights_only=True)``; nested dicts are flattened and a
    top-level ``state_dict`` / ``model`` entry is used when present).

Sizes are bytes (so mixed precisions weigh what they cost to move).
"""
from __future__ import annotations

import json
import os
import struct
from dataclasses import dataclass

from controller.core.model import InputError

SAFETENSORS_MAX_HEADER = 100 * 1024 * 1024
TORCH_SUFFIXES = (".pt", ".pth", ".bin", ".ckpt")


@dataclass(frozen=True)
class SkewProfile:
    path: str
    file_format: str
    tensors: int
    total_bytes: int
    largest_name: str
    largest_bytes: int

    @property
    def skew(self) -> float:
        """Largest tensor's share of all tensor bytes, 0..1."""
        return self.largest_bytes / self.total_bytes if self.total_bytes else 0.0


def largest_share(sizes: dict[str, int]) -> tuple[str, int, int]:
    """(largest tensor's name, its bytes, total bytes); InputError when there are no bytes."""
    if not sizes or sum(sizes.values()) <= 0:
        raise InputError("the file holds no tensor data")
    name = max(sorted(sizes), key=lambda key: sizes[key])
    return name, sizes[name], sum(sizes.values())


def sizes_npz(path: str) -> dict[str, int]:
    import zipfile

    import numpy as np

    try:
        with np.load(path, allow_pickle=False) as archive:
            return {name: int(archive[name].nbytes) for name in archive.files}
    except (ValueError, OSError, zipfile.BadZipFile, EOFError) as exc:
        raise InputError(f"{path}: not a readable .npz ({exc})") from None


def sizes_safetensors(path: str) -> dict[str, int]:
    try:
        file_bytes = os.path.getsize(path)
        with open(path, "rb") as handle:
            prefix = handle.read(8)
            if len(prefix) != 8:
                raise InputError(f"{path}: too short for a .safetensors file")
            (header_len,) = struct.unpack("<Q", prefix)
            if header_len > SAFETENSORS_MAX_HEADER or header_len > file_bytes - 8:
                raise InputError(f"{path}: header length {header_len} does not fit the file ({file_bytes} bytes)")
            header_raw = handle.read(header_len)
    except OSError as exc:
        raise InputError(f"{path}: {exc.strerror}") from None
    try:
        header = json.loads(header_raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        raise InputError(f"{path}: the .safetensors header is not JSON") from None
    if not isinstance(header, dict):
        raise InputError(f"{path}: the .safetensors header is not a JSON object")
    data_bytes = file_bytes - 8 - header_len
    sizes = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        offsets = info.get("data_offsets") if isinstance(info, dict) else None
        if (not isinstance(offsets, list) or len(offsets) != 2 or not all(isinstance(o, int) for o in offsets)
                or not 0 <= offsets[0] <= offsets[1] <= data_bytes):
            raise InputError(f"{path}: tensor {name!r} has bad data_offsets {offsets!r}")
        sizes[name] = offsets[1] - offsets[0]
    return sizes


def sizes_torch(path: str) -> dict[str, int]:
    try:
        import torch
    except ImportError:
        raise InputError(f"{path}: reading a PyTorch state dict needs torch, which is not installed here "
                         f"(pip install 'tiresias-slurm[torch]', or save the weights as .safetensors/.npz)") from None
    try:
        loaded = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # noqa: BLE001 - torch raises many types for bad files
        raise InputError(f"{path}: torch.load failed ({type(exc).__name__}: {exc})") from None
    if isinstance(loaded, dict):
        for key in ("state_dict", "model"):
            if isinstance(loaded.get(key), dict):
                loaded = loaded[key]
                break
    sizes: dict[str, int] = {}

    def walk(prefix: str, value) -> None:
        if isinstance(value, torch.Tensor):
            sizes[prefix] = int(value.numel() * value.element_size())
        elif isinstance(value, dict):
            for key, item in value.items():
                walk(f"{prefix}.{key}" if prefix else str(key), item)

    walk("", loaded)
    return sizes


def profile(path: str) -> SkewProfile:
    """Read a checkpoint's tensor sizes and compute its skew."""
    if not os.path.isfile(path):
        raise InputError(f"{path}: no such file")
    lower = path.lower()
    if lower.endswith(".npz"):
        file_format, sizes = "npz", sizes_npz(path)
    elif lower.endswith(".safetensors"):
        file_format, sizes = "safetensors", sizes_safetensors(path)
    elif lower.endswith(TORCH_SUFFIXES):
        file_format, sizes = "torch", sizes_torch(path)
    else:
        raise InputError(f"{path}: unknown file type (expected .npz, .safetensors or {', '.join(TORCH_SUFFIXES)})")
    name, largest, total = largest_share(sizes)
    return SkewProfile(path, file_format, len(sizes), total, name, largest)
