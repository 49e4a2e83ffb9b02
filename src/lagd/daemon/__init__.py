"""``lagd run``: wiring, the runtime and its collaborators, the typed snapshot, HTTP, metrics, sd_notify.

:func:`command` is the ``lagd`` command (not called ``main``: the submodule
``lagd.daemon.main`` would shadow that name once imported). It takes
SIGTERM/SIGINT over before the heavy imports (about a second on a busy
host), so a stop request while lagd is still starting ends it cleanly
(exit 0), not by the signal; once the event loop runs, the daemon's own
handlers take over.
"""

from __future__ import annotations

import signal


def _stop_before_start(signum: int, _frame: object) -> None:
    raise SystemExit(0)


def command() -> None:
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, _stop_before_start)
    from lagd.daemon.main import main  # noqa: PLC0415 - after the handlers, on purpose

    main()
