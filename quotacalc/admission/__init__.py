"""The admission contract, pure and on an injected clock (docs/method.md §3 and §5).

Buckets in units that refill continuously (``bucket``), the admission policies, one per module and
declared once (``policies``), the lease and settlement ledger (``ledger``), per-tenant concurrency and
resident-KV caps (``caps``) and the work-fair scheduler (``scheduler``). Nothing here reads a clock,
a file or a socket: every call takes ``now`` in seconds, and bucket state sits behind ``BucketStore``
(``state``), so ``sim`` drives it on simulated time and a gateway plugin on real requests.
"""
