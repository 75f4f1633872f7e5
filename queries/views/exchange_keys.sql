-- id: exchange_keys
-- kind: view
-- title: Engine join keys of every exchange
-- returns: one row per (exchange, bootstrap room) pair: the exchange's request id and tenant, the id the engine knew it by (`engine_rid`: the ingested `rid`, else the gateway request id), and a bootstrap room of that request (NULL when no engine record names one). A request seen under two rooms gives two rows.
-- params: none
-- Why a view: the engine logs name a request by `rid` on some lines and only by `bootstrap_room` on others; every engine query joins through this one mapping so they all agree on what "the same request" means.
WITH ex AS (
  SELECT request_id, tenant_id, coalesce(rid, request_id) AS engine_rid, bootstrap_room
  FROM exchanges
),
rooms AS (
  SELECT DISTINCT rid, bootstrap_room
  FROM engine_events
  WHERE rid IS NOT NULL AND bootstrap_room IS NOT NULL
)
SELECT DISTINCT ex.request_id, ex.tenant_id, ex.engine_rid, coalesce(r.bootstrap_room, ex.bootstrap_room) AS bootstrap_room
FROM ex LEFT JOIN rooms r ON r.rid = ex.engine_rid
UNION
SELECT request_id, tenant_id, engine_rid, bootstrap_room FROM ex WHERE bootstrap_room IS NOT NULL
