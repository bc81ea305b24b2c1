"""A workflow's graph, laid out on the server and drawn as inline SVG by ``graph.html``.

Pure geometry from :func:`pgqueue.admin.workflow`'s nodes and edges: no script, no library. Each
job is a box in the column of its longest path from the workflow's first jobs (a dependency is
always left of its dependents), the boxes of a column in id order, an arrow from each
dependency to its dependent. A group's members (more than :data:`FOLD_OVER` jobs of one task or
queue with the same dependencies and dependents: a ``group``'s members, a fan-out) are folded
into one box that counts them by state.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from markupsafe import Markup

#: A set of alike jobs larger than this is folded into one box.
FOLD_OVER = 20
#: Box size and gaps in SVG user units.
BOX_W = 168
BOX_H = 46
GAP_X = 56
GAP_Y = 14
MARGIN = 8
#: Characters of a task or queue name a box shows (the whole name is its title).
LABEL_CHARS = 24


@dataclass
class Box:
    """One box: a job, or a folded set of alike jobs (``members`` > 1)."""

    key: int
    label: str
    status: str
    members: list[int]
    counts: list[tuple[str, int]] = field(default_factory=list)
    x: float = 0.0
    y: float = 0.0
    focus: bool = False

    @property
    def folded(self) -> bool:
        return len(self.members) > 1

    @property
    def short_label(self) -> str:
        if len(self.label) <= LABEL_CHARS:
            return self.label
        return self.label[: LABEL_CHARS - 1] + "…"

    @property
    def counts_text(self) -> str:
        return ", ".join(f"{n} {state}" for state, n in self.counts)

    # Its SVG attributes, numbers only, each one value for the template to print where four
    # cost four escapes (a 500-job graph printed 13,000 values: most of its render time).
    @property
    def rect_attrs(self) -> Markup:
        return Markup(f'x="{self.x}" y="{self.y}" width="{BOX_W}" height="{BOX_H}"')

    @property
    def label_at(self) -> Markup:
        return Markup(f'x="{self.x + 8}" y="{self.y + 18}"')

    @property
    def sub_at(self) -> Markup:
        return Markup(f'x="{self.x + 8}" y="{self.y + 36}"')


@dataclass(frozen=True)
class Arrow:
    x1: float
    y1: float
    x2: float
    y2: float


@dataclass(frozen=True)
class Graph:
    boxes: list[Box]
    arrows: list[Arrow]
    width: float
    height: float
    jobs: int
    cut: bool

    @property
    def arrows_svg(self) -> Markup:
        """Every arrow as an SVG ``line``, numbers only, in one value for the template."""
        return Markup("\n").join(
            Markup(
                f'<line class="edge" x1="{a.x1}" y1="{a.y1}" x2="{a.x2}" y2="{a.y2}" '
                'marker-end="url(#arrow)"></line>'
            )
            for a in self.arrows
        )


def layout(
    nodes: Sequence[Mapping[str, Any]], edges: Iterable[tuple[int, int]], focus: int, cut: bool
) -> Graph:
    """The boxes and arrows of a workflow (``nodes`` and ``edges`` as
    :func:`pgqueue.admin.workflow` returns them); ``focus`` is the job whose page links here."""
    edge_list = [(a, b) for a, b in edges]
    deps: dict[int, set[int]] = defaultdict(set)
    dependents: dict[int, set[int]] = defaultdict(set)
    for dep, job in edge_list:
        deps[job].add(dep)
        dependents[dep].add(job)
    alike: dict[tuple[Any, ...], list[Mapping[str, Any]]] = defaultdict(list)
    for node in nodes:
        name = node["task"] or node["queue"]
        key = (name, frozenset(deps[node["id"]]), frozenset(dependents[node["id"]]))
        alike[key].append(node)
    box_of: dict[int, Box] = {}
    boxes: list[Box] = []
    for (name, _, _), members in alike.items():
        groups = [members] if len(members) > FOLD_OVER else [[m] for m in members]
        for group in groups:
            if len(group) == 1:  # most boxes: no count to make
                one = str(group[0]["status"])
                ids, status, counts = [int(group[0]["id"])], one, [(one, 1)]
            else:
                ids = sorted(int(m["id"]) for m in group)
                states = Counter(str(m["status"]) for m in group)
                status, counts = _folded_status(states), sorted(states.items())
            box = Box(ids[0], str(name), status, ids, counts)
            box.focus = focus in ids
            boxes.append(box)
            for i in ids:
                box_of[i] = box
    links = {
        (id(box_of[a]), id(box_of[b])): (box_of[a], box_of[b])
        for a, b in edge_list
        if a in box_of and b in box_of and box_of[a] is not box_of[b]
    }
    column = _columns(boxes, list(links.values()))
    rows: dict[int, int] = defaultdict(int)
    for box in sorted(boxes, key=lambda b: b.key):
        c = column[id(box)]
        box.x = MARGIN + c * (BOX_W + GAP_X)
        box.y = MARGIN + rows[c] * (BOX_H + GAP_Y)
        rows[c] += 1
    arrows = [
        Arrow(a.x + BOX_W, a.y + BOX_H / 2, b.x - 2, b.y + BOX_H / 2) for a, b in links.values()
    ]
    columns = max(column.values(), default=0) + 1
    height = max(rows.values(), default=1)
    return Graph(
        sorted(boxes, key=lambda b: b.key),
        arrows,
        width=2 * MARGIN + columns * BOX_W + (columns - 1) * GAP_X,
        height=2 * MARGIN + height * BOX_H + (height - 1) * GAP_Y,
        jobs=len(nodes),
        cut=cut,
    )


def _folded_status(states: Counter[str]) -> str:
    """The colour of a folded box: the state most of its members are in (ties: by name)."""
    return sorted(states.items(), key=lambda item: (-item[1], item[0]))[0][0]


def _columns(boxes: list[Box], links: list[tuple[Box, Box]]) -> dict[int, int]:
    """Each box's column: its longest path from a box without dependencies (Kahn's order; a
    box a cycle left unordered, which edges never make, stays in column 0)."""
    incoming: dict[int, int] = {id(b): 0 for b in boxes}
    outgoing: dict[int, list[Box]] = defaultdict(list)
    for a, b in links:
        incoming[id(b)] += 1
        outgoing[id(a)].append(b)
    column = {id(b): 0 for b in boxes}
    ready = [b for b in boxes if incoming[id(b)] == 0]
    while ready:
        box = ready.pop()
        for nxt in outgoing[id(box)]:
            column[id(nxt)] = max(column[id(nxt)], column[id(box)] + 1)
            incoming[id(nxt)] -= 1
            if incoming[id(nxt)] == 0:
                ready.append(nxt)
    return column
