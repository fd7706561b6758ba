"""The load test (`make load`, issue 31 "Load"): against the platform's real processes as `make
run` serves them (tests/chaos/stack.py), Locust (tests/load/locustfile.py) drives simulated
people browsing the console and polling the API, orders and terminations at a person's pace,
while 1,024 node agents report every 15 s with their node tokens from a gevent process of their
own (tests/load/fleet.py: Locust's own process would add tens of ms to each of their requests),
beat's metering tick and the queue running; the simulated people rise stage by stage until p99
(the agents' reports and the people's requests together) passes 500 ms or a request fails.

    python -m tests.load [--start 100] [--step 100] [--max 1500] [--stage-s 45] [--nodes 1024]

It prints each stage's figures, the load held at p99 ≤ 200 ms with no error, and where it
saturates; docs/capacity.md keeps the figures measured."""
