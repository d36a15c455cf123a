"""Provenance-aware decisions (specs/acs.md §7, §9; issue 8).

- :mod:`.model`: origins, trust, provenance nodes, Intent and capability matching.
- :mod:`.config`: the bundle's ``provenance`` section (which tools are consequential,
  which sinks external, which sources trusted or confidential, which gates run).
- :mod:`.graph`: the per-session provenance graph, ``provenance_summary`` and Intent,
  rebuilt from the session's committed chain entries.
- :mod:`.facts`: the per-step view a policy rule (CEL ``provenance``) and the gates read,
  including inference mode for clients that send no provenance.
- :mod:`.gates`: FIDES, IBAC, AARM and CaMeL as built-in gates.
- :mod:`.shared`: a session's append-only graph shared by its states, with trust and
  depth updated for what each step adds.
- :mod:`.tracker`: keeps each session's graph keyed by its chain head, within a byte
  budget per process.
"""
