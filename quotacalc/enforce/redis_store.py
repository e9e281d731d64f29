"""Bucket levels and leases in Redis or Valkey, shared by several gateways (``state: redis`` in enforce.json).

Every operation is one Lua script, so it is atomic on the server, and reads the server's clock (``TIME``), so
gateways whose clocks disagree refill the same bucket alike. A tenant's keys share one hash tag
(``quotacalc:{tenant}:...``): they live in one slot, so each script works on Redis Cluster. A lease is recorded
with its expiry by the script that takes its units (atomically, so a lost reply leaves a lease that expires); a script that touches a tenant's bucket first returns the units of its expired
leases to it, so a gateway that dies holds nothing past its leases' life. A request is settled by one script that
keeps its figures under its id: a settlement sent again (its reply was lost) returns them and applies nothing twice.

Inside a proxy the scripts go through ``redis.asyncio`` (``from_url``): the gate runs in
``quotacalc.enforce.bridge.run`` and each script is awaited on the event loop, so a slow or hung Redis holds up only
the requests that wait for it, each for at most the client's timeout. Outside it (the process stopping, a library use)
the same scripts run on a blocking client.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from quotacalc.admission.state import Taken
from quotacalc.core.policy import QuotaPolicy
from quotacalc.enforce.bridge import await_only, in_bridge
from quotacalc.enforce.gate import CapsClaim
from quotacalc.enforce.settings import REDIS_TIMEOUT_S

#: Each tenant's keys, in the order the scripts name them (KEYS[1] to KEYS[9]), all under the tenant's hash tag: its
#: bucket; its leases' expiries and units; its settlements' figures and times; its requests' places under its caps and
#: their expiries; the units each request streamed and when it last did.
TENANT_KEYS = (
    "bucket",
    "expiry",
    "leases",
    "settled",
    "settled_at",
    "live",
    "live_expiry",
    "streamed",
    "streamed_at",
)

#: Beyond a lease's life and a quarter (the most a lease goes unrefreshed in the store while tokens stream), how long a
#: request's place under its tenant's caps outlives its last refresh: the proxy settles a request whose lease ran out
#: within its sweeper's second, and its place must stand until then, or another request could take it while the first
#: still runs. A proxy that died holds its places this much longer than its units.
PLACE_GRACE_S = 5.0


def place_life_s(lease_ttl_s: float, grace_s: float = PLACE_GRACE_S) -> float:
    """How long a place under a tenant's caps stands in the store unless refreshed (or freed by its settlement)."""
    return 1.25 * lease_ttl_s + grace_s


#: How long a gateway's published in-flight count stands unless published again (it publishes at least every 0.25 s).
INFLIGHT_STANDS_S = 1.0

#: How long the store keeps each settlement's figures by request id (a day): a settlement sent again within it (its
#: reply was lost and the gateway retries it) is recognised and applied once. It bounds how long a gateway may retry.
SETTLED_KEEP_S = 86_400.0


class LeaseSettlement(NamedTuple):
    """What the store's settlement of one request did, in units."""

    #: What its lease still held (less than the gateway's count where it expired and went back to the bucket).
    held: float
    released: float
    charged: float
    forgiven: float
    #: The units billed by the settlement that landed (a retry's own figure is not applied).
    billed: float
    #: The units it streamed, as the store counted them (its streamed debits that landed).
    streamed: float


#: The server's clock, in seconds: every gateway reads the same one.
_NOW = """
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
"""

