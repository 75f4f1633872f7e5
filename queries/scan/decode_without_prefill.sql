-- id: decode_without_prefill
-- kind: anomaly
-- title: Requests finished on a decode node with no matching prefill record
-- returns: one decode-side record of generated output (decode ReqTimeStats or request.finished) whose rid and bootstrap room appear in no prefill node's log. Usually a gap in the prefill logs (a node's file missing or rotated away), sometimes a room collision; listed for a look, not a suspect by itself.
-- params: none
-- Only meaningful for disaggregated serving: when no event at all is marked as prefill, nothing is returned.
WITH prefill AS (
  SELECT rid, bootstrap_room FROM engine_events WHERE role = 'prefill'
)
SELECT d.node, d.time, d.event, d.rid, d.bootstrap_room, d.output_len,
       (SELECT min(k.request_id) FROM exchange_keys k WHERE k.engine_rid = d.rid OR k.bootstrap_room = d.bootstrap_room) AS request_id
FROM decode_output d
WHERE EXISTS (SELECT 1 FROM prefill)
  AND EXISTS (SELECT 1 FROM engine_events e WHERE e.node = d.node AND e.role = 'decode')
  AND NOT EXISTS (
    SELECT 1 FROM prefill p
    WHERE (d.rid IS NOT NULL AND p.rid = d.rid) OR (d.bootstrap_room IS NOT NULL AND p.bootstrap_room = d.bootstrap_room)
  )
ORDER BY d.time NULLS LAST, d.node, d.rid, d.bootstrap_room
