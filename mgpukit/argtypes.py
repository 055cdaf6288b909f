"""argparse types shared by the subcommands: each refuses a bad value in argparse's one line."""
from __future__ import annotations

import argparse
import json

from mgpukit.limits import seconds_problem

# Counts beyond any run (2^31 - 1 steps of a second are 68 years) are refused here, before they
# reach a C size or a loop that never ends.
MAX_COUNT = 2**31 - 1


def _whole_number(text: str, least: int, must: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < least:
        raise argparse.ArgumentTypeError(f"{value} must be {must}")
    if value > MAX_COUNT:
        raise argparse.ArgumentTypeError(f"{value} is too large (at most {MAX_COUNT})")
    return value


def positive_int(text: str) -> int:
    """argparse type: an integer >= 1."""
    return _whole_number(text, 1, "at least 1")


def nonnegative_int(text: str) -> int:
    """argparse type: an integer >= 0."""
    return _whole_number(text, 0, "0 or more")


def seconds(text: str) -> float:
    """argparse type of a timeout: seconds within the kit's stated bounds (`mgpukit.limits`)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if (problem := seconds_problem(value)) is not None:
        raise argparse.ArgumentTypeError(f"{text} {problem}")
    return value


def key_value(text: str) -> tuple[str, object]:
    """argparse type of `-o KEY=VALUE`: VALUE is read as JSON when it is (1, 0.5, true), else kept
    as a string."""
    key, eq, value = text.partition("=")
    if not eq or not key or not value:
        raise argparse.ArgumentTypeError(f"{text!r} is not KEY=VALUE; write e.g. -o bucket_mb=1")
    try:
        return key, json.loads(value)
    except json.JSONDecodeError:
        return key, value
