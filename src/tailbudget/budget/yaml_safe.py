"""YAML for budget and actions files: safe, bounded, strict about keys, `1e3` a number.

PyYAML's `safe_load` constructs no objects, but it still expands aliases: a
"billion laughs" file of a few hundred bytes is a structure of billions of
nodes by reference, and anything that walks it (validation, an error message
quoting it) runs out of memory. It also lets a duplicate key silently replace
the first, and (YAML 1.1) reads `1e3` as a string. `load_yaml` composes the
document, refuses it when its expanded size passes `MAX_NODES`, refuses
duplicate keys naming the line, and reads exponent numbers without a dot as
floats, as YAML 1.2 and JSON do.
"""

from __future__ import annotations

import re
from typing import Any

import yaml

__all__ = ["MAX_NODES", "YamlError", "load_yaml"]

MAX_NODES = 100_000
"""Most nodes a document may hold with every alias expanded (a budget has a few hundred)."""


class YamlError(ValueError):
    """The text is not acceptable YAML; the message is one line (with the line number)."""


_EXPONENT = re.compile(r"^[-+]?(?:[0-9][0-9_]*(?:\.[0-9_]*)?|\.[0-9_]+)[eE][-+]?[0-9]+$")


class _Loader(yaml.SafeLoader):
    """SafeLoader with duplicate keys refused and `1e3` read as a float."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: dict[tuple[str, str], int] = {}
        for key_node, _ in node.value:
            if not isinstance(key_node, yaml.ScalarNode):
                continue
            key, line = (key_node.tag, key_node.value), key_node.start_mark.line + 1
            if key in seen:
                raise YamlError(
                    f"duplicate key {key_node.value!r} at line {line} (first at line "
                    f"{seen[key]}); each key may appear once"
                )
            seen[key] = line
        return super().construct_mapping(node, deep=deep)


_Loader.add_implicit_resolver("tag:yaml.org,2002:float", _EXPONENT, list("-+0123456789."))


def _expanded_size(root: yaml.Node) -> int:
    """Nodes with every alias expanded, computed once per distinct node (no expansion)."""
    sizes: dict[int, int] = {}
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    while stack:
        node, children_done = stack.pop()
        if id(node) in sizes:
            continue
        kids: list[yaml.Node] = []
        if isinstance(node, yaml.SequenceNode):
            kids = list(node.value)
        elif isinstance(node, yaml.MappingNode):
            kids = [n for pair in node.value for n in pair]
        if children_done or not kids:
            sizes[id(node)] = 1 + sum(sizes.get(id(k), 1) for k in kids)
            if sizes[id(node)] > MAX_NODES:
                return sizes[id(node)]
            continue
        stack.append((node, True))
        stack.extend((k, False) for k in kids if id(k) not in sizes)
    return sizes[id(root)]


def load_yaml(text: str) -> Any:
    """Parse one YAML document safely, or raise YamlError with a one-line reason."""
    loader = _Loader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        size = _expanded_size(node)
        if size > MAX_NODES:
            raise YamlError(
                f"the document expands to more than {MAX_NODES:,} nodes through its aliases "
                "(&anchor / *alias); write the values out instead"
            )
        return loader.construct_document(node)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        raise YamlError(f"not valid YAML{where}: {exc.problem}") from None
    except yaml.YAMLError as exc:
        raise YamlError(f"not valid YAML: {' '.join(str(exc).split())}") from None
    except RecursionError:
        raise YamlError("not valid YAML: nested too deep") from None
    finally:
        loader.dispose()
