"""Reading the project's source as the structure tests do."""

from __future__ import annotations

import ast


def keys_read(tree: ast.AST, keys: set[str]) -> list[tuple[int, str]]:
    """(line, key) of every place that reads or writes one of `keys` by its name from anything: `x["key"]`,
    `x.get("key")`, `x.pop("key")`, `x.setdefault("key")`, whatever `x` is called."""
    found = []
    for node in ast.walk(tree):
        key = None
        if isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant):
            key = node.slice.value
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.args:
            if node.func.attr in ("get", "pop", "setdefault") and isinstance(node.args[0], ast.Constant):
                key = node.args[0].value
        if isinstance(key, str) and key in keys:
            found.append((node.lineno, key))
    return found
