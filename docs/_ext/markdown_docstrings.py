"""jcaps' docstrings are Google style with Markdown inside (`code`, |x| norms, indented code and
diagrams); autodoc reads them as reStructuredText. After napoleon has turned the Google sections
into fields, this rewrites the rest into the reST that shows the same thing:

- a block indented under a paragraph, after a blank line (Markdown's code block), becomes a
  literal block;
- `code` becomes ``code``, and | and a stray * outside code are escaped.

Fields (`:param x:`), directives, doctests and reST roles are left as they are.
"""

from __future__ import annotations

import re

_CODE = re.compile(r"(?<![`:\w])`([^`]+)`(?![`_])")
_STRAY_STAR = re.compile(r"(?<![*\w])\*(?=[^*\s])")
_DIRECTIVE = re.compile(r"^\s*(\.\. |:[\w\\*][^:]*:(\s|$))")


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip(" "))


def _inline(text: str) -> str:
    """Markdown's inline code and the characters reST reads as markup, in reST."""
    parts = re.split(r"(``.+?``|:\w+:`[^`]+`)", _CODE.sub(r"``\1``", text))
    for i in range(0, len(parts), 2):
        # Outside code: | starts a substitution and a lone * emphasis in reST; ** stays bold.
        pieces = re.split(r"((?<![*\w])\*[^*\s](?:[^*]*[^*\s])?\*(?![*\w]))", parts[i].replace("|", r"\|"))
        parts[i] = "".join(p if k % 2 else _STRAY_STAR.sub(r"\\*", p) for k, p in enumerate(pieces))
        if i and parts[i][:1].isalnum():
            parts[i] = "\\ " + parts[i]  # ``DataError``s: reST needs an escaped space there
    return "".join(parts)


def _continuation(line: str) -> int | None:
    """Where the continuation lines of the paragraph `line` opens belong (None: where its
    second line is, as napoleon aligns a field's lines)."""
    stripped = line.lstrip(" ")
    item = re.match(r"([-*+]|\d+\.) ", stripped)
    if item:
        return _indent(line) + item.end()
    return None if stripped.startswith(":") else _indent(line)


def markdown_to_rest(lines: list[str]) -> list[str]:
    out: list[str] = []
    literal_indent = None  # the indentation of the literal block being copied, if any
    shift = ""  # added to a literal block's lines where it is a field's body
    doctest = False  # inside a doctest block (up to the next blank line)
    base = 0  # the indentation of the paragraphs around: deeper after a blank line is code
    cont = None  # the indentation of the current paragraph's continuation lines
    kind = None  # the current paragraph: None (after a blank line), "text", "item" or "field"
    for line in lines:
        stripped = line.strip()
        if literal_indent is not None:
            if not stripped or _indent(line) >= literal_indent:
                out.append(shift + line if stripped else line)
                continue
            literal_indent = None
        if not stripped:
            doctest, kind = False, None
            out.append(line)
            continue
        indent = _indent(line)
        if doctest or stripped.startswith(">>>"):
            doctest = True
            out.append(line)
            continue
        if stripped.startswith(".. "):
            base, kind = indent, None
            out.append(line)
            continue
        item = re.match(r"([-*+]|\d+\.) ", stripped)
        new_kind = "field" if _DIRECTIVE.match(line) else "item" if item else "text"
        if kind is not None and new_kind == "text":
            if cont is None:
                cont = indent
            if indent >= cont or kind != "item":
                # Markdown reads a deeper line as more of the paragraph; reST as a block quote.
                out.append(" " * cont + _inline(stripped))
                continue
            out.append("")  # text again after a list, without a blank line: reST needs one
        elif kind == "text" and new_kind == "item":
            out.append("")  # a list right under a paragraph: reST needs a blank line before it
        elif kind is None and new_kind == "text" and indent > base:
            # Markdown's indented code block: a literal block in reST (unless a :: opened it).
            text_before = [l for l in out if l.strip()]
            shift = ""
            if text_before and _DIRECTIVE.match(text_before[-1]):  # the body of a field
                out.extend([" " * indent + "::", ""])
                shift = "  "
            elif not (text_before and text_before[-1].rstrip().endswith("::")):
                out.extend(["::", ""])
            literal_indent = indent
            out.append(shift + line)
            continue
        if new_kind != "item":
            base = indent
        kind, cont = new_kind, _continuation(line)
        head = item.group(0) if item else ""
        out.append(line[:indent] + head + _inline(stripped[len(head):]))
    return out


def _process(app, what, name, obj, options, lines):
    lines[:] = markdown_to_rest(lines)


def _summary_keeping_literals(extract):
    """autosummary's first-sentence cut, which ends a sentence at any ". ", never inside ``code``."""
    placeholder = "\x00"

    def protected(doc: list[str], document) -> str:
        hide = lambda m: m.group(0).replace(". ", "." + placeholder)  # noqa: E731
        summary = extract([re.sub(r"``.+?``", hide, line) for line in doc], document)
        return summary.replace(placeholder, " ")

    return protected


def setup(app):
    from sphinx.ext import autosummary

    autosummary.extract_summary = _summary_keeping_literals(autosummary.extract_summary)
    # After napoleon (priority 500), which reads the Google sections as written.
    app.connect("autodoc-process-docstring", _process, priority=600)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