#: Refill to the server's now and return expired leases' units; leaves ``now``, ``level``, ``depth`` set.
_PRELUDE = (
    _NOW
    + """
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
)

_LEVEL = _PRELUDE + "save()\nreturn string.format('%.17g', level)"

#: Units taken for a request join its lease in the same script (ARGV[5]: its id, '' for none; ARGV[6]: the lease's
#: life): a reply lost on the way back leaves a lease that expires, never units taken and held by no one.
_HOLD = """
local function hold(units)
  if ARGV[5] ~= '' and units > 0 then
    redis.call('HINCRBYFLOAT', KEYS[3], ARGV[5], string.format('%.17g', units))
    redis.call('ZADD', KEYS[2], now + tonumber(ARGV[6]), ARGV[5])
  end
end
"""

_TRY_TAKE = (
    _PRELUDE
    + _HOLD
    + """
local needed = tonumber(ARGV[3])
local take = tonumber(ARGV[4])
local ok = 0
if level >= needed then level = level - take; ok = 1; hold(take) end
save()
return {ok, string.format('%.17g', level)}
"""
)

_TAKE_WHOLE = (
    _PRELUDE
    + _HOLD
    + """
local unit = tonumber(ARGV[3])
local wanted = tonumber(ARGV[4])
local granted = wanted
if unit > 0 then granted = math.max(0, math.min(wanted, math.floor(level / unit))) end
level = level - granted * unit
hold(granted * unit)
save()
return granted
"""
)

#: Output units as they stream (ARGV[5]: the request's lease key, '' for none). The units are added to the request's
#: streamed count here (KEYS[8], by time in KEYS[9]), in the same script, and its settlement reads that count: a debit
#: whose reply was lost after it landed is then counted once, never charged again at the end.
_DEBIT = (
    _PRELUDE
    + """
local units = tonumber(ARGV[3])
local carry = ARGV[4] == '1'
level = level - units
local forgiven = 0
if level < 0 and not carry then forgiven = -level; level = 0 end
if ARGV[5] ~= '' then
  redis.call('HINCRBYFLOAT', KEYS[8], ARGV[5], string.format('%.17g', units))
  redis.call('ZADD', KEYS[9], now, ARGV[5])
end
save()
return string.format('%.17g', forgiven)
"""
)

_CREDIT = _PRELUDE + "level = math.min(depth, level + tonumber(ARGV[3]))\nsave()\nreturn 1"

#: Extend a lease still held (ARGV[3]: its life, ARGV[4]: its id), and the request's place under the tenant's caps
#: (KEYS[6], KEYS[7]; ARGV[5]: a place's life) where it has one; 0 where the lease expired (its units went back).
_REFRESH = (
    _PRELUDE
    + """
save()
if redis.call('HEXISTS', KEYS[6], ARGV[4]) == 1 then
  redis.call('ZADD', KEYS[7], now + tonumber(ARGV[5]), ARGV[4])
end
if redis.call('HEXISTS', KEYS[3], ARGV[4]) == 0 then return 0 end
redis.call('ZADD', KEYS[2], now + tonumber(ARGV[3]), ARGV[4])
return 1
"""
)

#: Settle a request in one step (ARGV[3]: its id, ARGV[4]: the units billed, ARGV[5]: the units it streamed,
#: ARGV[6]: '1' where a charge the bucket lacks stays owed, ARGV[7]: how long a settlement is kept): end its lease,
#: release (or charge) the difference between what it held and streamed and what it is billed, and keep the figures
#: under its id (KEYS[4], by time in KEYS[5]). One script, so a settlement is applied whole or not at all; kept by id,
#: so a settlement sent again (its reply was lost: a timeout, a restart) returns the figures of the one that landed
#: and applies nothing twice. It frees the request's place under the tenant's caps (KEYS[6], KEYS[7]), and takes what
#: it streamed from the store's own count (KEYS[8]) where there is one, rather than ARGV[5]: a streamed debit whose
#: reply was lost is in that count. Returns 'held released charged forgiven billed streamed'.
_SETTLE = (
    _PRELUDE
    + """
local keep_before = now - tonumber(ARGV[7])
local old = redis.call('ZRANGEBYSCORE', KEYS[5], '-inf', keep_before)
for _, id in ipairs(old) do redis.call('HDEL', KEYS[4], id) end
if #old > 0 then redis.call('ZREMRANGEBYSCORE', KEYS[5], '-inf', keep_before) end
local orphans = redis.call('ZRANGEBYSCORE', KEYS[9], '-inf', keep_before)
for _, id in ipairs(orphans) do redis.call('HDEL', KEYS[8], id) end
if #orphans > 0 then redis.call('ZREMRANGEBYSCORE', KEYS[9], '-inf', keep_before) end
redis.call('HDEL', KEYS[6], ARGV[3])
redis.call('ZREM', KEYS[7], ARGV[3])
local done = redis.call('HGET', KEYS[4], ARGV[3])
if done then save(); return done end
local held = tonumber(redis.call('HGET', KEYS[3], ARGV[3]) or '0') or 0
redis.call('HDEL', KEYS[3], ARGV[3])
redis.call('ZREM', KEYS[2], ARGV[3])
local streamed = tonumber(ARGV[5])
local counted = redis.call('HGET', KEYS[8], ARGV[3])
if counted then
  streamed = tonumber(counted)
  redis.call('HDEL', KEYS[8], ARGV[3])
  redis.call('ZREM', KEYS[9], ARGV[3])
end
local billed = tonumber(ARGV[4])
local difference = billed - (held + streamed)
local released, charged, forgiven = 0, 0, 0
if difference < 0 then
  released = -difference
  level = math.min(depth, level + released)
elseif difference > 0 then
  charged = difference
  level = level - difference
  if level < 0 and ARGV[6] ~= '1' then forgiven = -level; level = 0 end
end
save()
local figures = string.format('%.17g %.17g %.17g %.17g %.17g %.17g', held, released, charged, forgiven, billed, streamed)
redis.call('HSET', KEYS[4], ARGV[3], figures)
redis.call('ZADD', KEYS[5], now, ARGV[3])
return figures
"""
)


#: A Lua function that takes a place under the tenant's caps for a request (KEYS[6]: lease key -> 'pool replica
#: kv_tokens', KEYS[7]: their expiries), counted over every gateway's requests: expired places first dropped (a gateway
#: that died holds none past them), and the request's own earlier place (a claim whose reply was lost, sent again).
#: ``first``: where in ARGV its replicas to try begin, in order. Returns the replica, -1 at the concurrency cap, -2
#: where no replica has room under the KV cap.
_CLAIM_FUNCTION = """
local function claim(lease, pool, kv, concurrent, cap, life, first)
  local expired = redis.call('ZRANGEBYSCORE', KEYS[7], '-inf', now)
  for _, id in ipairs(expired) do redis.call('HDEL', KEYS[6], id) end
  if #expired > 0 then redis.call('ZREMRANGEBYSCORE', KEYS[7], '-inf', now) end
  redis.call('HDEL', KEYS[6], lease)
  redis.call('ZREM', KEYS[7], lease)
  if redis.call('HLEN', KEYS[6]) >= concurrent then return -1 end
  local resident = {}
  for _, entry in ipairs(redis.call('HVALS', KEYS[6])) do
    local p, replica, tokens = string.match(entry, '^(.*) (%d+) (%d+)$')
    if p == pool then resident[replica] = (resident[replica] or 0) + tonumber(tokens) end
  end
  for i = first, #ARGV do
    if (resident[ARGV[i]] or 0) + kv <= cap then
      redis.call('HSET', KEYS[6], lease, pool .. ' ' .. ARGV[i] .. ' ' .. kv)
      redis.call('ZADD', KEYS[7], now + life, lease)
      return tonumber(ARGV[i])
    end
  end
  return -2
end
"""

#: Claim a place under the tenant's caps for a request the fair queue sends (ARGV[1]: its lease key, ARGV[2]: its
#: pool, ARGV[3]: its KV estimate in tokens, ARGV[4]: the concurrency cap, ARGV[5]: the KV cap per replica, ARGV[6]: the
#: place's life, ARGV[7..]: the replicas to try).
_CLAIM = (
    _NOW
    + _CLAIM_FUNCTION
    + """
return claim(ARGV[1], ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5]), tonumber(ARGV[6]), 7)
"""
)

#: ``_TRY_TAKE`` with the claim of a place under the tenant's caps, made only where the units were taken, in the same
#: script: an admission that may go to the engine at once costs one round trip. ARGV[7]: the place's life, ARGV[8]: its
#: pool, ARGV[9]: its KV estimate, ARGV[10]: the concurrency cap, ARGV[11]: the KV cap, ARGV[12..]: the replicas to try
#: (the lease key is ARGV[5]). Returns {ok, level, replica or a negative number}.
_TRY_TAKE_CLAIM = (
    _PRELUDE
    + _HOLD
    + _CLAIM_FUNCTION
    + """
