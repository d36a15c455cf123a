"""Who is calling: API keys with roles (:mod:`warden.identity.api_keys`)."""

from warden.identity.api_keys import (
    ApiKeyInfo,
    ApiKeys,
    Identity,
    Role,
    api_key_pepper,
    hash_token,
)

__all__ = ["ApiKeyInfo", "ApiKeys", "Identity", "Role", "api_key_pepper", "hash_token"]
