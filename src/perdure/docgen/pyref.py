"""The Python API reference: `perdure`, `perdure.runtime` and `perdure.integrations`, from
their exports and docstrings. No side effects (it imports what it documents: torch, and the
frameworks of the integrations).
"""

from __future__ import annotations

import importlib
import inspect
import re
from types import ModuleType
from typing import Any

from perdure.docgen.text import no_tags

# each documents its `__all__`; a submodule it exports (`perdure.runtime.goodput`) documents
# its own
MODULES = ("perdure", "perdure.runtime", "perdure.integrations.transformers",
           "perdure.integrations.lightning")


class _Text:
    """An annotation shown as written (`int`, not `'int'`: the modules postpone them)."""

    def __init__(self, text: str) -> None:
        self.text = text

    def __repr__(self) -> str:
        return self.text


def render() -> str:
    out: list[str] = []
    for name in MODULES:
        module = importlib.import_module(name)
        out += [f"## `{name}`", "", _first_paragraph(module), ""]
        for export in _exports(module):
            obj = getattr(module, export)
            if isinstance(obj, ModuleType):
                out += _submodule(f"{name}.{export}", obj)
            else:
                out += _object(f"{name}.{export}", obj, level=3)
    return "\n".join(out)


def _exports(module: ModuleType) -> list[str]:
    names = getattr(module, "__all__", None)
    if names is None:
        names = [n for n, v in vars(module).items() if not n.startswith("_")
                 and getattr(v, "__module__", None) == module.__name__
                 and (inspect.isfunction(v) or inspect.isclass(v))]
    return sorted(n for n in names if not n.startswith("__"))


def _submodule(path: str, module: ModuleType) -> list[str]:
    out = [f"### `{path}`", "", _doc(module), ""]
    for export in _exports(module):
        out += _object(f"{path}.{export}", getattr(module, export), level=4)
    return out


def _object(path: str, obj: Any, level: int) -> list[str]:
    head = "#" * level
    if inspect.isclass(obj):
        kind = "exception" if issubclass(obj, BaseException) else "class"
        out = [f"{head} `{path}`", "", f"*{kind}*", "", _signature(path, obj), "",
               _doc(obj), ""]
        for name, member in _members(obj):
            out += [f"- **`{name}{_sig(member)}`**: {_first_paragraph(member)}"]
        return [*out, ""]
    if callable(obj):
        return [f"{head} `{path}`", "", _signature(path, obj), "", _doc(obj), ""]
    return [f"{head} `{path}`", "", f"`{path} = {_clean(repr(obj))}`", ""]


def _members(cls: type) -> list[tuple[str, Any]]:
    """The public methods and properties `cls` itself defines (not a framework base's)."""
    out = []
    for name, member in vars(cls).items():
        if name.startswith("_") or not (inspect.isfunction(member) or isinstance(
                member, (property, classmethod, staticmethod))):
            continue
        if not _first_paragraph(member):
            continue  # a framework hook overridden without a word of its own
        out.append((name, member))
    return out


def _signature(path: str, obj: Any) -> str:
    return f"```text\n{path.rsplit('.', 1)[-1]}{_sig(obj)}\n```"


def _sig(obj: Any) -> str:
    if isinstance(obj, property):
        return ""
    target = getattr(obj, "__func__", obj)
    try:
        sig = inspect.signature(target)
    except (TypeError, ValueError):
        return "(...)"
    sig = sig.replace(
        parameters=[p.replace(annotation=_plain(p.annotation)) for p in sig.parameters.values()],
        return_annotation=_plain(sig.return_annotation))
    text = str(sig)
    text = re.sub(r"\(self,? ?", "(", text)
    return _clean(text)


def _plain(annotation: Any) -> Any:
    return _Text(annotation) if isinstance(annotation, str) else annotation


def _clean(text: str) -> str:
    return re.sub(r" at 0x[0-9a-f]+", "", text)


def _own_doc(obj: Any) -> str:
    """The object's own docstring, never one inherited from a framework's base class."""
    target = obj.fget if isinstance(obj, property) else getattr(obj, "__func__", obj)
    doc = target.__doc__ if isinstance(getattr(target, "__doc__", None), str) else ""
    return inspect.cleandoc(doc) if doc else ""


def _doc(obj: Any) -> str:
    lines = (_own_doc(obj) or "(no docstring)").splitlines()
    return "\n".join(ln if ln.startswith("    ") else no_tags(ln) for ln in lines)


def _first_paragraph(obj: Any) -> str:
    return " ".join(_own_doc(obj).split("\n\n", 1)[0].split())
