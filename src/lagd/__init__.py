"""lagd: replication-lag mitigation daemon for MySQL and MariaDB replicas."""

__version__ = "0.1.0"
