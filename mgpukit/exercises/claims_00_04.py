"""The claims notebooks 00-04 make beside a table, checked on the executed notebook (`claims`).

Each function reads the table of the cell tagged `claim:<name>` and returns what is wrong, or None.
"""
from __future__ import annotations

from mgpukit.exercises.claims import claim, number, table  # noqa: F401
