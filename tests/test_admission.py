"""The admission contract (quotacalc/admission/), on its own: buckets, the ledger's bookkeeping on every path,
the policies' declarations, the caps and the Virtual Token Counter, all on a clock the test holds."""

from __future__ import annotations

import re
from pathlib import Path
from types import SimpleNamespace

import pytest

from quotacalc.admission.bucket import Bucket
from quotacalc.admission.caps import TenantCaps, at_concurrency_cap, fits_kv, never_fits
from quotacalc.admission.ledger import ADMITTED, NEVER_ADMISSIBLE, REJECTED, Ledger
from quotacalc.admission.policies import POLICIES, POLICY_NAMES, RETIRED_NAMES, UNLIMITED, make_policy
from quotacalc.admission.scheduler import VirtualTokenCounter
from quotacalc.admission.state import MemoryBuckets

ROOT = Path(__file__).resolve().parent.parent


def request(prompt_units=1000.0, weight=2.0, max_tokens=4000, limit=1000):
    return SimpleNamespace(
        prompt_units=prompt_units, output_weight=weight, client_max_tokens=max_tokens, limit_tokens=limit, hold=0.0,
        granted=0,
    )  # fmt: skip


def ledger(policy: str, rate=100.0, depth=10_000.0, **options) -> tuple[Ledger, Bucket]:
    bucket = Bucket(rate, depth)
    return Ledger(make_policy(policy, options), MemoryBuckets([bucket])), bucket


def test_a_bucket_refills_continuously_up_to_its_depth_and_never_runs_back():
    bucket = Bucket(rate=10.0, depth=100.0)
    bucket.level = 0.0
    assert bucket.refill(2.5) == 25.0  # 2.5 s × 10 units/s, not whole seconds
    assert bucket.refill(1.0) == 25.0  # an earlier clock leaves it as it is
    assert bucket.refill(1000.0) == 100.0
    bucket.level = 40.0
    assert bucket.retry_after_s(65.0) == 3  # ceil(25 / 10)


@pytest.mark.parametrize("policy", POLICY_NAMES)
def test_every_policy_settles_what_it_took_on_every_path(policy):
    """held + streamed + charged = billed + released, whatever the tenant received."""
    for generated, prompt_billed in ((0, False), (0, True), (1, True), (700, True), (1000, True)):
        book, bucket = ledger(policy, lease_tokens=128)
        req = request()
        admission = book.admit(0, req, now=0.0)
        assert admission.outcome == ADMITTED
        held_at_admission = req.hold
        assert bucket.level == pytest.approx(10_000.0 - held_at_admission)
        while req.granted < generated:
            assert book.renew(0, req, now=0.0) > 0
        streamed = 0.0
        if book.streams:
            streamed = req.output_weight * generated
            book.stream(0, streamed, now=0.0)
        taken = req.hold + streamed
        billed = (1000.0 if prompt_billed else 0.0) + 2.0 * generated
        settlement = book.settle(0, req, billed, streamed, now=0.0)
        assert taken + settlement.charged == pytest.approx(settlement.billed + settlement.released, abs=1e-9)
        assert req.hold == 0.0
        # What stays out of the bucket is what was billed (nothing here outruns it: no debt, nothing forgiven).
        assert bucket.level == pytest.approx(10_000.0 - billed, abs=1e-9)


def test_a_request_a_full_bucket_cannot_hold_is_never_admissible_without_retry_after():
    book, bucket = ledger("reserve_max_tokens", depth=5_000.0)
    admission = book.admit(0, request(prompt_units=1000.0, weight=2.0, max_tokens=4000), now=0.0)
    assert admission.outcome == NEVER_ADMISSIBLE and admission.retry_after_s is None
    assert admission.needed_units == 9_000.0 and bucket.level == 5_000.0  # nothing taken
    # One that fits a full bucket but not this one is a 429 with ceil(deficit / rate).
    bucket.level = 1_000.0
    admission = book.admit(0, request(prompt_units=1000.0, weight=2.0, max_tokens=1000), now=0.0)
    assert admission.outcome == REJECTED and admission.retry_after_s == 20  # (3,000 - 1,000) / 100


def test_streamed_debit_carries_debt_and_the_forgiving_policy_forgives_it():
    for policy, forgiven, level in (("streamed_debit", 0.0, -4_000.0), ("debit_on_completion_forgiving", 4_000.0, 0.0)):
        book, bucket = ledger(policy, depth=10_000.0)
        req = request(prompt_units=1000.0, weight=2.0)
        assert book.admit(0, req, now=0.0).outcome == ADMITTED
        streamed = 2.0 * 6_500 if book.streams else 0.0  # 13,000 units of output against 10,000 in the bucket
        book.stream(0, streamed, now=0.0)
        settlement = book.settle(0, req, 1000.0 + 13_000.0, streamed, now=0.0)
        assert settlement.forgiven == pytest.approx(forgiven)
        assert bucket.level == pytest.approx(level)
    # The debt is paid from the refill before anything is admitted again: 40 s at 100 units/s, then the prompt.
    book, bucket = ledger("streamed_debit")
    bucket.level = -4_000.0
    assert book.admit(0, request(prompt_units=1000.0), now=0.0).retry_after_s == 50
    assert book.admit(0, request(prompt_units=1000.0), now=49.0).outcome == REJECTED
    assert book.admit(0, request(prompt_units=1000.0), now=50.0).outcome == ADMITTED


