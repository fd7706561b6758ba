"""The load test (`make load`, issue 31 "Load"): Locust (tests/load/locustfile.py) against the
platform's real processes as `make run` serves them (tests/chaos/stack.py): simulated people
browsing the console and polling the API, orders and terminations at a person's pace, 1,024 node
agents reporting every 15 s with their node tokens, beat's metering tick and the queue running;
the simulated people rise stage by stage until p99 passes 500 ms or a request fails.

    python -m tests.load [--start 100] [--step 100] [--max 1500] [--stage-s 45] [--nodes 1024]

It prints each stage's figures, the load held at p99 ≤ 200 ms with no error, and where it
saturates; docs/capacity.md keeps the figures measured."""
