-- Bronze: every raw event processed once, test events left out (a continual task).
CREATE STREAMING TABLE events AS
SELECT event_id, customer_id, amount
FROM STREAM(raw_events)
WHERE kind <> 'test';
