"""A session's provenance nodes, shared by its successive states, with trust and depth
kept up to date step by step (decisions 139, 195, 196).

Why shared: a session's states form a chain (each committed step extends the one before),
so they share one append-only :class:`SharedGraph` and a state is a :class:`GraphView`:
the graph's first ``n`` nodes plus an *overlay* of the nodes its own step added. The
overlay is folded into the graph (:meth:`GraphView.settled`) only when a later step is
applied on top of the state, so a speculative state (a step checked but not committed)
never changes what other states see. A step therefore never copies the graph.

Trust and depth (the rules are :mod:`.graph`'s, decision 139) are kept per bundle spec in
a :class:`SpecMemo` valid for the graph's first ``upto`` nodes. A step's values are a
:class:`Delta` over its *region*: the nodes it adds plus the recorded nodes that reach
them through ``derived_from`` (only when it records an id that an earlier node named
before it was recorded: a forward reference). Nodes outside the region keep their value,
because what they reach did not change; a strongly connected component is never split by
the region's border (a member reaching an added node makes every member reach it), so
Tarjan's algorithm over the region alone is exact. The work of a step is linear in its
region: the nodes it adds, plus the ancestors of the forward references it resolves.

:data:`WORK` counts the nodes visited (instrumentation for tests and benchmarks).
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from itertools import chain, islice

from warden.provenance.config import ProvenanceSpec
from warden.provenance.model import (
    INPUT_STEPS,
    TRUSTED_ORIGINS,
    UNTRUSTED_ORIGINS,
    Node,
    Trust,
)

#: Estimated bytes one recorded node holds in the process (the node, its strings' object
#: headers, the graph's index and referrer entries), not counting its strings' characters.
#: tracemalloc on a 19,001-node session of tool outputs (tests/provenance/test_isolation.py
#: ``big_session``): ~12 MB held in all, ~645 bytes per node with its output text; these
#: constants put the estimate ~15 % above that, so a budget errs on the safe side.
NODE_BYTES = 400
#: Estimated bytes of one node's trust and depth entries in one spec's memo.
MEMO_BYTES = 100
#: Specs whose memo a graph keeps (the bundle's, and one more across a reload).
MEMOS_KEPT = 2


@dataclass
class Work:
    """Nodes visited by trust/depth computations since start (instrumentation)."""

    nodes: int = 0


WORK = Work()


@dataclass(frozen=True)
class Delta:
    """Trust contribution reached and depth of a region's nodes; ``rewrote`` when the
    region holds nodes recorded before the step (a forward reference was resolved)."""

    reach: dict[str, Trust | None]
    depth: dict[str, int]
    rewrote: bool = False


@dataclass
class SpecMemo:
    """Trust and depth of the graph's first ``upto`` nodes for one bundle spec.

    ``hist`` counts nodes per depth (the session's deepest lineage without a scan);
    ``entered`` lists the untrusted nodes of input steps in graph order; ``rewrite_base``
    is the largest base size at which a step changed an earlier node's values: a view of
    ``n <= rewrite_base`` nodes can no longer read this memo."""

    spec: ProvenanceSpec
    reach: dict[str, Trust | None] = field(default_factory=dict)
    depth: dict[str, int] = field(default_factory=dict)
    hist: Counter[int] = field(default_factory=Counter)
    entered: list[Node] = field(default_factory=list)
    upto: int = 0
    rewrite_base: int = -1


def least(a: Trust | None, b: Trust | None) -> Trust | None:
    """The less trusted of two contributions (None = contributes nothing)."""
    if a is None:
        return b
    if b is None:
        return a
    return a if a.rank <= b.rank else b


def own(node: Node, spec: ProvenanceSpec) -> Trust | None:
    """A node's own trust contribution (None for ``agent_generated``)."""
    if node.origin in TRUSTED_ORIGINS:
        return Trust.TRUSTED
    if node.origin in UNTRUSTED_ORIGINS:
        return Trust.TRUSTED if spec.is_trusted_source(node.source_id) else Trust.UNTRUSTED
    if node.origin == "agent_generated":
        return None  # only as trusted as what it derives from
    return Trust.UNKNOWN


Outside = Callable[[str], tuple[Trust | None, int] | None]


def _nothing(_pid: str) -> tuple[Trust | None, int] | None:
    return None


def components(
    nodes: Mapping[str, Node], spec: ProvenanceSpec, outside: Outside = _nothing
) -> Delta:
    """Trust and depth of every node of ``nodes`` (a region of the graph).

    Tarjan's strongly connected components (iterative) over ``derived_from`` edges, then
    one pass over the components in the order found (each after every component it
    reaches): a component's trust is the least of its members' own contributions and of
    what it reaches; its depth the longest chain of edges between components (edges
    inside a cycle count 0). An edge leaving the region takes ``outside(id)`` — the
    recorded node's ``(reach, depth)`` — or, for an id never recorded, ``unknown`` and
    depth 1. Linear in the region's nodes and edges.
    """
    WORK.nodes += len(nodes)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    comp_of: dict[str, int] = {}
    comps: list[list[str]] = []
    counter = 0
    for root in nodes:
        if root in index:
            continue
        work: list[tuple[str, int]] = [(root, 0)]
        while work:
            v, i = work[-1]
            if v not in index:
                index[v] = low[v] = counter
                counter += 1
                stack.append(v)
                on_stack.add(v)
            parents = nodes[v].derived_from
            descended = False
            while i < len(parents):
                w = parents[i]
                i += 1
                if w not in nodes:
                    continue
                if w not in index:
                    work[-1] = (v, i)
                    work.append((w, 0))
                    descended = True
                    break
                if w in on_stack:
                    low[v] = min(low[v], index[w])
            if descended:
                continue
            work.pop()
            if low[v] == index[v]:
                members: list[str] = []
                while True:
                    w = stack.pop()
                    on_stack.discard(w)
                    comp_of[w] = len(comps)
                    members.append(w)
                    if w == v:
                        break
                comps.append(members)
            if work:
                u = work[-1][0]
                low[u] = min(low[u], low[v])
    reach_c: list[Trust | None] = []
    depth_c: list[int] = []
    for c, members in enumerate(comps):
        value: Trust | None = None
        depth = 0
        for m in members:
            node = nodes[m]
            value = least(value, own(node, spec))
            for p in node.derived_from:
                if p in nodes:
                    if comp_of[p] != c:
                        value = least(value, reach_c[comp_of[p]])
                        depth = max(depth, 1 + depth_c[comp_of[p]])
                    continue
                known = outside(p)
                if known is None:
                    value = least(value, Trust.UNKNOWN)
                    depth = max(depth, 1)
                else:
                    value = least(value, known[0])
                    depth = max(depth, 1 + known[1])
        reach_c.append(value)
        depth_c.append(depth)
    return Delta(
        reach={n: reach_c[comp_of[n]] for n in nodes},
        depth={n: depth_c[comp_of[n]] for n in nodes},
    )


def _is_entered(node: Node, reach: Trust | None) -> bool:
    return node.step_type in INPUT_STEPS and reach is Trust.UNTRUSTED


class SharedGraph:
    """The append-only nodes of one session, in the order recorded, with an index by
    id, the reverse ``derived_from`` edges (``referrers``: id -> ids of the nodes naming
    it), origin counts, and one :class:`SpecMemo` per bundle spec. Thread-safe through
    ``lock`` (held by :class:`GraphView` for every read of a memo or change)."""

    def __init__(self) -> None:
        self.order: list[Node] = []
        self.pos: dict[str, int] = {}
        self.referrers: dict[str, list[str]] = {}
        self.by_origin: Counter[str] = Counter()
        self.earliest: dict[str, str] = {}
        self.memos: dict[int, SpecMemo] = {}
        self.node_bytes = 0
        self.lock = threading.RLock()

    def append(self, nodes: Iterable[Node]) -> None:
        for node in nodes:
            pid = node.provenance_id
            self.pos[pid] = len(self.order)
            self.order.append(node)
            for p in node.derived_from:
                self.referrers.setdefault(p, []).append(pid)
            self.by_origin[node.origin] += 1
            self.earliest.setdefault(node.origin, node.step_id)
            self.node_bytes += NODE_BYTES + node_chars(node)

    def approx_bytes(self) -> int:
        """Estimated bytes held: nodes plus every spec memo's entries."""
        return self.node_bytes + len(self.order) * MEMO_BYTES * len(self.memos)

    def memo_at(self, n: int, spec: ProvenanceSpec, overlay: list[Node]) -> SpecMemo | None:
        """``spec``'s memo, valid for the first ``n`` nodes (brought forward when it is
        behind), or None when a step after the first ``n`` nodes changed earlier values
        (unless that step added exactly ``overlay``, the asking view's own nodes, whose
        values the view holds itself)."""
        memo = self.memos.get(id(spec))
        if memo is None or memo.spec is not spec:
            while len(self.memos) >= MEMOS_KEPT:
                # Specs come and go with bundle reloads: keep the newest few.
                del self.memos[next(iter(self.memos))]
            memo = SpecMemo(spec)
            full = components({node.provenance_id: node for node in self.order[:n]}, spec)
            self._settle(memo, 0, self.order[:n], full)
            # Made from all n nodes at once: no smaller view may read it.
            memo.rewrite_base = n - 1
            self.memos[id(spec)] = memo
            return memo
        if memo.upto < n:
            base, added = memo.upto, self.order[memo.upto : n]
            self._settle(memo, base, added, self.delta(memo, base, added))
            if len(added) > 1:
                # Several steps caught up at once: values of a view between ``base`` and
                # ``n`` may already include later steps' forward references.
                memo.rewrite_base = max(memo.rewrite_base, n - 1)
        elif memo.upto > n and memo.rewrite_base >= n:
            own = (
                memo.rewrite_base == n
                and bool(overlay)
                and self.order[n : n + len(overlay)] == overlay
            )
            if not own:
                return None
        return memo

    def delta(self, memo: SpecMemo, n: int, added: list[Node]) -> Delta:
        """The values of the region of ``added`` nodes recorded after the first ``n``
        (module docstring); ``memo`` must be valid for the first ``n`` nodes."""
        region: dict[str, Node] = {node.provenance_id: node for node in added}
        frontier = list(region)
        while frontier:
            for r in self.referrers.get(frontier.pop(), ()):
                p = self.pos[r]
                if p < n and r not in region:
                    region[r] = self.order[p]
                    frontier.append(r)
        pos, reach, depth = self.pos, memo.reach, memo.depth

        def outside(pid: str) -> tuple[Trust | None, int] | None:
            p = pos.get(pid)
            if p is None or p >= n:
                return None
            return reach[pid], depth[pid]

        got = components(region, memo.spec, outside)
        return Delta(got.reach, got.depth, rewrote=len(region) > len(added))

    def _settle(self, memo: SpecMemo, n: int, added: list[Node], delta: Delta) -> None:
        """Write ``delta`` (the values after ``added`` on the first ``n`` nodes) into ``memo``."""
        for pid, value in delta.reach.items():
            old = memo.depth.get(pid)
            if old is not None:
                memo.hist[old] -= 1
                if not memo.hist[old]:
                    del memo.hist[old]
            memo.reach[pid] = value
            memo.depth[pid] = delta.depth[pid]
            memo.hist[delta.depth[pid]] += 1
        memo.upto = n + len(added)
        if delta.rewrote:
            # Earlier nodes changed trust: list the entered ones again.
            memo.rewrite_base = n
            memo.entered = [
                node
                for node in chain(islice(self.order, n), added)
                if _is_entered(node, memo.reach[node.provenance_id])
            ]
        else:
            memo.entered.extend(a for a in added if _is_entered(a, delta.reach[a.provenance_id]))


def node_chars(node: Node) -> int:
    """Characters a node's strings hold (the variable part of its size)."""
    return (
        len(node.provenance_id)
        + len(node.source_id)
        + len(node.step_id)
        + sum(len(p) for p in node.derived_from)
    )


class GraphView(Mapping[str, Node]):
    """The nodes of one session state: ``graph``'s first ``n`` plus ``overlay`` (the
    nodes its own step added, not yet in the graph). Read-only as a mapping id -> node,
    in recording order; trust and depth through :meth:`reach`, :meth:`depth_of`,
    :meth:`max_depth` and :meth:`entered`."""

    __slots__ = ("graph", "n", "overlay", "_deltas", "_settled")

    def __init__(
        self,
        graph: SharedGraph | None = None,
        n: int = 0,
        overlay: dict[str, Node] | None = None,
    ) -> None:
        self.graph = graph if graph is not None else SharedGraph()
        self.n = n
        self.overlay: dict[str, Node] = overlay or {}
        # Per spec: the memo read, this view's delta (or, when the memo was stale, a full
        # analysis of this view with memo None) and the memo's rewrite_base then.
        self._deltas: dict[int, tuple[ProvenanceSpec, SpecMemo | None, Delta, int]] = {}
        self._settled: GraphView | None = None

    # -- mapping -------------------------------------------------------------------

    def __getitem__(self, pid: str) -> Node:
        node = self.overlay.get(pid)
        if node is not None:
            return node
        p = self.graph.pos.get(pid)
        if p is None or p >= self.n:
            raise KeyError(pid)
        return self.graph.order[p]

    def __contains__(self, pid: object) -> bool:
        if pid in self.overlay:
            return True
        p = self.graph.pos.get(pid) if isinstance(pid, str) else None
        return p is not None and p < self.n

    def __len__(self) -> int:
        return self.n + len(self.overlay)

    def __iter__(self) -> Iterator[str]:
        for node in islice(self.graph.order, self.n):
            yield node.provenance_id
        yield from self.overlay

    def nodes_in_order(self) -> Iterator[Node]:
        yield from islice(self.graph.order, self.n)
        yield from self.overlay.values()

    # -- versions ------------------------------------------------------------------

    def extended(self, nodes: Iterable[Node]) -> GraphView:
        """A view of these nodes followed by ``nodes`` (ids not already present)."""
        base = self.settled()
        return GraphView(base.graph, base.n, {node.provenance_id: node for node in nodes})

    def settled(self) -> GraphView:
        """The same nodes with the overlay folded into the graph (in place when the graph
        ends where this view's base does, shared when it already holds exactly these
        nodes there, else in a copy of the graph: a branch)."""
        if not self.overlay:
            return self
        if self._settled is not None:
            return self._settled
        graph, n = self.graph, self.n
        added = list(self.overlay.values())
        with graph.lock:
            tip = len(graph.order)
            if tip == n:
                for memo in list(graph.memos.values()):
                    if memo.upto == n:
                        _, delta = self._values(memo.spec)
                        graph._settle(memo, n, added, delta)
                graph.append(added)
            elif graph.order[n : n + len(added)] != added:
                fork = SharedGraph()
                fork.append(islice(graph.order, n))
                fork.append(added)
                graph = fork
        self._settled = GraphView(graph, n + len(added))
        return self._settled

    # -- trust and depth -----------------------------------------------------------

    def _values(self, spec: ProvenanceSpec) -> tuple[SpecMemo | None, Delta]:
        if self._settled is not None:
            # Same nodes, now in the graph: read there (the memo has moved on to them).
            return self._settled._values(spec)
        hit = self._deltas.get(id(spec))
        # Valid while no later step rewrote earlier values (rewrites only ever happen at a
        # base at or beyond this view's, once it has read the memo).
        if hit is not None and hit[0] is spec and (hit[1] is None or hit[1].rewrite_base == hit[3]):
            return hit[1], hit[2]
        overlay = list(self.overlay.values())
        with self.graph.lock:
            memo = self.graph.memo_at(self.n, spec, overlay)
            if memo is None:
                # A later step changed values this view relies on: analyse it whole.
                delta = components(dict(zip(self, self.nodes_in_order(), strict=True)), spec)
                self._deltas[id(spec)] = (spec, None, delta, -1)
            else:
                delta = self.graph.delta(memo, self.n, overlay) if overlay else Delta({}, {})
                self._deltas[id(spec)] = (spec, memo, delta, memo.rewrite_base)
        return memo, delta

    def reach(self, pid: str, spec: ProvenanceSpec) -> Trust | None:
        """The least contribution ``pid``'s lineage reaches (``pid`` must be present)."""
        memo, delta = self._values(spec)
        if pid in delta.reach or memo is None:
            return delta.reach[pid]
        return memo.reach[pid]

    def depth_of(self, pid: str, spec: ProvenanceSpec) -> int:
        """Longest ``derived_from`` chain below ``pid`` (``pid`` must be present)."""
        memo, delta = self._values(spec)
        if pid in delta.depth or memo is None:
            return delta.depth[pid]
        return memo.depth[pid]

    def max_depth(self, spec: ProvenanceSpec) -> int:
        """The deepest lineage of any node (0 for no node)."""
        if self._settled is not None:
            return self._settled.max_depth(spec)
        memo, delta = self._values(spec)
        if memo is None:
            return max(delta.depth.values(), default=0)
        if memo.upto != self.n:
            # This view is behind the memo (an older state): count its own nodes.
            return max((self.depth_of(p, spec) for p in self), default=0)
        if not delta.rewrote:
            return max(max(memo.hist, default=0), max(delta.depth.values(), default=0))
        hist = Counter(memo.hist)
        for pid, d in delta.depth.items():
            old = memo.depth.get(pid)
            if old is not None:
                hist[old] -= 1
            hist[d] += 1
        return max((d for d, c in hist.items() if c > 0), default=0)

    def entered(self, spec: ProvenanceSpec) -> list[Node]:
        """Untrusted nodes recorded by input steps, in recording order."""
        if self._settled is not None:
            return self._settled.entered(spec)
        memo, delta = self._values(spec)
        if memo is not None and memo.upto == self.n and not delta.rewrote:
            return memo.entered + [
                node
                for node in self.overlay.values()
                if _is_entered(node, delta.reach[node.provenance_id])
            ]
        return [
            n for n in self.nodes_in_order() if _is_entered(n, self.reach(n.provenance_id, spec))
        ]

    def origin_counts(self) -> tuple[dict[str, int], dict[str, str]]:
        """Nodes per origin and the step id that first recorded each origin."""
        if self._settled is not None:
            return self._settled.origin_counts()
        graph = self.graph
        if self.n == len(graph.order):
            by_origin = dict(graph.by_origin)
            earliest = dict(graph.earliest)
        else:
            by_origin, earliest = {}, {}
            for node in islice(graph.order, self.n):
                by_origin[node.origin] = by_origin.get(node.origin, 0) + 1
                earliest.setdefault(node.origin, node.step_id)
        for node in self.overlay.values():
            by_origin[node.origin] = by_origin.get(node.origin, 0) + 1
            earliest.setdefault(node.origin, node.step_id)
        return by_origin, earliest

    def approx_bytes(self) -> int:
        """Estimated bytes this view keeps alive (its graph and its overlay)."""
        return self.graph.approx_bytes() + sum(
            NODE_BYTES + node_chars(node) for node in self.overlay.values()
        )
