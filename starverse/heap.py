"""The start-up heap, moved out of the cyclic garbage collector's way.

A web or Celery worker imports Django, the apps, their models, URL patterns, serializers and
translations once, and keeps them for its whole life. CPython's collector nevertheless walks
all of them at every full (oldest-generation) collection, and a worker placing orders at full
speed triggers those often: in `order_throughput` they cost about a quarter of the orders'
CPU. `gc.freeze()` moves every object alive now to a permanent generation the collector skips
(new objects are collected as before). Called once a process, after start-up: the WSGI
module, each Celery worker process, and a benchmark's client playing a web worker. Frozen
objects are not freed while the process lives, which for start-up state is what happens
anyway; and pages a forking server shares stay shared (the collector no longer writes their
headers)."""

import gc


def freeze_startup_heap() -> None:
    gc.collect()  # what start-up made and dropped goes first, then the rest is frozen
    gc.freeze()
