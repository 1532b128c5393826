"""The CLI reference: every command and option of `perdure`, from the typer app. No side
effects.

Duck-typed over click's objects: typer 0.29 carries its own copy of click (`typer._click`),
older typers use click itself; both have the attributes read here.
"""

from __future__ import annotations

import re
from typing import Any

from perdure.docgen.text import cell


def render() -> str:
    import typer

    from perdure.cli.main import app

    root = typer.main.get_command(app)
    out: list[str] = []
    _command(out, root, root.context_class(root, info_name="perdure"), "perdure")
    return "\n".join(out)


def _command(out: list[str], cmd: Any, ctx: Any, path: str) -> None:
    if getattr(cmd, "hidden", False):
        return
    usage = " ".join(cmd.collect_usage_pieces(ctx))
    usage = re.sub(r"\{(\w+)\}", lambda m: m.group(1).upper(), usage)  # typer 0.29's {spec}
    out += [f"## `{path}`", "", _help(cmd), "", "```text", f"{path} {usage}", "```", ""]
    params = [p for p in cmd.params if not getattr(p, "hidden", False)]
    if params:
        out += ["| argument or option | type | default | description |",
                "| --- | --- | --- | --- |"]
        out += [_param_row(p, ctx) for p in params]
        out.append("")
    if hasattr(cmd, "list_commands"):
        for name in cmd.list_commands(ctx):
            sub = cmd.get_command(ctx, name)
            if sub is not None:
                _command(out, sub, sub.context_class(sub, info_name=name, parent=ctx),
                         f"{path} {name}")


def _help(cmd: Any) -> str:
    text = (cmd.help or cmd.short_help or "").strip()
    return " ".join(text.split()) or "(no help)"


def _param_row(p: Any, ctx: Any) -> str:
    if p.param_type_name == "option":
        names = ", ".join(f"`{n}`" for n in [*p.opts, *p.secondary_opts])
        desc = p.help or ""
        if p.envvar:
            desc += f" (env: `{p.envvar}`)"
    else:
        names = f"`{(p.name or '').upper()}`"
        desc = "" if p.required else "optional"
    return f"| {names} | {cell(_type(p, ctx))} | {cell(_default(p))} | {cell(desc)} |"


def _type(p: Any, ctx: Any) -> str:
    if getattr(p, "is_flag", False):
        return "flag"
    if hasattr(p, "type") and hasattr(p.type, "name"):
        text = str(p.type.name)
    else:
        text = str(p.display_type(ctx)).strip("<>")
    return text + (", repeatable" if getattr(p, "multiple", False) else "")


def _default(p: Any) -> str:
    if p.required:
        return "required"
    value = p.default
    if value is None or value is False or value == () or value == []:
        return ""
    if isinstance(value, (list, tuple)):
        return ", ".join(f"`{v}`" for v in value)
    return f"`{value}`"
