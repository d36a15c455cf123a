"""Warden's transparency log: one RFC 9162 Merkle tree over every audit entry,
signed C2SP checkpoints, proofs and witness cosignatures (issue 17)."""
