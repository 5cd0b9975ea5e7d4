"""sluice.torch: the Loader for PyTorch.

`sluice.torch.Loader(spec, ...)` takes the arguments of `sluice.Loader` and yields the same
batches as dicts of torch.Tensor. The tensors share the C++ buffers (torch.from_numpy, no
copy). `pin_memory=True` copies each batch into page-locked memory for faster, asynchronous
host-to-GPU transfers (ignored, with a warning, when CUDA is not available).

`device="cuda"` moves each batch to that device, and `device_ops=K` runs the last K ops of
the pipeline there with torch instead of in the engine (normalize and cast: deterministic,
element-wise ops), so the workers send and the trainer receives the tensor before them:
uint8 pixels, a quarter of normalize's float32. The planner then plans the shorter pipeline
the engine runs; the ops' time on the device is part of the training step it measures.
Results equal the engine's ops within float rounding.

`sluice.torch.IterableDataset(spec, ...)` wraps a Loader for code that insists on a
torch.utils.data.DataLoader: use it with `DataLoader(ds, batch_size=None, num_workers=0)`
(Sluice batches and parallelises itself).
"""
import warnings

import torch
import torch.utils.data

from . import _device_ops
from . import _spec
from . import loader as _loader


def _to_torch(batch, pin):
    out = {}
    for name, array in batch.items():
        t = torch.from_numpy(array)
        if pin:
            t = t.pin_memory()
        out[name] = t
    return out


class Loader(_loader.Loader):
    """sluice.Loader yielding {field: torch.Tensor}. Extra arguments: pin_memory, device
    (where each batch is put: "cuda", "cuda:1", "cpu"; None: stays where the engine made it),
    device_ops (run the spec's last K ops on `device` with torch; needs `device`)."""

    def __init__(self, spec, *args, pin_memory=False, device=None, device_ops=0, **kwargs):
        self.device = torch.device(device) if device is not None else None
        if device_ops and self.device is None:
            raise ValueError("device_ops: give the device to run them on (device=\"cuda\", "
                             "or \"cpu\")")
        engine_spec, tail = _device_ops.split_tail(_spec.as_spec(spec), device_ops)
        self.device_ops = [name for name, _ in tail]
        self._device_fns = _device_ops.build(torch, tail)
        super().__init__(engine_spec, *args, **kwargs)
        self.pin_memory = bool(pin_memory)
        if self.pin_memory and not torch.cuda.is_available():
            warnings.warn("pin_memory=True but CUDA is not available; batches are not pinned",
                          _loader.SluiceWarning, stacklevel=2)
            self.pin_memory = False

    def __next__(self):
        batch = _to_torch(super().__next__(), self.pin_memory)
        if self.device is not None:
            batch = {k: v.to(self.device, non_blocking=self.pin_memory) for k, v in batch.items()}
        for fn in self._device_fns:
            batch = fn(batch)
        return batch


class IterableDataset(torch.utils.data.IterableDataset):
    """A torch IterableDataset over a sluice.torch.Loader; every iteration is one pass.
    `state_dict()` / `load_state_dict()` forward to the loader."""

    def __init__(self, spec, **loader_kwargs):
        super().__init__()
        self.loader = Loader(spec, **loader_kwargs)

    def __iter__(self):
        info = torch.utils.data.get_worker_info()
        if info is not None and info.num_workers > 1:
            raise RuntimeError(
                "sluice.torch.IterableDataset runs its own threads: use DataLoader(dataset, "
                "batch_size=None, num_workers=0)")
        return iter(self.loader)

    def __len__(self):
        return len(self.loader)

    def state_dict(self):
        return self.loader.state_dict()

    def load_state_dict(self, state):
        self.loader.load_state_dict(state)
