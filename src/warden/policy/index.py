"""Rule index: candidate rules by (method, tool name).

Evaluation cost must not grow with rules that cannot match, so the engine asks
the index for the candidates of one (method, tool) pair. Candidate lists are
computed once per pair and cached (bounded LRU: tool names come from the
network), preserving bundle order.
"""

from __future__ import annotations

from collections import OrderedDict
from threading import Lock

from warden.policy.bundle import Rule

_GLOB_CHARS = frozenset("*?[")


class RuleIndex:
    """Maps (method, tool name) → the rules that can match it."""

    def __init__(self, rules: tuple[Rule, ...], *, cache_size: int = 4096) -> None:
        self._rules = rules
        self._by_method: dict[str, tuple[Rule, ...]] = {}
        self._cache: OrderedDict[tuple[str, str], tuple[Rule, ...]] = OrderedDict()
        self._size = cache_size
        self._lock = Lock()

    def _method_rules(self, method: str) -> tuple[Rule, ...]:
        found = self._by_method.get(method)
        if found is None:
            found = tuple(r for r in self._rules if r.matches_method(method))
            self._by_method[method] = found
        return found

    def candidates(self, method: str, tool_name: str) -> tuple[Rule, ...]:
        """Rules whose hooks and tools match; conditions are not evaluated here."""
        key = (method, tool_name)
        with self._lock:
            hit = self._cache.get(key)
            if hit is not None:
                self._cache.move_to_end(key)
                return hit
            found = tuple(r for r in self._method_rules(method) if r.matches_tool(tool_name))
            self._cache[key] = found
            if len(self._cache) > self._size:
                self._cache.popitem(last=False)
            return found
