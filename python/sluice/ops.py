"""The operators Sluice knows, one attribute per op, documented from the C++ op schemas
(the same schemas the spec validator and `sluice ops` read).

Use an op by name or through this module:

    spec.map("random_flip", p=0.3)
    spec.map(sluice.ops.random_flip, p=0.3)

`help(sluice.ops.random_resized_crop)` shows its arguments, types, defaults and bounds.
"""
import inspect
import sys

from . import _core

_TYPES = {"int": "int", "float": "float", "bool": "bool", "string": "str",
          "int list": "list[int]", "float list": "list[float]"}


class Op:
    """One operator: its name, documentation and argument schema. Calling it returns
    `(name, args)` after checking the argument names."""

    def __init__(self, schema):
        self.op_name = schema["name"]
        self.schema = schema
        self.__name__ = schema["name"]
        self.__qualname__ = schema["name"]
        self.__module__ = __name__
        self.__doc__ = _doc(schema)
        params = []
        for a in schema["args"]:
            default = inspect.Parameter.empty if a["required"] else a["default"]
            params.append(inspect.Parameter(a["name"], inspect.Parameter.KEYWORD_ONLY,
                                            default=default))
        self.__signature__ = inspect.Signature(params)

    @property
    def args(self):
        """{argument name: its schema (type, default, doc, bounds, choices)}"""
        return {a["name"]: a for a in self.schema["args"]}

    def __call__(self, **args):
        unknown = sorted(set(args) - set(self.args))
        if unknown:
            raise ValueError(f"{self.op_name}: unknown argument '{unknown[0]}' "
                             f"(known: {', '.join(self.args) or 'none'})")
        return (self.op_name, args)

    def __repr__(self):
        return f"<sluice op {self.op_name}>"


def _doc(schema):
    lines = [schema["doc"].strip() or schema["name"]]
    if schema["random"]:
        lines += ["", "Random: its draws depend on the sample's identity (seed, epoch, index, "
                      "op position), so a sample gets the same result wherever it runs."]
    if schema["args"]:
        lines += ["", "Arguments:"]
        for a in schema["args"]:
            t = a["type"]
            t = _TYPES.get(t, t)
            if a["list_length"] > 0 and "list" in t:
                t = f"{t} of length {a['list_length']} (a single number is broadcast)"
            extra = []
            if a["required"]:
                extra.append("required")
            else:
                extra.append(f"default {a['default']!r}")
            if a["choices"]:
                extra.append("one of " + ", ".join(a["choices"]))
            if a["min"] is not None:
                extra.append(f">= {a['min']:g}")
            if a["max"] is not None:
                extra.append(f"<= {a['max']:g}")
            lines.append(f"    {a['name']} ({t}; {'; '.join(extra)})")
            if a["doc"]:
                lines.append(f"        {a['doc']}")
    else:
        lines += ["", "No arguments."]
    return "\n".join(lines)


def _populate():
    module = sys.modules[__name__]
    names = []
    for schema in _core.op_schemas():
        setattr(module, schema["name"], Op(schema))
        names.append(schema["name"])
    summary = "\n".join(f"    {n}: {getattr(module, n).__doc__.splitlines()[0]}" for n in names)
    module.__doc__ = (__doc__ or "") + "\nOps:\n" + summary + "\n"
    return names


__all__ = _populate()


def names():
    """The op names, sorted."""
    return list(__all__)
