"""One way to print a size (starverse.core.sizes): timelines, datasets, endpoint sources."""

import pytest

from starverse.core.sizes import format_size


@pytest.mark.parametrize(
    ("size", "text"),
    [
        (0, "0 B"),
        (999, "999 B"),
        (1_000, "1.0 kB"),
        (1_250, "1.3 kB"),  # half up, as the timeline printed pulled images
        (1_249, "1.2 kB"),
        (35_126_702, "35.1 MB"),
        (999_960_000, "1.0 GB"),  # rounds up into the next unit, never "1000.0 MB"
        (15_011_627_008, "15.0 GB"),
        (141_107_412_992, "141.1 GB"),
        (1_500_000_000_000, "1.5 TB"),
        (2_000_000_000_000_000_000, "2000.0 PB"),
    ],
)
def test_format_size(size, text):
    assert format_size(size) == text
