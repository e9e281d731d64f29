"""``quotacalc emulate``: an OpenAI-compatible server whose replicas run the priced deployment on the wall clock.

``engine`` is the pure core (scheduler, KV block pool, vLLM's salted prefix cache) on an injected clock;
``tokens`` turns request text into tokens and block hashes; ``pool`` builds a replica's settings from a
priced plan pool; ``server`` is the asyncio HTTP driver around them; ``metrics`` renders Prometheus text.
"""
