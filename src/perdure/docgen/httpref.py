"""The HTTP API reference, from the OpenAPI document `perdure serve` serves at /openapi.json.
No side effects (the app is built over a state dir that is never opened)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from perdure.docgen.text import cell


def schema() -> dict[str, Any]:
    from perdure.core.clusterspec import default_cluster
    from perdure.serve.app import create_app
    from perdure.serve.auth import Auth
    from perdure.serve.context import ServeContext

    ctx = ServeContext(Path("/nonexistent"), default_cluster(1), Auth("x" * 32), Path("/"))
    return create_app(ctx).openapi()


def render() -> str:
    doc = schema()
    out = [cell(doc["info"].get("description", "")), ""]
    out += ["| method and path | what it does |", "| --- | --- |"]
    ops = [(path, method, op) for path, item in doc["paths"].items()
           for method, op in item.items()]
    out += [f"| [`{m.upper()} {p}`](#{_anchor(m, p)}) | {cell(op.get('summary', ''))} |"
            for p, m, op in ops]
    out.append("")
    for path, method, op in ops:
        out += _operation(path, method, op)
    return "\n".join(out)


def _anchor(method: str, path: str) -> str:
    return f"{method}-{path}".lower().replace("/", "-").replace("{", "").replace("}", "")


def _operation(path: str, method: str, op: dict[str, Any]) -> list[str]:
    out = [f"### `{method.upper()} {path}` {{#{_anchor(method, path)}}}", "",
           cell(op.get("summary", ""))]
    if op.get("description"):
        out += ["", op["description"].strip()]
    out.append("")
    params = op.get("parameters", [])
    if params:
        out += ["| parameter | in | type | required | description |",
                "| --- | --- | --- | --- | --- |"]
        out += [f"| `{p['name']}` | {p['in']} | {cell(_type(p.get('schema', {})))} | "
                f"{'yes' if p.get('required') else 'no'} | "
                f"{cell(p.get('description') or p.get('schema', {}).get('description', ''))} |"
                for p in params]
        out.append("")
    body = op.get("requestBody")
    if body:
        kinds = ", ".join(f"`{k}`" for k in body.get("content", {}))
        out += [f"Request body: {kinds}. {cell(body.get('description', ''))}".rstrip(), ""]
    responses = op.get("responses", {})
    out.append("Responses: " + "; ".join(
        f"{code} {cell(r.get('description', ''))}" for code, r in responses.items()) + ".")
    out.append("")
    return out


def _type(s: dict[str, Any]) -> str:
    if "anyOf" in s:
        return " \\| ".join(_type(x) for x in s["anyOf"])
    if "enum" in s:
        return " \\| ".join(str(v) for v in s["enum"])
    kind = str(s.get("type", s.get("$ref", "").rsplit("/", 1)[-1] or "any"))
    bounds = [f"{sign} {s[key]}" for key, sign in
              (("minimum", "≥"), ("maximum", "≤"), ("minLength", "length ≥"),
               ("maxLength", "length ≤")) if key in s]
    if "default" in s:
        bounds.append(f"default {s['default']}")
    return kind + (f" ({', '.join(bounds)})" if bounds else "")
