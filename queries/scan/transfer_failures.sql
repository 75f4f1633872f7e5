-- id: transfer_failures
-- kind: anomaly
-- title: Failed KV transfers: prefill bootstrap failures, decode transfer failures, KVTransferError lines
-- returns: one engine line reporting a failed transfer between prefill and decode, with the request it names (when the gateway logs know it) and whether that request still produced output. The engine aborts such a request and the customer gets an error, so these are listed for a look; one that still shows output is listed again in transfer_fault_output.
-- params: none
-- A rid (or room) that several exchanges carry (two customers sending the same client-supplied id) names no
-- tenant: `tenant_id` is NULL and `exchanges_named` says how many exchanges it could be (the request id is
-- given when they all share it). The engine logs cannot tell them apart; picking one would be a guess.
SELECT e.node, e.role, e.time, e.event, e.rid, e.bootstrap_room,
       CASE WHEN r1.engine_rid IS NOT NULL THEN r1.request_id ELSE r2.request_id END AS request_id,
       CASE WHEN r1.engine_rid IS NOT NULL THEN r1.tenant_id ELSE r2.tenant_id END AS tenant_id,
       coalesce(r1.exchanges_named, r2.exchanges_named, 0) AS exchanges_named,
       coalesce(e.rid IN (SELECT rid FROM decode_output WHERE rid IS NOT NULL), false)
         OR coalesce(e.bootstrap_room IN (SELECT bootstrap_room FROM decode_output WHERE bootstrap_room IS NOT NULL), false)
         AS output_produced,
       e.source_file, e.source_line
FROM engine_events e
LEFT JOIN rid_owners r1 ON r1.engine_rid = e.rid
LEFT JOIN room_owners r2 ON r2.bootstrap_room = e.bootstrap_room
WHERE e.event IN ('bootstrap_failed', 'transfer_failed', 'kv_transfer_error')
ORDER BY e.time NULLS LAST, e.node, e.source_file, e.source_line
