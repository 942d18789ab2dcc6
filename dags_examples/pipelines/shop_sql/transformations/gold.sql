-- A temporary view is no table: it is inlined into its readers.
CREATE TEMPORARY VIEW paid_orders AS
SELECT customer, day, amount_cents FROM orders_valid WHERE amount_cents > 0;

-- Gold: orders and revenue per customer and day.
CREATE MATERIALIZED VIEW revenue_daily
PARTITIONED BY (day)
AS SELECT customer, day, COUNT(*) AS orders, SUM(amount_cents) AS revenue_cents
FROM paid_orders
GROUP BY customer, day;
