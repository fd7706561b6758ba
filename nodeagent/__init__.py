"""Starverse node agent: reads NVML on a GPU node and reports to the platform.

Runs on every GPU node (a DaemonSet in production). Standard library + `pynvml` only, and only
`nodeagent.nvml` imports `pynvml`, so `nodeagent.metrics` and `nodeagent.report` can be imported
by the platform (or anywhere) without an NVIDIA driver. This package never imports Django.

Layout:
    metrics.py  metric names (after dcgm-exporter) shared with the platform
    source.py   the `GpuSource` interface every source implements, and the report's value types
    nvml.py     the real source: NVML through pynvml (or an injected pynvml-like call layer)
    fixture.py  a pynvml-like call layer replaying a recorded fixture (tests, demos)
    record.py   records such a fixture from the real NVML (`python -m nodeagent record`)
    sim.py      a simulated source following a Kubernetes cluster's GPU pods (development)
    report.py   the report contract, and the reporter (POST, retries, bounded backlog)
    agent.py    the sampling loop
"""

__version__ = "0.1.0"
AGENT_VERSION = __version__
