"""Whole-version operations on top of the read and write paths: verify, diff, gc."""