local needed = tonumber(ARGV[3])
local take = tonumber(ARGV[4])
local ok = 0
local replica = -3
if level >= needed then
  level = level - take; ok = 1; hold(take)
  replica = claim(ARGV[5], ARGV[8], tonumber(ARGV[9]), tonumber(ARGV[10]), tonumber(ARGV[11]), tonumber(ARGV[7]), 12)
end
save()
return {ok, string.format('%.17g', level), replica}
"""
)

#: Publish a gateway's count of sequences in flight on a pool (KEYS[1]: gateway -> 'count expiry'; ARGV[1]: the
#: gateway, ARGV[2]: its count, ARGV[3]: how long the count stands unless published again) and return the other
#: gateways' counts still standing: a gateway that died stops counting within that time.
_PUBLISH_INFLIGHT = (
    _NOW
    + """
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2] .. ' ' .. string.format('%.17g', now + tonumber(ARGV[3])))
local others = 0
local entries = redis.call('HGETALL', KEYS[1])
for i = 1, #entries, 2 do
  if entries[i] ~= ARGV[1] then
    local count, expiry = string.match(entries[i + 1], '^(%d+) (.*)$')
    if tonumber(expiry) < now then redis.call('HDEL', KEYS[1], entries[i])
    else others = others + tonumber(count) end
  end
