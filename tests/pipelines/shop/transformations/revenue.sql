-- Silver -> gold: revenue per customer and region (customers change: updates, deletes).
CREATE MATERIALIZED VIEW customer_revenue
TBLPROPERTIES ('team' = 'shop')
AS SELECT o.customer_id, c.region, SUM(o.amount) AS revenue, COUNT(*) AS orders
FROM orders AS o JOIN customers AS c ON o.customer_id = c.customer_id
GROUP BY o.customer_id, c.region;

-- Inlined into its reader, never a table.
CREATE TEMPORARY VIEW repeat_customers AS
SELECT region, revenue FROM customer_revenue WHERE orders > 1;

CREATE MATERIALIZED VIEW region_revenue AS
SELECT region, SUM(revenue) AS revenue, COUNT(*) AS customers
FROM repeat_customers
GROUP BY region;
