"""Prefetch: read the relay log ahead of the SQL thread and warm the pages it will need.

``rewrite`` (row changes -> batched index probes) and ``rewrite_sql`` (probe SQL,
statement-based DML -> SELECT) are pure; see docs/prefetch.md.
"""
