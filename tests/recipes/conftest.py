"""Fixtures for recipe tests: a real S3-compatible server on loopback (see tests/s3_server.py)."""

from tests.s3_server import s3, s3_server  # noqa: F401  (registered as fixtures)
