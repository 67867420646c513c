-- Retransmissions per algorithm per hour across hosts, from a fleet's
-- Hive-partitioned per-ACK traces (examples/fleet/daemon.toml: layout =
-- "hive") copied into one tree:
--   traces/host=<host>/date=<YYYY-MM-DD>/hour=<HH>/trace-*.parquet
-- Run it in the directory that holds traces/:
--   duckdb -c ".read /path/to/examples/fleet/query.sql"
--   python3 -c "import duckdb; print(duckdb.sql(open('/path/to/query.sql').read()))"
--
-- total_retrans is the socket's cumulative count (tcp_sock.total_retrans)
-- at each traced ACK, so a flow's retransmissions within an hour are its
-- largest minus its smallest value there, plus what it had before its first
-- event of the hour (the previous hour's last value). flow_id is unique per
-- socket on a host until reboot: (host, flow_id) names a flow fleet-wide.
-- `host` is both a partition key and a column in the data: DuckDB reads
-- the same value either way.
WITH events AS (
    SELECT host, algo, flow_id, ts_ns, total_retrans,
           CAST(date AS VARCHAR) AS date, CAST(hour AS INTEGER) AS hour
    FROM read_parquet('traces/**/*.parquet', hive_partitioning = true)
),
per_flow_hour AS (
    SELECT host, algo, flow_id, date, hour,
           max(total_retrans) AS last_retrans,
           min(total_retrans) AS first_retrans
    FROM events
    GROUP BY ALL
),
with_previous AS (
    SELECT *,
           lag(last_retrans) OVER (PARTITION BY host, flow_id ORDER BY date, hour)
               AS previous_hour_last
    FROM per_flow_hour
)
SELECT date, hour, algo,
       count(DISTINCT host) AS hosts,
       count(*) AS flows,
       sum(last_retrans - coalesce(previous_hour_last, first_retrans)) AS retransmissions
FROM with_previous
GROUP BY ALL
ORDER BY date, hour, algo;
