"""``warden serve``'s operations options (issue 18): the config file, metrics access,
replica identity, TLS and trace export; and the uvicorn TLS arguments they become."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from warden.errors import ConfigError

if TYPE_CHECKING:  # the settings model (pydantic-settings) loads when a command runs
    from warden.settings import Settings

ConfigFile = Annotated[
    Path | None,
    typer.Option(
        "--config",
        envvar="WARDEN_CONFIG",
        help="A warden.toml whose keys are these options' names with _ for - "
        "(docs/configuration.md); options and WARDEN_* variables override it.",
    ),
]
MetricsAccess = Annotated[
    str | None,
    typer.Option(
        envvar="WARDEN_METRICS_ACCESS",
        help="Who may read GET /metrics: loopback (loopback clients freely, others with an "
        "admin API key) or key (an admin API key always) [loopback].",
    ),
]
ReplicaId = Annotated[
    str | None,
    typer.Option(
        envvar="WARDEN_REPLICA_ID",
        help="This replica's name on warden_replica_info [<hostname>:<pid>].",
    ),
]
TlsCert = Annotated[
    Path | None,
    typer.Option(
        "--tls-cert",
        envvar="WARDEN_TLS_CERT",
        help="Serve HTTPS with this PEM certificate (chain); needs --tls-key.",
    ),
]
TlsKey = Annotated[
    Path | None,
    typer.Option(
        "--tls-key",
        envvar="WARDEN_TLS_KEY",
        help="The PEM private key of --tls-cert; needs --tls-cert.",
    ),
]

OtlpEndpoint = Annotated[
    str | None,
    typer.Option(
        "--otlp-endpoint",
        envvar="WARDEN_OTLP_ENDPOINT",
        help="Export a span per decision by OTLP/HTTP to this collector base URL "
        "(e.g. http://127.0.0.1:4318; needs warden[otel]) [no traces].",
    ),
]
TraceSampleRatio = Annotated[
    float | None,
    typer.Option(
        "--trace-sample-ratio",
        envvar="WARDEN_TRACE_SAMPLE_RATIO",
        help="Share of new traces kept, 0..1; a caller's sampled traceparent is followed [1.0].",
    ),
]

ShadowPolicy = Annotated[
    Path | None,
    typer.Option(
        "--shadow-policy",
        envvar="WARDEN_SHADOW_POLICY",
        help="A candidate bundle evaluated beside the active one on every decision, after "
        "the answer is committed; never enforced; divergences go to the log and /metrics.",
    ),
]
PolicyPollInterval = Annotated[
    float | None,
    typer.Option(
        "--policy-poll-interval-s",
        envvar="WARDEN_POLICY_POLL_INTERVAL_S",
        min=0,
        help="How often to check for a bundle `warden policy activate` promoted (0: never) [2.0].",
    ),
]


def tls_options(settings: Settings) -> dict[str, Any]:
    """uvicorn's ``ssl_certfile``/``ssl_keyfile`` for ``settings`` (empty without TLS).

    The pair is loaded once here so a missing file, a bad PEM or a key that does not
    match the certificate stops the start with a ConfigError instead of a traceback.
    """
    if settings.tls_cert is None or settings.tls_key is None:
        return {}
    import ssl

    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    try:
        context.load_cert_chain(str(settings.tls_cert), str(settings.tls_key))
    except (OSError, ssl.SSLError) as exc:
        raise ConfigError(
            f"TLS certificate {settings.tls_cert} / key {settings.tls_key}: cannot load them "
            f"({exc})"
        ) from exc
    return {"ssl_certfile": str(settings.tls_cert), "ssl_keyfile": str(settings.tls_key)}
