"""Everything that talks to a MySQL or MariaDB server, and the only place that knows their dialects.

Where and as whom lagd connects, and how every session is hardened
(``endpoint``); blocking sessions run off the event loop (``session``); server
flavor, replica status and the relay-log index (``replica``); the async status
monitor (``monitor``); driver errors in lagd's words (``errors``), logged once
and then rarely (``faultlog``); the one reconnect schedule (``backoff``); column
character sets (``charsets``, no driver needed); what InnoDB's change buffer
takes (``changebuf``, pure); which statement probes EXPLAIN shows reading a
whole table (``plan``, pure). No module outside this
package (and the sandbox, which starts servers) imports a MySQL driver.
"""
