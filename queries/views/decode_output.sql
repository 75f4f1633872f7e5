-- id: decode_output
-- kind: view
-- title: Engine records of a request that produced output on a decode (non-prefill) node
-- returns: one row per engine event showing generated output: a decode `ReqTimeStats` with output_len > 0, or a `request.finished` with completion tokens or text on a node that is not a prefill node. Columns: node, event, rid, bootstrap_room, output_len, time.
-- params: none
-- A node whose role the logs do not tell (a non-disaggregated server) counts: it decodes too.
SELECT node, event, rid, bootstrap_room, coalesce(output_len, completion_tokens, length(output_text)) AS output_len, time
FROM engine_events
WHERE role IS DISTINCT FROM 'prefill'
  AND (
    (event = 'req_time_stats' AND role = 'decode' AND coalesce(output_len, 0) > 0)
    OR (event = 'request_finished' AND (coalesce(completion_tokens, 0) > 0 OR length(coalesce(output_text, '')) > 0))
  )
