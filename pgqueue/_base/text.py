"""Plain-text tables for the command line, drawn like ``psql`` draws them."""

from __future__ import annotations

from collections.abc import Sequence


def psql_table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """Headers centred, numbers right-aligned, text left-aligned, ``-+-`` rule: like psql."""
    widths = [max([len(h)] + [len(r[i]) for r in rows]) for i, h in enumerate(headers)]
    head = " " + " | ".join(h.center(w) for h, w in zip(headers, widths, strict=True))
    rule = "+".join("-" * (w + 2) for w in widths)
    body = [
        " " + " | ".join(_align(c, w) for c, w in zip(r, widths, strict=True)).rstrip()
        for r in rows
    ]
    return "\n".join([head.rstrip(), rule, *body])


def _align(cell: str, width: int) -> str:
    return cell.rjust(width) if cell.replace(".", "", 1).isdigit() else cell.ljust(width)
