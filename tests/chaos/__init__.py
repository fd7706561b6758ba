"""Fault injection (`make chaos`, issue 31 "Faults"): the platform's real processes (gunicorn,
a Celery worker, beat, the Kubernetes emulator behind a proxy that can cut it off, the Stripe
stand-in, node agents, its own PostgreSQL and Redis servers) run with orders, stops and top-ups
in flight, while faults are injected at random, seeded points; after each round, once the
reconcile loops have had their time, the invariants are checked (tests/chaos/invariants.py).

    python -m tests.chaos [--seed N] [--rounds N] [--beat-pause-s S] [--kube-outage-s S]
    python -m tests.chaos --short      # the version `make test` runs (tests/chaos/test_chaos.py)

docs/operator-guide.md "Reliability" says what it shows."""
