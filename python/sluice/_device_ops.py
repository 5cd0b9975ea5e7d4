"""The element-wise tail of a pipeline, run on the training device with torch instead of in
the engine (sluice.torch.Loader's `device` and `device_ops`).

What the workers send and the trainer receives is then the tensor before those ops (uint8
pixels instead of float32: a quarter of the bytes), the trainer's CPU does not run them, and
the planner sees the shorter pipeline it really runs; their time on the device is part of
the consumer's step, which the planner measures. Each op here computes what the engine's op
computes (within float rounding; tests/python/test_package_device_ops.py): the same formula,
on a batch instead of one sample at a time, which an element-wise op does not tell apart.
"""

_FLOAT = {"f16", "f32", "f64"}


def _torch_dtype(torch, name):
    return {"u8": torch.uint8, "i16": torch.int16, "i32": torch.int32, "i64": torch.int64,
            "f16": torch.float16, "f32": torch.float32, "f64": torch.float64}[name]


def _normalize(torch, args):
    field = args.get("field", "image")
    mean = [float(m) for m in args["mean"]]
    std = [float(s) for s in args["std"]]
    chw = args.get("layout", "CHW") == "CHW"
    half = args.get("dtype", "f32") == "f16"

    coefficients = {}  # (channels, u8 input, device) -> (scale, shift): made once

    def apply(batch):
        x = batch[field]
        # The engine: u8 -> v * (1 / (255 std)) + (-mean / std), in float; f32 -> (v - mean) / std.
        c = x.shape[-1]
        key = (c, x.dtype == torch.uint8, x.device)
        if key not in coefficients:
            if len(mean) not in (1, c) or len(std) not in (1, c):
                raise ValueError(f"normalize on the device: mean/std have {len(mean)}/{len(std)} "
                                 f"values but {field!r} has {c} channels")
            m = torch.tensor(mean if len(mean) == c else mean * c, dtype=torch.float64)
            s = torch.tensor(std if len(std) == c else std * c, dtype=torch.float64)
            scale = 1.0 / (255.0 * s) if key[1] else 1.0 / s
            coefficients[key] = (scale.to(torch.float32).to(x.device),
                                 (-m / s).to(torch.float32).to(x.device))
        scale, shift = coefficients[key]
        y = x.to(torch.float32) * scale + shift
        if chw:
            y = y.movedim(-1, -3).contiguous()
        batch[field] = y.to(torch.float16) if half else y
        return batch
    return apply


def _cast(torch, args):
    field = args.get("field", "image")
    to = args["dtype"]

    def apply(batch):
        x = batch[field]
        dtype = _torch_dtype(torch, to)
        if to in _FLOAT:
            batch[field] = x.to(dtype)
            return batch
        info = torch.iinfo(dtype)
        if x.is_floating_point():
            # Floats to integers truncate toward zero and saturate; NaN becomes 0.
            x = torch.nan_to_num(x.to(torch.float64), nan=0.0, posinf=info.max, neginf=info.min)
            x = x.clamp(info.min, info.max).trunc()
        else:
            x = x.to(torch.int64).clamp(info.min, info.max)
        batch[field] = x.to(dtype)
        return batch
    return apply


# The ops that may run on the device: deterministic and element-wise (a random op's draws
# come from the engine's per-sample generator, which torch does not reproduce).
SUPPORTED = {"normalize": _normalize, "cast": _cast}


def split_tail(spec, count):
    """(engine spec without its last `count` ops, [(name, args)] of those ops) for a
    sluice.Spec; ValueError naming the op or the reason when they cannot run on the device."""
    from ._spec import Spec
    if not isinstance(count, int) or count < 0:
        raise ValueError(f"device_ops: expected a number of ops (>= 0), got {count!r}")
    full = Spec._from_canonical(spec.to_json()).to_dict()  # every argument written out
    ops = full.get("ops", [])
    if count > len(ops):
        raise ValueError(f"device_ops: {count} ops asked for, but the pipeline has {len(ops)}")
    if count == 0:
        return spec, []
    if full.get("batch", {}).get("padded"):
        raise ValueError("device_ops: not with padded_batch (an op on the device would also "
                         "change the padding)")
    tail = []
    for position in range(len(ops) - count, len(ops)):
        entry = ops[position]
        name, args = (entry, {}) if isinstance(entry, str) else next(iter(entry.items()))
        if name not in SUPPORTED:
            raise ValueError(
                f"device_ops: ops[{position}].{name} cannot run on the device (supported: "
                f"{', '.join(sorted(SUPPORTED))}); give a smaller device_ops")
        tail.append((name, dict(args or {})))
    head = spec.to_dict()
    head["ops"] = head["ops"][:len(ops) - count]
    return Spec(head), tail


def build(torch, tail):
    """The functions applying `tail` to a batch dict of torch tensors, in order."""
    return [SUPPORTED[name](torch, args) for name, args in tail]