end
return others
"""
)

#: Where each claim stops: at the tenant's concurrency cap, or with no replica of room under its KV cap.
CLAIM_AT_CONCURRENCY_CAP = -1
CLAIM_NO_KV_ROOM = -2


class RedisBuckets:
    """The ``BucketStore`` of quotacalc.admission.state over Redis; ``now`` arguments are ignored (server clock).

    ``client`` is a blocking ``redis.Redis``; ``async_client`` (a ``redis.asyncio.Redis``, optional) serves the calls
    made inside ``quotacalc.enforce.bridge.run``. With both, a call outside the bridge while an event loop runs is
    refused (it would block the loop), never run blocking."""

    def __init__(
        self,
        client: Any,
        policy: QuotaPolicy,
        *,
        prefix: str = "quotacalc",
        lease_ttl_s: float = 120.0,
        settled_keep_s: float = SETTLED_KEEP_S,
        async_client: Any = None,
        place_grace_s: float = PLACE_GRACE_S,
    ):
        self.client = client
        self.async_client = async_client
        self.rates = [t.bucket_rate_units_per_s for t in policy.tenants]
        self.depths = [t.bucket_depth_units for t in policy.tenants]
        self.lease_ttl_s = lease_ttl_s
        self.place_ttl_s = place_life_s(lease_ttl_s, place_grace_s)
        self.settled_keep_s = settled_keep_s
        self.keys = [[f"{prefix}:{{{t.name}}}:{key}" for key in TENANT_KEYS] for t in policy.tenants]
        # Each pool's gateways' published in-flight counts: a key in a slot of its own (Redis Cluster runs a script on
        # one slot, and a pool's count spans tenants), read and written once per tick of each gateway, not per request.
        self.inflight_keys = {pool.name: f"{prefix}:{{pool:{pool.name}}}:inflight" for pool in policy.pools}
        sources = {
            "level": _LEVEL,
            "try_take": _TRY_TAKE,
            "take_whole": _TAKE_WHOLE,
            "debit": _DEBIT,
            "credit": _CREDIT,
            "refresh": _REFRESH,
            "settle": _SETTLE,
            "claim": _CLAIM,
            "try_take_claim": _TRY_TAKE_CLAIM,
            "publish_inflight": _PUBLISH_INFLIGHT,
        }
        self._blocking = {name: client.register_script(source) for name, source in sources.items()}
        self._awaited = (
            {name: async_client.register_script(source) for name, source in sources.items()} if async_client else {}
        )
        #: A claim of a place under the tenant's caps to make with the next take (``SharedCaps``), and its result.
        self.claim_on_take: CapsClaim | None = None
        self.claimed_on_take: int | None = None
        #: The request the next take is held for (set by the gate around the ledger's calls, and read before the
        #: script is handed to the event loop, so requests that interleave there never see each other's).
        self.holding_for: str | None = None

    @classmethod
    def from_url(
        cls, url: str, policy: QuotaPolicy, *, lease_ttl_s: float = 120.0, timeout_s: float = REDIS_TIMEOUT_S
    ) -> RedisBuckets:
        import redis
        import redis.asyncio

        options: dict[str, Any] = {"socket_timeout": timeout_s, "socket_connect_timeout": timeout_s}
        async_options = dict(options)
        try:
            from redis.maint_notifications import MaintNotificationsConfig
        except ImportError:  # redis-py before 7: no maintenance notifications
            pass
        else:
            # With them on ("auto"), redis-py's asyncio pool skips its check that a pooled connection is still open,
            # so the first script after a Redis restart fails on the dead connection; off, the pool reconnects first
            # (as the blocking client's does) and no script is sent twice.
            async_options["maint_notifications_config"] = MaintNotificationsConfig(enabled=False)
        return cls(
            redis.Redis.from_url(url, **options),
            policy,
            lease_ttl_s=lease_ttl_s,
            async_client=redis.asyncio.Redis.from_url(url, **async_options),
        )

    def _run(self, name: str, keys: list[str], args: list[Any]) -> Any:
        """Run one script: awaited on the event loop inside the bridge, else on the blocking client."""
        if self._awaited:
            if in_bridge():
                return await_only(self._awaited[name](keys=keys, args=args))
            import asyncio

            try:
                asyncio.get_running_loop()
            except RuntimeError:
                pass
            else:
                raise RuntimeError(f"RedisBuckets.{name} called on the event loop outside quotacalc.enforce.bridge.run")
        return self._blocking[name](keys=keys, args=args)

    def _args(self, tenant: int, *more: Any) -> list[Any]:
        return [repr(self.rates[tenant]), repr(self.depths[tenant]), *more]

    def depth(self, tenant: int) -> float:
        return self.depths[tenant]

    def rate(self, tenant: int) -> float:
        return self.rates[tenant]

    def level(self, tenant: int, now: float) -> float:
        return float(self._run("level", self.keys[tenant], self._args(tenant)))

    def _lease_args(self) -> list[str]:
        return [self.holding_for or "", repr(self.lease_ttl_s)]

    def try_take(self, tenant: int, needed: float, take: float, now: float) -> Taken:
        args = self._args(tenant, repr(needed), repr(take), *self._lease_args())
        claim = self.claim_on_take
        if claim is None:
            ok, level = self._run("try_take", self.keys[tenant], args)
            return Taken(bool(ok), float(level))
        claim_args = [repr(self.place_ttl_s), *self._claim_args(claim)]
        ok, level, replica = self._run("try_take_claim", self.keys[tenant], args + claim_args)
        self.claimed_on_take = int(replica)
        return Taken(bool(ok), float(level))

    def take_whole(self, tenant: int, unit: float, wanted: int, now: float) -> int:
        args = self._args(tenant, repr(unit), str(wanted), *self._lease_args())
        return int(self._run("take_whole", self.keys[tenant], args))

    def debit(self, tenant: int, units: float, now: float, *, carry_debt: bool) -> float:
        args = self._args(tenant, repr(units), "1" if carry_debt else "0", self.holding_for or "")
        return float(self._run("debit", self.keys[tenant], args))

    def credit(self, tenant: int, units: float, now: float) -> None:
        self._run("credit", self.keys[tenant], self._args(tenant, repr(units)))

    # -- leases (the gate calls these where the store has them) ------------------------------------------

    def refresh_lease(self, tenant: int, request_id: str) -> bool:
        """Extend the lease ``lease_ttl_s`` from now (server clock); False where it had expired."""
        args = self._args(tenant, repr(self.lease_ttl_s), request_id, repr(self.place_ttl_s))
        return bool(self._run("refresh", self.keys[tenant], args))

    def settle_lease(
        self, tenant: int, request_id: str, billed: float, streamed: float, *, carry_debt: bool
    ) -> LeaseSettlement:
        """End the request's lease and settle it against ``billed`` in one atomic script; sent again for the same
        request (within ``settled_keep_s``), the figures of the settlement that landed, nothing applied twice."""
        args = self._args(
            tenant,
            request_id,
            repr(billed),
            repr(streamed),
            "1" if carry_debt else "0",
            repr(self.settled_keep_s),
        )
        reply = self._run("settle", self.keys[tenant], args)
        text = reply.decode() if isinstance(reply, bytes) else str(reply)
        figures = [float(part) for part in text.split()]
        if len(figures) == 5:  # kept by a gateway of before the store counted streamed units
            figures.append(streamed)
        return LeaseSettlement(*figures)

    # -- caps shared by every gateway (the gate calls these where the store has them) ---------------------

    @staticmethod
    def _claim_args(claim: CapsClaim) -> list[str]:
        return [
            claim.pool,
            str(claim.kv_tokens),
            str(claim.caps.max_concurrent_sequences),
            str(claim.caps.kv_cap_tokens_per_replica),
            *(str(replica) for replica in claim.replicas),
        ]

    def claim_caps(self, tenant: int, lease_key: str, claim: CapsClaim) -> int:
        """A place under the tenant's concurrency cap and, on the first of the claim's replicas with room, under its
        resident-KV cap, counted over every gateway; the replica, or CLAIM_AT_CONCURRENCY_CAP / CLAIM_NO_KV_ROOM."""
        args = self._claim_args(claim)
        return int(self._run("claim", self.keys[tenant], [lease_key, *args[:4], repr(self.place_ttl_s), *args[4:]]))

    def publish_inflight(self, pool: str, gateway: str, inflight: int) -> int:
        """Publish ``gateway``'s sequences in flight on the pool; the other gateways' sum, as they last published it."""
        args = [gateway, str(inflight), repr(INFLIGHT_STANDS_S)]
        return int(self._run("publish_inflight", [self.inflight_keys[pool]], args))
