"""What PostgreSQL cannot store in a ``text`` value or a ``jsonb`` string, decided in one place.

Two kinds of character: U+0000, which neither type holds, and the surrogates U+D800 to U+DFFF,
which are not characters at all: UTF-8 cannot encode them, so neither the driver nor the server
takes one (PostgreSQL's ``jsonb`` refuses their ``\\udXXX`` escapes too). A ``str`` gets them
from bytes that are not UTF-8 decoded with ``errors="surrogateescape"``, which is what
``os.listdir``, ``sys.argv`` and ``os.environ`` do with such a file name (``"caf\\udce9"``).

:func:`unstorable` is the rule. What pgqueue is given to store (payloads, task arguments,
results, progress, queue, task and key names, headers) is refused by it before any SQL
(:mod:`pgqueue._base.validation`); what pgqueue makes and stores itself (an error's text, a
traceback) goes through :func:`storable`, which writes each such character as its escape.
"""

from __future__ import annotations


def unstorable(text: str) -> str | None:
    """Why PostgreSQL cannot store ``text`` (in a ``text`` column or a ``jsonb`` string), or
    ``None`` when it can: the one rule of every name, key, payload, argument, result, progress,
    error text and traceback pgqueue writes. It names the first such character (as ``U+XXXX``,
    never the character itself) and its index. An ASCII ``str`` costs two tests at C speed, any
    other one an encoding, also in C.
    """
    if "\x00" in text:
        return (
            f"contains the character U+0000 at index {text.index(chr(0))}, which PostgreSQL "
            "cannot store"
        )
    if text.isascii():
        return None
    try:
        text.encode()
    except UnicodeEncodeError as exc:
        return (
            f"not valid Unicode: U+{ord(text[exc.start]):04X} at index {exc.start} is a "
            "surrogate, which PostgreSQL cannot store (bytes that are not UTF-8, decoded with "
            "errors='surrogateescape' as os.listdir does?)"
        )
    return None


def storable(text: str) -> str:
    """``text`` with every character :func:`unstorable` refuses written as its Python escape
    (``\\x00``, ``\\udce9``): for texts pgqueue stores rather than refuses (an error's text,
    a traceback), so nothing of them is dropped. Returns ``text`` itself when it is storable."""
    if unstorable(text) is None:
        return text
    return text.replace("\x00", "\\x00").encode("utf-8", "backslashreplace").decode()


def unstorable_string(value: object) -> str | None:
    """Why a value ``json.dumps`` encodes cannot be stored as ``jsonb``: :func:`unstorable` of
    its first string (a key or a value) PostgreSQL cannot store, with where it is; else ``None``.

    One level at a time, without recursion; called only for a text that has the escapes such a
    string makes (U+0000, a surrogate), once ``json.dumps`` took the value and its depth is known
    to be within :data:`pgqueue._base.validation.MAX_JSON_DEPTH`.
    """
    todo: list[tuple[object, tuple[object, ...]]] = [(value, ())]
    while todo:
        item, path = todo.pop()
        if isinstance(item, str):
            problem = unstorable(item)
            if problem is not None:
                return f"the string at {_path(path)}: {problem}" if path else problem
        elif isinstance(item, dict):
            for key, child in reversed(item.items()):
                if isinstance(key, str) and (problem := unstorable(key)) is not None:
                    return f"the key {_path((*path, key))}: {problem}"
                todo.append((child, (*path, key)))
        elif isinstance(item, (list, tuple)):
            todo.extend((child, (*path, i)) for i, child in reversed(list(enumerate(item))))
    return None


def _path(path: tuple[object, ...]) -> str:
    """Where a value sits in a payload, as Python subscripts (``['files'][2]``): ``repr``
    writes a bad character as its escape, so the message itself is printable."""
    return "".join(f"[{step!r}]" for step in path)
