"""The pipeline builder: a Python spelling of the pipeline spec (docs/SPEC.md).

    spec = (sluice.files("data/**/*.jpg", label="parent_dir", shuffle=True, seed=42)
            .map("read_file").map("decode_jpeg")
            .map("random_resized_crop", size=224)
            .batch(64))

Every method returns a new Spec (a Spec is immutable). Op names and arguments are checked
against the C++ op schemas when `.map()` is called, with the same messages a spec file gets
(`ops[2].random_resized_crop: size: expected 2 ints, got 3`); everything else is checked by
the C++ spec parser when the spec is used or converted.
"""
import json
import re

from . import _core

_PREFIX = re.compile(r"^spec:\d+:\d+: ")


def _clean(error):
    """The C++ message of a builder-made spec, without the position in its JSON text."""
    return ValueError(_PREFIX.sub("", str(error)))


def _canonical(text, filename="spec"):
    try:
        return _core.parse_spec(text, filename)
    except ValueError as e:
        raise (_clean(e) if filename == "spec" else e) from None


class Spec:
    """A pipeline spec. Build one with `sluice.files(...)` / `sluice.manifest(...)`, or read
    one with `sluice.load(path)` / `sluice.parse(text)`."""

    __slots__ = ("_d",)

    def __init__(self, d):
        self._d = d

    # -- construction ---------------------------------------------------------------------
    @classmethod
    def _from_canonical(cls, text):
        d = json.loads(text)
        return cls(d)

    def _with(self, **changes):
        d = json.loads(json.dumps(self._d))
        d.update(changes)
        return Spec(d)

    def map(self, op, **args):
        """Appends an op. `op` is a name ("decode_jpeg") or an op of `sluice.ops`; its
        arguments are keywords. Raises ValueError naming the op and argument when the
        op is unknown, an argument is wrong, or the op does not fit the fields before it."""
        name = getattr(op, "op_name", op)
        if not isinstance(name, str):
            raise TypeError(f"map() takes an op name or a sluice.ops op, got {op!r}")
        ops = [self._op_entry(o) for o in self._d.get("ops", [])]
        ops.append((name, dict(args)))
        source = self._d.get("source", {})
        _core.check_ops(ops, source.get("label", "none") or "none", int(source.get("seed", 0)))
        return self._with(ops=list(self._d.get("ops", [])) + [{name: dict(args)}])

    @staticmethod
    def _op_entry(entry):
        if isinstance(entry, str):
            return (entry, {})
        (name, args), = entry.items()
        return (name, dict(args or {}))

    def batch(self, size, drop_remainder=False):
        """Stacks `size` consecutive samples into one batch."""
        d = self._with(batch={"size": size, "drop_remainder": drop_remainder})
        d._d.pop("padded_batch", None)
        return d

    def padded_batch(self, size, drop_remainder=False, padding_value=0, padding_values=None):
        """Batches samples of varying shapes, padding ragged dimensions."""
        pb = {"size": size, "drop_remainder": drop_remainder, "padding_value": padding_value,
              "padding_values": dict(padding_values or {})}
        d = self._with(padded_batch=pb)
        d._d.pop("batch", None)
        return d

    def unbatch(self):
        """Removes the batching (the pipeline yields single samples)."""
        d = self._with()
        d._d.pop("batch", None)
        d._d.pop("padded_batch", None)
        d._d["batch"] = None
        return d

    def shuffle(self, buffer_size):
        """A shuffle buffer of `buffer_size` samples after the ops (in the trainer)."""
        return self._with(shuffle_buffer=buffer_size)

    def prefetch(self, n):
        """Batches prepared ahead of the consumer."""
        return self._with(prefetch=n)

    def repeat(self, epochs=-1):
        """Passes over the data (-1: forever)."""
        return self._with(epochs=epochs)

    def take(self, n):
        """Uses only the first `n` files of the resolved file list."""
        return self._with(take=n)

    def options(self, deterministic=None, threads=None, on_error=None):
        """Execution options: deterministic order, threads ("auto" or an int), on_error
        ("fail" or "skip")."""
        o = dict(self._d.get("options") or {})
        if deterministic is not None:
            o["deterministic"] = deterministic
        if threads is not None:
            o["threads"] = threads
        if on_error is not None:
            o["on_error"] = on_error
        return self._with(options=o)

    # -- conversion -----------------------------------------------------------------------
    def to_dict(self):
        """The spec as plain Python data (what YAML/JSON spell)."""
        return json.loads(json.dumps(self._d))

    def to_json(self):
        """Canonical JSON (sorted keys, defaults written out); validates the spec."""
        return _canonical(json.dumps(self._d))

    def to_yaml(self):
        """A readable YAML spelling that `sluice.load` / `sluice run` read back."""
        return _core.spec_to_yaml(self.to_json())

    def save(self, path):
        """Writes `to_yaml()` to `path`."""
        with open(path, "w", encoding="utf-8") as f:
            f.write(self.to_yaml())

    def fingerprint(self):
        """16 hex digits identifying the canonical form (as the C++ and CLI compute it)."""
        return _core.spec_fingerprint(self.to_json())

    def validate(self):
        """Checks the whole spec; raises ValueError with the C++ message. Returns self."""
        self.to_json()
        return self

    @property
    def ops(self):
        """The ops as [(name, args)]."""
        return [self._op_entry(o) for o in self._d.get("ops", [])]

    def __eq__(self, other):
        return isinstance(other, Spec) and self.to_json() == other.to_json()

    def __hash__(self):
        return hash(self.to_json())

    def __repr__(self):
        return f"sluice.Spec({json.dumps(self._d)})"


