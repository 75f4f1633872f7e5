-- id: transfer_failures
-- kind: anomaly
-- title: Failed KV transfers: prefill bootstrap failures, decode transfer failures, KVTransferError lines
-- returns: one engine line reporting a failed transfer between prefill and decode, with the request it names (when the gateway logs know it) and whether that request still produced output. The engine aborts such a request and the customer gets an error, so these are listed for a look; one that still shows output is listed again in transfer_fault_output.
-- params: none
SELECT e.node, e.role, e.time, e.event, e.rid, e.bootstrap_room,
       (SELECT min(k.request_id) FROM exchange_keys k WHERE k.engine_rid = e.rid OR k.bootstrap_room = e.bootstrap_room) AS request_id,
       EXISTS (SELECT 1 FROM decode_output d WHERE d.rid = e.rid OR d.bootstrap_room = e.bootstrap_room) AS output_produced,
       e.source_file, e.source_line
FROM engine_events e
WHERE e.event IN ('bootstrap_failed', 'transfer_failed', 'kv_transfer_error')
ORDER BY e.time NULLS LAST, e.node, e.source_file, e.source_line
