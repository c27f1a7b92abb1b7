"""A griffe extension: read gnsqlite's reST-flavoured docstrings as Markdown for mkdocstrings.

The docstrings are written for ``help()`` and Sphinx-style readers: roles such as
``:class:`~gnsqlite.errors.ConfigError```, literal blocks opened by ``::`` and
``>>>`` examples. mkdocstrings renders docstrings as Markdown, where those show
up as stray colons. This extension, run by griffe when it has read a package
(nothing is imported), rewrites each docstring of the package:

* a role becomes an autorefs link, ``optional`` so a target that has no page
  (a private helper, a module outside the reference) stays plain code instead of
  failing the ``--strict`` build; ``~`` keeps only the last name, a leading ``.``
  is relative to the module, a bare name is looked up from the object outwards;
* a paragraph ending in ``text::`` ends in ``text:`` (a lone ``::`` line goes),
  so the indented block after it is Markdown's indented code block;
* a run of ``>>>``/``...`` lines and their output is fenced as ``pycon``.

Loaded by ``mkdocs.yml`` (``extensions: [docs/_griffe_rst.py]``); only the docs
build uses it.
"""

from __future__ import annotations

import re
from typing import Any

import griffe

_ROLE = re.compile(r":(?:class|meth|func|mod|attr|exc|data|obj):`(~?)([^`<>]+?)(\(\))?`")


class RestToMarkdown(griffe.Extension):
    """Rewrite the docstrings of every loaded package (see the module docstring)."""

    def on_package(self, *, pkg: griffe.Module, **kwargs: Any) -> None:
        seen: set[int] = set()
        self._walk(pkg, seen)

    def _walk(self, obj: griffe.Object, seen: set[int]) -> None:
        if id(obj) in seen:
            return
        seen.add(id(obj))
        if obj.docstring is not None:
            obj.docstring.value = convert(obj.docstring.value, obj)
        for member in obj.members.values():
            if not member.is_alias:
                self._walk(member, seen)  # type: ignore[arg-type]


def convert(text: str, obj: griffe.Object) -> str:
    """``text`` (one docstring) with its roles, literal blocks and doctests in Markdown."""
    text = _ROLE.sub(lambda m: _link(m, obj), text)
    return _blocks(text)


def _link(match: re.Match[str], obj: griffe.Object) -> str:
    short, name, call = match.group(1), match.group(2).strip(), match.group(3) or ""
    identifier = _resolve(name, obj)
    title = name.lstrip(".").rsplit(".", 1)[-1] if short else name.lstrip(".")
    return f'<autoref identifier="{identifier}" optional><code>{title}{call}</code></autoref>'


def _resolve(name: str, obj: griffe.Object) -> str:
    """The full dotted path ``name`` most likely means where ``obj``'s docstring uses it."""
    if name.startswith("."):
        module = obj if obj.is_module else obj.module
        base = module.path
        for _ in range(len(name) - len(name.lstrip(".")) - 1):
            base = base.rsplit(".", 1)[0]
        return f"{base}.{name.lstrip('.')}"
    first = name.split(".", 1)[0]
    scope: griffe.Object | None = obj
    while scope is not None:
        if first in scope.members:
            return f"{scope.path}.{name}"
        scope = scope.parent
    return name


def _blocks(text: str) -> str:
    out: list[str] = []
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        stripped = line.strip()
        if stripped.startswith(">>>"):
            indent = line[: len(line) - len(line.lstrip())]
            out.append(f"{indent}```pycon")
            while i < len(lines) and lines[i].strip():
                out.append(lines[i])
                i += 1
            out.append(f"{indent}```")
            continue
        if stripped == "::":
            i += 1
            continue
        if stripped.endswith("::"):
            line = line.rstrip()[:-1]
        out.append(line)
        i += 1
    return "\n".join(out)
