"""The Starverse command line: a client of the REST API (/api/v1/) with no Django and no
dependency beyond the standard library."""

__version__ = "0.1.0"
