-- id: context_corruption
-- kind: anomaly
-- title: Context-corruption lines (bootstrap room mismatch), with both requests named
-- returns: one engine line where a decode node saw a request (rid, bootstrap_room) receive metadata from another bootstrap room: the victim request and the request that owned the other room (the side whose data may have crossed), when the gateway logs know them, and whether the victim still produced output. Listed for a look: SGLang aborts the victim request when it detects the mismatch, so this is the guard working, not a leak; a victim that still shows output is listed again in transfer_fault_output.
-- params: none
WITH victim AS (
  SELECT e.node, e.time, e.source_file, e.source_line, e.rid, e.bootstrap_room, e.other_bootstrap_room,
         (SELECT min(k.request_id) FROM exchange_keys k WHERE k.engine_rid = e.rid OR k.bootstrap_room = e.bootstrap_room) AS request_id,
         (SELECT min(k.request_id) FROM exchange_keys k WHERE k.bootstrap_room = e.other_bootstrap_room) AS other_request_id
  FROM engine_events e
  WHERE e.event = 'context_corruption'
)
SELECT v.node, v.time, v.rid, v.bootstrap_room, v.other_bootstrap_room,
       v.request_id, x.tenant_id, v.other_request_id, o.tenant_id AS other_tenant_id,
       EXISTS (SELECT 1 FROM decode_output d WHERE d.rid = v.rid OR d.bootstrap_room = v.bootstrap_room) AS output_produced,
       v.source_file, v.source_line
FROM victim v
LEFT JOIN exchanges x ON x.request_id = v.request_id
LEFT JOIN exchanges o ON o.request_id = v.other_request_id
ORDER BY v.time NULLS LAST, v.node, v.source_file, v.source_line
