-- The replica: lagd's account, then replication from the source. Runs once,
-- when the replica's datadir is first initialised (/docker-entrypoint-initdb.d);
-- compose starts the replica only after the source is healthy.

-- Local to the replica: not written to its binary log, so no errant GTIDs.
SET SESSION sql_log_bin = 0;

-- Exactly what lagd needs on MySQL 8.4 (README, "Grants"); '%' because lagd
-- connects from its own container.
CREATE USER 'lagd'@'%' IDENTIFIED BY 'demo-lagd';
GRANT SELECT, REPLICATION CLIENT ON *.* TO 'lagd'@'%';

-- GTID auto-positioning. GET_SOURCE_PUBLIC_KEY: caching_sha2_password over a
-- connection without TLS needs the source's RSA key.
CHANGE REPLICATION SOURCE TO
    SOURCE_HOST = 'source',
    SOURCE_PORT = 3306,
    SOURCE_USER = 'repl',
    SOURCE_PASSWORD = 'demo-repl',
    SOURCE_AUTO_POSITION = 1,
    GET_SOURCE_PUBLIC_KEY = 1,
    SOURCE_CONNECT_RETRY = 5;
-- Starts in the entrypoint's temporary server; the real server starts the
-- replica again by itself (the settings above are kept in mysql.*).
START REPLICA;
