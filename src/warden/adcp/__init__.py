"""AdCP 3.2.0-beta.0: Warden as the governance agent (specs/adcp-spend-kla.md §1).

Modules: :mod:`~warden.adcp.plan_hash` (plan and payload hashes),
:mod:`~warden.adcp.governance_token` (issuing ``governance_context`` tokens, the JWKS),
:mod:`~warden.adcp.token_verifier` (the seller-side 15-step verifier), and what each task
does once the wire (:mod:`warden.wire.adcp`) has parsed it: the shared state
(:mod:`~warden.adcp.state`), ``sync_plans`` (:mod:`~warden.adcp.plan_sync`) and the plan's
money (:mod:`~warden.adcp.plan_money`), ``check_governance`` (:mod:`~warden.adcp.checks`,
:mod:`~warden.adcp.check_answers`, :mod:`~warden.adcp.reviews`,
:mod:`~warden.adcp.execution`), ``report_plan_outcome`` (:mod:`~warden.adcp.outcomes`,
:mod:`~warden.adcp.delivery`), ``report_plan_adjustment``
(:mod:`~warden.adcp.adjustments`), the insert rate limit and :class:`AdcpError`
(:mod:`~warden.adcp.errors`). Import from the modules; this package re-exports nothing.
"""
