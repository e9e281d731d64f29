"""Per-tenant cache salts (docs/method.md §4): HMAC-SHA256 of the tenant under a platform secret.

A salt must not be guessable by another tenant, so it derives from a secret that never enters the
plan; the same secret always gives the same salts, so generated files stay byte-identical.
"""

from __future__ import annotations

import hashlib
import hmac

from quotacalc.core.policy import QuotaPolicy


def derive_salt(secret: bytes, tenant: str) -> str:
    """One tenant's salt: HMAC-SHA256(secret, tenant name), hex."""
    return hmac.new(secret, tenant.encode("utf-8"), hashlib.sha256).hexdigest()


def derive_salts(policy: QuotaPolicy, secret: bytes) -> dict[str, str]:
    """salt_ref -> salt for every salted tenant, in the policy's tenant order."""
    return {tenant.salt_ref: derive_salt(secret, tenant.name) for tenant in policy.tenants if tenant.salt_ref}


def salt_lora_collisions(policy: QuotaPolicy, salts: dict[str, str]) -> list[tuple[str, str]]:
    """(salted tenant, tenant whose LoRA adapter name equals that salt): vLLM hashes both into one tuple.

    The salt itself is never returned, so no caller can print it by accident.
    """
    adapters = {adapter: tenant.name for tenant in policy.tenants for adapter in tenant.lora_adapters}
    return [
        (tenant.name, adapters[salts[tenant.salt_ref]])
        for tenant in policy.tenants
        if tenant.salt_ref and salts.get(tenant.salt_ref) in adapters
    ]


def looks_like_salt(name: str) -> bool:
    """Whether a name has a salt's shape (64 lower-case hex digits): the only way a LoRA name can equal a salt."""
    return len(name) == 64 and all(character in "0123456789abcdef" for character in name)
