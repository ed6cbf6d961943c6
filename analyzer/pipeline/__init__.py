"""Orchestration: analyse one file (or one shard of it), run many files over processes, carry open
connections across rotated files and stitch their rows.
"""
