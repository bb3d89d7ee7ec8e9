"""The __main__ of the Python test files: exit 77 (a CTest skip) when torch is missing or
everything asked for was skipped, 1 on a failure."""
import sys
import unittest


def main(have_torch, why=""):
    if not have_torch:
        print("SKIP: torch is not importable (%s)" % why)
        sys.exit(77)
    result = unittest.main(module="__main__", exit=False).result
    if not result.wasSuccessful():
        sys.exit(1)
    if result.testsRun and len(result.skipped) == result.testsRun:
        sys.exit(77)  # everything asked for was skipped: CTest reports a skip, not a pass
