"""The README's component reference: for every ComponentResource, its inputs (the fields
of its frozen args dataclass) and its outputs (what it registers), in tables.

Inputs come from the code itself; outputs from what each component registered during the
offline previews of every stack, so the tables cannot drift from the program. Regenerate
with `mlplat docs --readme README.md`; a test fails when the README is out of date.
"""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import pkgutil
import re
import typing
from collections.abc import Iterable

import pulumi

import components
from infra.preview.report import PreviewResult

START = "<!-- component-reference:start -->"
END = "<!-- component-reference:end -->"


def component_classes() -> dict[str, type[pulumi.ComponentResource]]:
    """Type token (`mlplat:storage:RegionPinnedBucket`) -> class, for every component."""
    found: dict[str, type[pulumi.ComponentResource]] = {}
    for module_info in pkgutil.walk_packages(components.__path__, "components."):
        module = importlib.import_module(module_info.name)
        for _, cls in inspect.getmembers(module, inspect.isclass):
            if issubclass(cls, pulumi.ComponentResource) and cls.__module__ == module.__name__:
                token = _token(cls)
                if token:
                    found[token] = cls
    return found


def _token(cls: type) -> str | None:
    match = re.search(r'super\(\).__init__\(\s*"([^"]+)"', inspect.getsource(cls))
    return match.group(1) if match else None


def args_dataclass(cls: type) -> type | None:
    hints = typing.get_type_hints(cls.__init__, vars(inspect.getmodule(cls)))
    args = hints.get("args")
    return args if dataclasses.is_dataclass(args) else None


def _type_name(annotation: object) -> str:
    """The annotation as written (modules use postponed annotations, so it is a string)."""
    text = annotation if isinstance(annotation, str) else getattr(annotation, "__name__", str(annotation))
    return text.replace("|", "\\|")


def _default(field: dataclasses.Field) -> str:
    if field.default is not dataclasses.MISSING:
        return f"`{field.default!r}`"
    if field.default_factory is not dataclasses.MISSING:  # type: ignore[misc]
        return f"`{field.default_factory()!r}`"  # type: ignore[misc]
    return "required"


def _first_line(cls: type) -> str:
    """The class's own docstring's first paragraph (not the inherited one)."""
    doc = inspect.cleandoc(cls.__dict__.get("__doc__") or "")
    return " ".join(doc.split("\n\n")[0].split())


def _source_path(cls: type) -> str:
    path = inspect.getsourcefile(cls) or ""
    return path[path.rfind("components/"):] if "components/" in path else path


def reference(results: Iterable[PreviewResult]) -> str:
    outputs: dict[str, set[str]] = {}
    for result in results:
        for reg in result.registrations:
            if not reg.custom and reg.urn in result.component_outputs:
                outputs.setdefault(reg.type, set()).update(result.component_outputs[reg.urn])
    lines = [START, ""]
    for token, cls in sorted(component_classes().items(), key=lambda kv: kv[0]):
        args = args_dataclass(cls)
        lines += [f"### `{cls.__name__}` (`{_source_path(cls)}`)", ""]
        if _first_line(cls):
            lines += [_first_line(cls), ""]
        lines += ["| input | type | default |", "|---|---|---|"]
        if args is None:
            lines.append("| (none) | | |")
        else:
            for field in dataclasses.fields(args):
                lines.append(f"| `{field.name}` | `{_type_name(field.type)}` | {_default(field)} |")
        names = sorted(outputs.get(token, set()))
        lines += ["", "| outputs |", "|---|"]
        lines.append("| " + (", ".join(f"`{n}`" for n in names) if names else "(none registered)") + " |")
        lines.append("")
    lines.append(END)
    return "\n".join(lines)


def update_readme(text: str, results: Iterable[PreviewResult]) -> str:
    """The README with its component reference replaced by a fresh one."""
    if START not in text or END not in text:
        raise ValueError(f"README has no {START} ... {END} section")
    head, rest = text.split(START, 1)
    _, tail = rest.split(END, 1)
    return head + reference(results) + tail
