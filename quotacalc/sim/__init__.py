"""The discrete-event simulator of a plan's pool: gateway, engines, workload, admission policies."""
