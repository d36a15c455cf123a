"""Domain types and the Guardian: one decision path for every wire; no I/O."""
