-- The pipeline of the file-fault tests (tests/checkpoint/test_file_faults.py): Python inserts into
-- FILE sinks (JSONL and Parquet) and a materialized view; no broker, so a run takes seconds.
CREATE SOURCE IF NOT EXISTS ev (k VARCHAR, seq BIGINT, ts BIGINT NOT NULL, v BIGINT,
                                WATERMARK FOR ts AS ts - INTERVAL '0' SECOND);
CREATE STREAM IF NOT EXISTS ev_seq AS SELECT k, seq FROM ev;
CREATE STREAM IF NOT EXISTS ev_win AS
    SELECT k, window_start, count(*) AS n, sum(v) AS s FROM ev GROUP BY k, tumble(ts, INTERVAL '1' SECOND);
CREATE MATERIALIZED VIEW IF NOT EXISTS totals AS SELECT k, count(*) AS n, sum(v) AS s FROM ev GROUP BY k;
CREATE SINK IF NOT EXISTS ev_seq_out FROM ev_seq INTO FILE (path = '${OUT}/ev_seq', format = 'jsonl');
CREATE SINK IF NOT EXISTS ev_win_out FROM ev_win INTO FILE (path = '${OUT}/ev_win', format = 'parquet');
