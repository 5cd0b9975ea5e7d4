"""Sluice: a C++ input-pipeline engine for deep learning, from Python.

    import sluice
    spec = (sluice.files("data/**/*.jpg", label="parent_dir", shuffle=True, seed=42)
            .map("read_file").map("decode_jpeg")
            .map("random_resized_crop", size=224).map("random_flip")
            .map("normalize", mean=[0.485, 0.456, 0.406], std=[0.229, 0.224, 0.225])
            .batch(64))
    with sluice.Loader(spec) as loader:
        for batch in loader:          # {"image": ndarray f32[64,3,224,224], "label": i64[64]}
            ...

`sluice.torch.Loader` yields torch.Tensors instead; `sluice.ops` documents every op;
docs/python.md has the whole story.
"""
from . import _core
from ._spec import Spec, files, load, manifest, parse, shards
from .loader import Loader, SluiceWarning, merge_states
from . import ops

__version__ = _core.__version__

__all__ = ["Spec", "files", "manifest", "shards", "load", "parse", "Loader", "SluiceWarning",
           "merge_states", "ops", "__version__"]
