"""size's totals by pool, and the shape of a salt, with the figures worked out by hand."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from quotacalc.core.plan_size import size_plan
from quotacalc.core.salts import looks_like_salt


def pool(name, replicas, usd_per_month, replica_units_per_s=100.0):
    return SimpleNamespace(
        name=name, replicas=replicas, usd_per_month=usd_per_month, replica_units_per_s=replica_units_per_s
    )


def tenant(name, home, rate, long_context_pool=None, placement="shared"):
    return SimpleNamespace(
        name=name,
        tier="standard",
        pool=home,
        long_context_pool=long_context_pool,
        load_pool=None,  # a contract: its load on its standard pool
        placement=placement,
        rate_source="contract",
        bucket_rate_units_per_s=rate,
        bucket_depth_units=rate * 10,
    )


#: Two standard pools, each tenant's long-context pool, and a pool no tenant uses.
POLICY = SimpleNamespace(
    oversubscription=None,  # none measured: size counts the load one for one
    pools=(
        pool("std-a", 2, 1000.0),
        pool("std-b", 1, 700.0),
        pool("long", 1, 500.0),
        pool("long2", 1, 400.0),
        pool("unused", 1, 300.0),
    ),
    tenants=(
        tenant("acme", "std-a", 50.0, long_context_pool="long"),
        tenant("globex", "std-b", 150.0, placement="dedicated"),
        tenant("stark", "std-b", 20.0, long_context_pool="long2"),
    ),
)


def test_every_pool_is_paid_for_used_or_not():
    totals = size_plan(POLICY).totals
    assert totals.pools_usd_per_month == 1000 + 700 + 500 + 400 + 300
    assert totals.tenants == 3 and totals.units_sold_per_s == 50 + 150 + 20
    # acme: 50 / 100 = 0.5 replica of std-a at $500 each = $250; stark: 0.2 of std-b's $700 = $140.
    assert totals.shared_usd_per_month == pytest.approx(250 + 140)
    # globex: 1.5 replicas -> 2 dedicated at $700.
    assert totals.dedicated_usd_per_month == 1400
    # No ratio measured: the replicas at the fleet's peak are the replicas of load, 0.5 + 1.5 + 0.2.
    assert totals.oversubscription_ratio == 1.0
    assert totals.replicas_at_measured_peak == pytest.approx(0.5 + 1.5 + 0.2)


def test_one_pool_counts_its_tenants_long_context_pools_only():
    # std-a's tenant (acme) overflows to "long": std-a + long = $1,500; std-b's tenants' long2 is not std-a's.
    sized = size_plan(POLICY, pool="std-a")
    assert [row.name for row in sized.tenants] == ["acme"]
    assert sized.totals.pools_usd_per_month == 1000 + 500
    # std-b: itself and stark's long2 = $1,100.
    assert size_plan(POLICY, pool="std-b").totals.pools_usd_per_month == 700 + 400
    # A pool with no tenant of its own still costs its replicas when it is the one asked for.
    unused = size_plan(POLICY, pool="unused")
    assert unused.tenants == () and unused.totals.pools_usd_per_month == 300
    assert size_plan(POLICY, pool="long").totals.pools_usd_per_month == 500


@pytest.mark.parametrize(
    ("name", "salt"),
    [
        ("0123456789abcdef" * 4, True),
        ("0123456789ABCDEF" * 4, False),  # a salt is lower-case hex
        ("abc", False),  # hex, but not 64 digits
        ("X" * 64, False),
        ("g" * 64, False),
        ("a" * 65, False),
    ],
)
def test_a_salt_is_64_lower_case_hex_digits(name, salt):
    assert looks_like_salt(name) is salt
