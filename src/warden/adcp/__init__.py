"""AdCP 3.2.0-beta.0: Warden as the governance agent (specs/adcp-spend-kla.md §1).

Modules: :mod:`~warden.adcp.plan_hash` (plan and payload hashes),
:mod:`~warden.adcp.governance_token` (issuing ``governance_context`` tokens, the JWKS),
:mod:`~warden.adcp.token_verifier` (the seller-side 15-step verifier). Import from the
modules; this package re-exports nothing.
"""
