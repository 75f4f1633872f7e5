-- id: room_owners
-- kind: view
-- title: The exchange a bootstrap room names
-- returns: one row per bootstrap room of `exchange_keys`: the request id and tenant of the exchange it names, each only when every exchange under the room agrees (NULL otherwise), and `exchanges_named`, how many (request id, tenant) exchanges it could be.
-- params: none
-- Why a view: the same rule as rid_owners, for the engine lines that name a request only by its room.
SELECT bootstrap_room,
       CASE WHEN count(DISTINCT request_id) = 1 THEN min(request_id) END AS request_id,
       CASE WHEN count(DISTINCT (request_id, tenant_id)) = 1 THEN min(tenant_id) END AS tenant_id,
       count(DISTINCT (request_id, tenant_id)) AS exchanges_named
FROM exchange_keys
WHERE bootstrap_room IS NOT NULL
GROUP BY bootstrap_room
