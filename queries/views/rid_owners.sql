-- id: rid_owners
-- kind: view
-- title: The exchange an engine rid names
-- returns: one row per engine rid (`exchange_keys.engine_rid`): the request id and tenant of the exchange it names, each only when every exchange carrying the rid agrees (NULL otherwise), and `exchanges_named`, how many (request id, tenant) exchanges carry it.
-- params: none
-- Why a view: two customers may send the same client-supplied id; the engine logs cannot tell them apart, so
-- every engine query names a tenant only when one exchange carries the id, and they all decide it here.
SELECT engine_rid,
       CASE WHEN count(DISTINCT request_id) = 1 THEN min(request_id) END AS request_id,
       CASE WHEN count(DISTINCT (request_id, tenant_id)) = 1 THEN min(tenant_id) END AS tenant_id,
       count(DISTINCT (request_id, tenant_id)) AS exchanges_named
FROM exchange_keys
GROUP BY engine_rid