def _source(source, even):
    if even is not None:
        source["even"] = even
    return Spec({"source": source})


def files(patterns, label=None, shuffle=False, seed=0, even=None):
    """A spec reading `patterns` (a glob such as "data/**/*.jpg", or a list of them).
    `label="parent_dir"` adds a `label` field: the index of the file's folder name among the
    sorted folder names. `shuffle` visits the files in a new seeded order every epoch.
    `even` ("drop", the default, or "pad"): how the ranks of a sharded loader get equal
    counts (docs/distributed.md)."""
    if isinstance(patterns, (list, tuple)):
        patterns = [str(p) for p in patterns]
    else:
        patterns = str(patterns)
    return _source({"files": patterns, "label": label or "none", "shuffle": shuffle,
                    "seed": seed}, even)


def manifest(path, label=None, shuffle=False, seed=0, even=None):
    """A spec reading the files listed in `path` (one per line)."""
    return _source({"manifest": str(path), "label": label or "none", "shuffle": shuffle,
                    "seed": seed}, even)


def shards(patterns, data, label=None, shuffle=False, seed=0, even=None):
    """A spec reading WebDataset tar shards (docs/shards.md): `patterns` is a path, URL,
    glob or brace range ("train-{000000..000127}.tar"), or a list of them; `data` the member
    field read_file reads ("jpg", "wav"); `label` a member ("cls") or "json:KEY".
    `shuffle`: False, True (a new seeded order of samples every epoch) or "shards" (a new
    order of shards, each shard's samples together; add `.shuffle(N)` for a buffer)."""
    if isinstance(patterns, (list, tuple)):
        patterns = [str(p) for p in patterns]
    else:
        patterns = str(patterns)
    return _source({"shards": patterns, "data": data, "label": label or "none",
                    "shuffle": shuffle, "seed": seed}, even)


def load(path):
    """Reads a YAML or JSON spec file (ValueError with file:line:column on a bad spec;
    FileNotFoundError if it cannot be read)."""
    return Spec._from_canonical(_core.load_spec(str(path)))


def parse(text, filename="<string>"):
    """Parses YAML or JSON spec text."""
    return Spec._from_canonical(_core.parse_spec(text, filename))


def as_spec(spec):
    """A Spec from a Spec, a dict (the spec's structure) or a path to a spec file."""
    if isinstance(spec, Spec):
        return spec
    if isinstance(spec, dict):
        return Spec._from_canonical(_canonical(json.dumps(spec)))
    if isinstance(spec, str) or hasattr(spec, "__fspath__"):
        return load(spec)
    raise TypeError(f"expected a sluice.Spec, a dict or a spec file path, got {type(spec).__name__}")
