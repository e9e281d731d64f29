"""Bucket levels and leases in Redis or Valkey, shared by several gateways (``state: redis`` in enforce.json).

Every operation is one Lua script, so it is atomic on the server, and reads the server's clock (``TIME``), so
gateways whose clocks disagree refill the same bucket alike. A tenant's keys share one hash tag
(``quotacalc:{tenant}:...``): they live in one slot, so each script works on Redis Cluster. A lease is recorded
with its expiry (``lease``); a script that touches a tenant's bucket first returns the units of its expired
leases to it, so a gateway that dies holds nothing past its leases' life.
"""

from __future__ import annotations

from typing import Any

from quotacalc.admission.state import Taken
from quotacalc.core.policy import QuotaPolicy

#: Refill to the server's now and return expired leases' units; leaves ``now``, ``level``, ``depth`` set.
_PRELUDE = """
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
local rate = tonumber(ARGV[1])
local depth = tonumber(ARGV[2])
local v = redis.call('HMGET', KEYS[1], 'level', 'at')
local level = tonumber(v[1])
local at = tonumber(v[2])
if level == nil then level = depth; at = now end
if now > at then level = math.min(depth, level + rate * (now - at)); at = now end
local expired = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', now)
for _, id in ipairs(expired) do
  local units = tonumber(redis.call('HGET', KEYS[3], id) or '0') or 0
  level = math.min(depth, level + units)
  redis.call('HDEL', KEYS[3], id)
end
if #expired > 0 then redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now) end
local function save()
  redis.call('HSET', KEYS[1], 'level', string.format('%.17g', level), 'at', string.format('%.17g', now))
end
"""

_LEVEL = _PRELUDE + "save()\nreturn string.format('%.17g', level)"

_TRY_TAKE = (
    _PRELUDE
    + """
local needed = tonumber(ARGV[3])
local take = tonumber(ARGV[4])
local ok = 0
if level >= needed then level = level - take; ok = 1 end
save()
return {ok, string.format('%.17g', level)}
"""
)

_TAKE_WHOLE = (
    _PRELUDE
    + """
local unit = tonumber(ARGV[3])
local wanted = tonumber(ARGV[4])
local granted = wanted
if unit > 0 then granted = math.max(0, math.min(wanted, math.floor(level / unit))) end
level = level - granted * unit
save()
return granted
"""
)

_DEBIT = (
    _PRELUDE
    + """
local units = tonumber(ARGV[3])
local carry = ARGV[4] == '1'
level = level - units
local forgiven = 0
if level < 0 and not carry then forgiven = -level; level = 0 end
save()
return string.format('%.17g', forgiven)
"""
)

_CREDIT = _PRELUDE + "level = math.min(depth, level + tonumber(ARGV[3]))\nsave()\nreturn 1"

#: Record a lease (ARGV[6] '0') or update one still held (ARGV[6] '1'): its held units and its expiry, server
#: seconds from now. Returns 0 where an update finds the lease gone (expired: its units went back to the bucket).
_LEASE = (
    _PRELUDE
    + """
save()
if ARGV[6] == '1' and redis.call('HEXISTS', KEYS[3], ARGV[4]) == 0 then return 0 end
redis.call('ZADD', KEYS[2], now + tonumber(ARGV[3]), ARGV[4])
redis.call('HSET', KEYS[3], ARGV[4], ARGV[5])
return 1
"""
)

#: End a lease: 1 if it was still held (its units not yet returned by expiry), else 0.
_END_LEASE = """
local held = redis.call('HDEL', KEYS[3], ARGV[1])
redis.call('ZREM', KEYS[2], ARGV[1])
return held
"""


class RedisBuckets:
    """The ``BucketStore`` of quotacalc.admission.state over Redis; ``now`` arguments are ignored (server clock)."""

    def __init__(self, client: Any, policy: QuotaPolicy, *, prefix: str = "quotacalc", lease_ttl_s: float = 120.0):
        self.client = client
        self.rates = [t.bucket_rate_units_per_s for t in policy.tenants]
        self.depths = [t.bucket_depth_units for t in policy.tenants]
        self.lease_ttl_s = lease_ttl_s
        self.keys = [
            [f"{prefix}:{{{t.name}}}:bucket", f"{prefix}:{{{t.name}}}:expiry", f"{prefix}:{{{t.name}}}:leases"]
            for t in policy.tenants
        ]
        register = client.register_script
        self._level = register(_LEVEL)
        self._try_take = register(_TRY_TAKE)
        self._take_whole = register(_TAKE_WHOLE)
        self._debit = register(_DEBIT)
        self._credit = register(_CREDIT)
        self._lease = register(_LEASE)
        self._end_lease = register(_END_LEASE)

    @classmethod
    def from_url(cls, url: str, policy: QuotaPolicy, *, lease_ttl_s: float = 120.0) -> RedisBuckets:
        import redis

        client = redis.Redis.from_url(url, socket_timeout=1.0, socket_connect_timeout=1.0)
        return cls(client, policy, lease_ttl_s=lease_ttl_s)

    def _args(self, tenant: int, *more: Any) -> list[Any]:
        return [repr(self.rates[tenant]), repr(self.depths[tenant]), *more]

    def depth(self, tenant: int) -> float:
        return self.depths[tenant]

    def rate(self, tenant: int) -> float:
        return self.rates[tenant]

    def level(self, tenant: int, now: float) -> float:
        return float(self._level(keys=self.keys[tenant], args=self._args(tenant)))

    def try_take(self, tenant: int, needed: float, take: float, now: float) -> Taken:
        ok, level = self._try_take(keys=self.keys[tenant], args=self._args(tenant, repr(needed), repr(take)))
        return Taken(bool(ok), float(level))

    def take_whole(self, tenant: int, unit: float, wanted: int, now: float) -> int:
        return int(self._take_whole(keys=self.keys[tenant], args=self._args(tenant, repr(unit), str(wanted))))

    def debit(self, tenant: int, units: float, now: float, *, carry_debt: bool) -> float:
        args = self._args(tenant, repr(units), "1" if carry_debt else "0")
        return float(self._debit(keys=self.keys[tenant], args=args))

    def credit(self, tenant: int, units: float, now: float) -> None:
        self._credit(keys=self.keys[tenant], args=self._args(tenant, repr(units)))

    # -- leases (the gate calls these where the store has them) ------------------------------------------

    def lease(self, tenant: int, request_id: str, held_units: float, *, refresh: bool = False) -> bool:
        """Record that ``request_id`` holds ``held_units``, expiring ``lease_ttl_s`` from now (server clock).
        ``refresh``: only if the lease is still held; False where it expired (its units went back)."""
        args = self._args(tenant, repr(self.lease_ttl_s), request_id, repr(held_units), "1" if refresh else "0")
        return bool(self._lease(keys=self.keys[tenant], args=args))

    def end_lease(self, tenant: int, request_id: str) -> bool:
        """Forget the lease; False when it had expired and its units were already returned to the bucket."""
        return bool(self._end_lease(keys=self.keys[tenant], args=[request_id]))
