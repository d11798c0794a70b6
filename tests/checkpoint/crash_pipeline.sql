-- The pipeline of the crash-loop test (tests/checkpoint/test_crash_loop.py): Python inserts and
-- a Kafka source, into FILE (JSONL, Parquet), Kafka (exactly-once) and Delta Lake sinks.
CREATE SOURCE IF NOT EXISTS ev (k VARCHAR, seq BIGINT, ts BIGINT NOT NULL, v BIGINT,
                                WATERMARK FOR ts AS ts - INTERVAL '0' SECOND);
CREATE SOURCE IF NOT EXISTS kev (k VARCHAR, seq BIGINT, ts BIGINT NOT NULL, v BIGINT,
                                 WATERMARK FOR ts AS ts - INTERVAL '0' SECOND)
    FROM KAFKA (brokers = '${BROKERS}', topic = '${IN_TOPIC}', format = 'json', offset_reset = 'earliest');
CREATE STREAM IF NOT EXISTS ev_seq AS SELECT k, seq FROM ev;
CREATE STREAM IF NOT EXISTS kev_seq AS SELECT k, seq FROM kev;
CREATE STREAM IF NOT EXISTS ev_win AS
    SELECT k, window_start, count(*) AS n, sum(v) AS s FROM ev GROUP BY k, tumble(ts, INTERVAL '1' SECOND);
CREATE STREAM IF NOT EXISTS kev_win AS
    SELECT k, window_start, count(*) AS n, sum(v) AS s FROM kev GROUP BY k, tumble(ts, INTERVAL '1' SECOND);
CREATE SINK IF NOT EXISTS ev_seq_out FROM ev_seq INTO FILE (path = '${OUT}/ev_seq', format = 'jsonl');
CREATE SINK IF NOT EXISTS kev_seq_out FROM kev_seq INTO FILE (path = '${OUT}/kev_seq', format = 'jsonl');
CREATE SINK IF NOT EXISTS ev_win_out FROM ev_win INTO FILE (path = '${OUT}/ev_win', format = 'parquet');
CREATE SINK IF NOT EXISTS ev_win_kafka FROM ev_win
    INTO KAFKA (brokers = '${BROKERS}', topic = '${OUT_TOPIC}', format = 'json', delivery.guarantee = 'exactly-once');
CREATE SINK IF NOT EXISTS kev_win_delta FROM kev_win
    INTO DELTA_LAKE (path = '${OUT}/kev_win_delta', write_mode = 'append');