def test_a_lease_renews_only_what_the_bucket_holds_and_stops_at_zero():
    book, bucket = ledger("incremental_lease", lease_tokens=100)
    req = request(prompt_units=1000.0, weight=2.0, limit=1000)
    book.admit(0, req, now=0.0)
    assert req.granted == 100 and req.hold == 1200.0
    bucket.level = 150.0  # 75 tokens of W 2
    assert book.renew(0, req, now=0.0) == 75 and req.granted == 175 and bucket.level == 0.0
    assert book.renew(0, req, now=0.0) == 0  # a quota stop
    reserve = make_policy("reserve_capped")
    assert reserve.granted_tokens(req) == UNLIMITED and reserve.renewal_tokens(req, 10) == 0


def test_caps():
    caps = TenantCaps(max_concurrent_sequences=2, kv_cap_tokens_per_replica=1000)
    assert never_fits(caps, 1001) and not never_fits(caps, 1000)
    assert at_concurrency_cap(caps, 2) and not at_concurrency_cap(caps, 1)
    assert fits_kv(caps, 600, 400) and not fits_kv(caps, 601, 400)


def test_the_virtual_token_counter_charges_served_work_by_weight_and_banks_no_idle_credit():
    vtc = VirtualTokenCounter([2.0, 1.0])
    vtc.backlog(0)
    vtc.backlog(1)
    vtc.charge(0, 200.0)  # 100 per unit of weight
    vtc.charge(1, 50.0)  # 50
    assert vtc.counter(0) == 100.0 and vtc.counter(1) == 50.0
    vtc.drained(1)
    vtc.charge(0, 400.0)  # tenant 1 idles while tenant 0 is served: 300
    vtc.backlog(1)  # back: lifted to the smallest counter of those backlogged, not left at 50
    assert vtc.counter(1) == 300.0
    vtc.drained(0)
    vtc.drained(1)
    vtc2 = VirtualTokenCounter([1.0, 1.0])
    vtc2.backlog(0)
    vtc2.charge(0, 500.0)
    vtc2.drained(0)
    vtc2.backlog(1)  # alone: lifted to where the last one to leave stood
    assert vtc2.counter(1) == 500.0


def _policy_rows(text: str) -> dict[str, tuple[str, str]]:
    """The rows of a markdown table of policies: name -> (holds, settles)."""
    rows = re.finditer(r"^\| `(\w+)` \|(.*)\|(.*)\|$", text, re.M)
    return {m.group(1): (m.group(2).strip(), m.group(3).strip()) for m in rows}


def test_every_policy_is_declared_once_and_the_reference_tables_say_what_the_declarations_say():
    """docs/simulate.md's policy table, and the README's where it has one, are the declarations' (a new policy
    fails here until its rows are written, and a retired one until they are gone)."""
    docs = _policy_rows((ROOT / "docs" / "simulate.md").read_text(encoding="utf-8"))
    for name, declaration in POLICIES.items():
        assert make_policy(name).name == name
        assert docs.get(name) == (declaration.holds, declaration.settles), name
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    header = "| policy | holds at admission | at the end |"
    if header in readme:
        table = readme[readme.index(header) :].split("\n\n")[0]
        assert _policy_rows(table) == {name: (d.holds, d.settles) for name, d in POLICIES.items()}
    assert not set(RETIRED_NAMES) & set(POLICIES)


def test_a_policy_takes_its_declared_options_and_their_defaults():
    assert make_policy("incremental_lease").lease_tokens == 128
    assert make_policy("incremental_lease", {"lease_tokens": 7}).lease_tokens == 7
    assert make_policy("reserve_capped", {"lease_tokens": 7}).name == "reserve_capped"  # not its option: unused


def test_in_flight_counts_against_the_concurrency_cap():
    from quotacalc.admission.caps import InFlight

    tracker = InFlight([TenantCaps(2, 1000), TenantCaps(1, 1000)])
    assert tracker.acquire(0) == 1 and not tracker.at_cap(0)
    assert tracker.acquire(0) == 2 and tracker.at_cap(0)
    tracker.release(0)
    assert not tracker.at_cap(0) and not tracker.at_cap(1)


def test_the_progress_bar_waits_a_second_and_shows_the_time_left(monkeypatch):
    from quotacalc.cli import simulate

    monkeypatch.setattr(simulate.sys.stderr, "isatty", lambda: True, raising=False)
    with simulate._progress(4) as advance:
        bar = advance.__self__
        advance(0.5)
        assert bar.bar is None  # a run under a second prints nothing but its results
        bar.started -= simulate._progress.DELAY_S
        advance(1.0)
        assert bar.bar is not None
        assert "TimeRemainingColumn" in [type(column).__name__ for column in bar.bar.columns]
