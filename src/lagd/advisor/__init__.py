"""Advice on big transactions and on the settings that make replicas lag.

- :mod:`~lagd.advisor.lookahead`: big transactions seen in the relay log
  before the SQL thread reaches them, classified (load_data, insert_select,
  bulk_update, bulk_delete, bulk_insert, other).
- :mod:`~lagd.advisor.model`: the apply rate this replica really achieves.
- :mod:`~lagd.advisor.split`: how to commit a big transaction in chunks.
- :mod:`~lagd.advisor.settings`: one pure rule per server setting.
- :mod:`~lagd.advisor.gather`: variables and status read over SQL.

Everything but ``gather`` is pure: values in, a verdict and its reason out.
See docs/advisor.md.
"""

from lagd.advisor.gather import gather_settings, load_tmpdir_free_bytes, status_deltas
from lagd.advisor.lookahead import (
    Lookahead,
    LookaheadConfig,
    LookaheadStats,
    TransactionSummary,
    TxKind,
    classify,
    classify_statement,
)
from lagd.advisor.model import ApplyRate, ApplyRateModel
from lagd.advisor.settings import (
    RULES,
    SQL_LOG_BIN_NOTE,
    Advice,
    AdvisorError,
    ServerSettings,
    Severity,
    advise,
)
from lagd.advisor.split import SplitAdvice, SplitLimits, split_advice

__all__ = [
    "RULES",
    "SQL_LOG_BIN_NOTE",
    "Advice",
    "AdvisorError",
    "ApplyRate",
    "ApplyRateModel",
    "Lookahead",
    "LookaheadConfig",
    "LookaheadStats",
    "ServerSettings",
    "Severity",
    "SplitAdvice",
    "SplitLimits",
    "TransactionSummary",
    "TxKind",
    "advise",
    "classify",
    "classify_statement",
    "gather_settings",
    "load_tmpdir_free_bytes",
    "split_advice",
    "status_deltas",
]
