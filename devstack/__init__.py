"""Development stand-ins for the outside systems (the Kubernetes API, Stripe). Product code never
imports this package; `make run`, the tests and the benchmarks do."""
