"""lagctl: the on-call command line (one module per command)."""
