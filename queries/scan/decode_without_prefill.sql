-- id: decode_without_prefill
-- kind: anomaly
-- title: Requests finished on a decode node with no matching prefill record
-- returns: one decode-side record of generated output (decode ReqTimeStats or request.finished) whose rid and bootstrap room appear in no prefill node's log. Usually a gap in the prefill logs (a node's file missing or rotated away), sometimes a room collision; listed for a look, not a suspect by itself.
-- params: none
-- Only meaningful for disaggregated serving: when no event at all is marked as prefill, nothing is returned.
WITH prefill_rids AS (
  SELECT DISTINCT rid FROM engine_events WHERE role = 'prefill' AND rid IS NOT NULL
),
prefill_rooms AS (
  SELECT DISTINCT bootstrap_room FROM engine_events WHERE role = 'prefill' AND bootstrap_room IS NOT NULL
),
by_rid AS (SELECT engine_rid, min(request_id) AS request_id FROM exchange_keys GROUP BY engine_rid),
by_room AS (
  SELECT bootstrap_room, min(request_id) AS request_id FROM exchange_keys WHERE bootstrap_room IS NOT NULL GROUP BY bootstrap_room
)
-- Anti-joins (NOT IN over NULL-free sets) rather than NOT EXISTS with an OR: the OR form is a
-- nested loop, minutes on a few hundred thousand requests.
SELECT d.node, d.time, d.event, d.rid, d.bootstrap_room, d.output_len,
       coalesce(r1.request_id, r2.request_id) AS request_id
FROM decode_output d
LEFT JOIN by_rid r1 ON r1.engine_rid = d.rid
LEFT JOIN by_room r2 ON r2.bootstrap_room = d.bootstrap_room
WHERE EXISTS (SELECT 1 FROM engine_events WHERE role = 'prefill')
  AND d.node IN (SELECT node FROM engine_events WHERE role = 'decode')
  AND (d.rid IS NULL OR d.rid NOT IN (SELECT rid FROM prefill_rids))
  AND (d.bootstrap_room IS NULL OR d.bootstrap_room NOT IN (SELECT bootstrap_room FROM prefill_rooms))
ORDER BY d.time NULLS LAST, d.node, d.rid, d.bootstrap_room
