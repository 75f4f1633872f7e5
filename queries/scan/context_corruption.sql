-- id: context_corruption
-- kind: anomaly
-- title: Context-corruption lines (bootstrap room mismatch), with both requests named
-- returns: one engine line where a decode node saw a request (rid, bootstrap_room) receive metadata from another bootstrap room: the victim request and the request that owned the other room (the side whose data may have crossed), when the gateway logs know them, and whether the victim still produced output. Listed for a look: SGLang aborts the victim request when it detects the mismatch, so this is the guard working, not a leak; a victim that still shows output is listed again in transfer_fault_output.
-- params: none
-- A rid (or room) that several exchanges carry (two customers sending the same client-supplied id) names no
-- tenant: `tenant_id` is NULL and `exchanges_named` says how many exchanges it could be (the request id is
-- given when they all share it). The engine logs cannot tell them apart; picking one would be a guess.
WITH victim AS (
  SELECT e.node, e.time, e.source_file, e.source_line, e.rid, e.bootstrap_room, e.other_bootstrap_room,
         CASE WHEN r1.engine_rid IS NOT NULL THEN r1.request_id ELSE r2.request_id END AS request_id,
         CASE WHEN r1.engine_rid IS NOT NULL THEN r1.tenant_id ELSE r2.tenant_id END AS tenant_id,
         coalesce(r1.exchanges_named, r2.exchanges_named, 0) AS exchanges_named,
         r3.request_id AS other_request_id, r3.tenant_id AS other_tenant_id,
         coalesce(r3.exchanges_named, 0) AS other_exchanges_named,
         coalesce(e.rid IN (SELECT rid FROM decode_output WHERE rid IS NOT NULL), false)
           OR coalesce(e.bootstrap_room IN (SELECT bootstrap_room FROM decode_output WHERE bootstrap_room IS NOT NULL), false)
           AS output_produced
  FROM engine_events e
  LEFT JOIN rid_owners r1 ON r1.engine_rid = e.rid
  LEFT JOIN room_owners r2 ON r2.bootstrap_room = e.bootstrap_room
  LEFT JOIN room_owners r3 ON r3.bootstrap_room = e.other_bootstrap_room
  WHERE e.event = 'context_corruption'
)
SELECT node, time, rid, bootstrap_room, other_bootstrap_room, request_id, tenant_id, exchanges_named,
       other_request_id, other_tenant_id, other_exchanges_named, output_produced, source_file, source_line
FROM victim
ORDER BY time NULLS LAST, node, source_file, source_line
