"""A checkpoint geolocod wrote, into a PyTorch model (geoloco.torch re-exports
both functions)."""

import numpy as np
import torch

from . import checkpoint as _checkpoint

__all__ = ["load_checkpoint", "save_parameters", "unwrap"]


def unwrap(model: torch.nn.Module) -> torch.nn.Module:
    """The user's module inside DistributedDataParallel (or DataParallel), whose
    parameter names (not "module.<name>") are the job's layout."""
    wrappers = (torch.nn.parallel.DistributedDataParallel, torch.nn.DataParallel)
    return model.module if isinstance(model, wrappers) else model


def load_checkpoint(model: torch.nn.Module, path: str) -> _checkpoint.Checkpoint:
    """Loads the anchor of a checkpoint geolocod wrote (<data_dir>/jobs/<job>/
    checkpoint.safetensors; `geoloco status` names it) into `model`, in one
    call. The model's parameters must be the job's layout: the same names,
    shapes and order. Returns the checkpoint (its .round, .job, ...). Raises
    geoloco.checkpoint.CheckpointError for a damaged file, ValueError naming
    the first parameter that differs from the checkpoint's layout."""
    ckpt = _checkpoint.load(path)
    params = list(unwrap(model).named_parameters())
    have = [(name, tuple(p.shape)) for name, p in params]
    if have != list(ckpt.layout):
        for i, (mine, theirs) in enumerate(zip(have, ckpt.layout)):
            if mine != tuple(theirs):
                raise ValueError("%s: parameter %d is %s %s in the model but %s %s in the checkpoint (job %s)"
                                 % (path, i, mine[0], mine[1], theirs[0], tuple(theirs[1]), ckpt.job))
        raise ValueError("%s: the model has %d parameters, the checkpoint of job %s has %d"
                         % (path, len(have), ckpt.job, len(ckpt.layout)))
    tensors = _checkpoint.model_tensors(ckpt)
    with torch.no_grad():
        for name, p in params:
            p.copy_(torch.from_numpy(tensors[name].copy()).to(p.device))
    return ckpt


def save_parameters(model: torch.nn.Module, path: str) -> None:
    """Writes the model's parameters (unwrapped: the job's names) to a numpy
    .npz file, one array per parameter name."""
    np.savez(path, **{name: p.detach().cpu().numpy() for name, p in unwrap(model).named_parameters()})
