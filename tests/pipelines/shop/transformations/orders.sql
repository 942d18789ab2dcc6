-- Bronze -> silver: every order event processed once, test orders left out.
CREATE STREAMING TABLE orders
COMMENT 'orders, each raw row processed once'
AS SELECT order_id, customer_id, amount
FROM STREAM(raw_orders)
WHERE status <> 'test';
