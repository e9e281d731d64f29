"""LiteLLM's ``general_settings.custom_auth`` hook for the enforcement tests: the keys a LiteLLM database would hold,
mapped here, each to the ``UserAPIKeyAuth`` LiteLLM's own key lookup builds from its key and team rows (team id and
alias, the key's and the team's metadata).

LiteLLM calls it for every request (``litellm.proxy.auth.user_api_key_auth``) and hands what it returns to the
plugin's hooks as ``user_api_key_dict``: the path a virtual key takes once authenticated. The tests copy this file
next to the generated config.yaml, where LiteLLM resolves ``custom_auth: litellm_keys_auth.user_api_key_auth``.
"""

from __future__ import annotations

from typing import Any

from fastapi import Request
from litellm.proxy._types import ProxyException, UserAPIKeyAuth

#: Key -> the fields of its UserAPIKeyAuth.
KEYS: dict[str, dict[str, Any]] = {
    # A key of the team named after the tenant (teams.json: team_id = team_alias = the tenant).
    "sk-alpha-team": {"team_id": "alpha", "team_alias": "alpha"},
    # A team whose id LiteLLM generated: its alias names the tenant.
    "sk-beta-alias": {"team_id": "5c1e9a4e-team", "team_alias": "beta"},
    # The key's metadata names its tenant, whatever its team.
    "sk-gamma-metadata": {"team_id": "alpha", "team_alias": "alpha", "metadata": {"tenant": "gamma"}},
    # The team's metadata names the tenant.
    "sk-solo-team-metadata": {"team_id": "7f3d-team", "team_metadata": {"tenant": "solo"}},
    "sk-kv": {"team_id": "kv", "team_alias": "kv"},
    # A key of no team and no tenant (a user's own key).
    "sk-no-tenant": {"user_id": "someone"},
    # A key of a team the policy does not know.
    "sk-marketing": {"team_id": "marketing", "team_alias": "marketing"},
}


async def user_api_key_auth(request: Request, api_key: str) -> UserAPIKeyAuth:
    key = api_key.removeprefix("Bearer ").strip()
    fields = KEYS.get(key)
    if fields is None:
        raise ProxyException(message="Authentication Error: invalid key", type="auth_error", param="api_key", code=401)
    return UserAPIKeyAuth(api_key=key, **fields)
