-- The source's accounts. Runs once, when the source's datadir is first
-- initialised (/docker-entrypoint-initdb.d of the official mysql image).
-- Demo passwords: everything listens on the compose network and loopback only.

-- The replica's replication account.
CREATE USER 'repl'@'%' IDENTIFIED BY 'demo-repl';
GRANT REPLICATION SLAVE ON *.* TO 'repl'@'%';

-- `lagd heartbeat` (the heartbeat service): writes percona.heartbeat, and
-- reads the binary log status for the row's coordinates.
CREATE USER 'heartbeat'@'%' IDENTIFIED BY 'demo-heartbeat';
GRANT SELECT, INSERT, UPDATE, CREATE ON percona.* TO 'heartbeat'@'%';
GRANT REPLICATION CLIENT ON *.* TO 'heartbeat'@'%';
