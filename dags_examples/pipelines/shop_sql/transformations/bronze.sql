-- Bronze: every landed order event, processed once (a streaming table is a
-- continual task; its first tick takes what had landed before).
CREATE STREAMING TABLE order_events
COMMENT 'order events as landed, each processed once'
AS SELECT order_id, customer, day, amount_cents, status
FROM STREAM(landed_events)
WHERE order_id IS NOT NULL;
