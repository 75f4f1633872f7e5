-- id: context_corruption
-- kind: anomaly
-- title: Context-corruption lines (bootstrap room mismatch), with both requests named
-- returns: one engine line where a decode node saw a request (rid, bootstrap_room) receive metadata from another bootstrap room: the victim request and the request that owned the other room (the side whose data may have crossed), when the gateway logs know them, and whether the victim still produced output. Listed for a look: SGLang aborts the victim request when it detects the mismatch, so this is the guard working, not a leak; a victim that still shows output is listed again in transfer_fault_output.
-- params: none
WITH by_rid AS (SELECT engine_rid, min(request_id) AS request_id FROM exchange_keys GROUP BY engine_rid),
by_room AS (
  SELECT bootstrap_room, min(request_id) AS request_id FROM exchange_keys WHERE bootstrap_room IS NOT NULL GROUP BY bootstrap_room
),
victim AS (
  SELECT e.node, e.time, e.source_file, e.source_line, e.rid, e.bootstrap_room, e.other_bootstrap_room,
         coalesce(r1.request_id, r2.request_id) AS request_id, r3.request_id AS other_request_id,
         coalesce(e.rid IN (SELECT rid FROM decode_output WHERE rid IS NOT NULL), false)
           OR coalesce(e.bootstrap_room IN (SELECT bootstrap_room FROM decode_output WHERE bootstrap_room IS NOT NULL), false)
           AS output_produced
  FROM engine_events e
  LEFT JOIN by_rid r1 ON r1.engine_rid = e.rid
  LEFT JOIN by_room r2 ON r2.bootstrap_room = e.bootstrap_room
  LEFT JOIN by_room r3 ON r3.bootstrap_room = e.other_bootstrap_room
  WHERE e.event = 'context_corruption'
)
SELECT v.node, v.time, v.rid, v.bootstrap_room, v.other_bootstrap_room,
       v.request_id, x.tenant_id, v.other_request_id, o.tenant_id AS other_tenant_id,
       v.output_produced, v.source_file, v.source_line
FROM victim v
LEFT JOIN exchanges x ON x.request_id = v.request_id
LEFT JOIN exchanges o ON o.request_id = v.other_request_id
QUALIFY row_number() OVER (PARTITION BY v.source_file, v.source_line, v.node, v.rid, v.bootstrap_room
                           ORDER BY x.tenant_id NULLS LAST, o.tenant_id NULLS LAST) = 1
ORDER BY v.time NULLS LAST, v.node, v.source_file, v.source_line
