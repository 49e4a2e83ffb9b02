"""``lagd run``: wiring, the runtime and its collaborators, the typed snapshot, HTTP, metrics, sd_notify."""
