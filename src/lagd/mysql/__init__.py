"""Everything that talks to a MySQL or MariaDB server, and the only place that knows their dialects.

Endpoint and sessions (``endpoint``), server flavor and replica status
(``replica``), the status monitor (``monitor``), driver errors turned into
lagd's (``errors``) and reconnect backoff (``backoff``). No module outside
this package (and the sandbox, which starts servers) imports a MySQL driver.
"""
