"""What a restarted program says about where it resumed (the job's timeline line "Resumed from
step N"): read from its shipped log (instances.models.WorkloadLog), not guessed from the
checkpoint directory, whose format is the program's own.

A program tells it by printing, on a line of its own, either

    STARVERSE_RESUMED_STEP=<N>

(the convention for any program: a training script prints it after loading its checkpoint), or
the simulated trainer's ``resumed from step <N>`` (devstack.kube.trainer). The last such line
of an attempt's log counts."""

import re

RESUMED_LINE = re.compile(
    r"^\s*(?:STARVERSE_RESUMED_STEP=(\d+)|resumed from step (\d+))\s*$", re.MULTILINE
)
MAX_STEP = 2**62  # a larger "step" is not one (it would not fit the timeline's number)


def resumed_step(text: str) -> int | None:
    """The step the program says it resumed from in `text` (its last such line), or None."""
    step = None
    for found in RESUMED_LINE.finditer(text):
        value = int(found[1] or found[2])
        if value <= MAX_STEP:
            step = value
    return step
