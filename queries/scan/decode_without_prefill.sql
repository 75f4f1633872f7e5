-- id: decode_without_prefill
-- kind: anomaly
-- title: Requests finished on a decode node with no matching prefill record
-- returns: one decode-side record of generated output (decode ReqTimeStats or request.finished) whose rid and bootstrap room appear in no prefill node's log. Usually a gap in the prefill logs (a node's file missing or rotated away), sometimes a room collision; listed for a look, not a suspect by itself.
-- params: none
-- A rid (or room) that several exchanges carry (two customers sending the same client-supplied id) names no
-- tenant: `tenant_id` is NULL and `exchanges_named` says how many exchanges it could be (the request id is
-- given when they all share it). The engine logs cannot tell them apart; picking one would be a guess.
-- Only meaningful for disaggregated serving: when no event at all is marked as prefill, nothing is returned.
WITH prefill_rids AS (
  SELECT DISTINCT rid FROM engine_events WHERE role = 'prefill' AND rid IS NOT NULL
),
prefill_rooms AS (
  SELECT DISTINCT bootstrap_room FROM engine_events WHERE role = 'prefill' AND bootstrap_room IS NOT NULL
)
-- Anti-joins (NOT IN over NULL-free sets) rather than NOT EXISTS with an OR: the OR form is a
-- nested loop, minutes on a few hundred thousand requests.
SELECT d.node, d.time, d.event, d.rid, d.bootstrap_room, d.output_len,
       CASE WHEN r1.engine_rid IS NOT NULL THEN r1.request_id ELSE r2.request_id END AS request_id,
       CASE WHEN r1.engine_rid IS NOT NULL THEN r1.tenant_id ELSE r2.tenant_id END AS tenant_id,
       coalesce(r1.exchanges_named, r2.exchanges_named, 0) AS exchanges_named
FROM decode_output d
LEFT JOIN rid_owners r1 ON r1.engine_rid = d.rid
LEFT JOIN room_owners r2 ON r2.bootstrap_room = d.bootstrap_room
WHERE EXISTS (SELECT 1 FROM engine_events WHERE role = 'prefill')
  AND d.node IN (SELECT node FROM engine_events WHERE role = 'decode')
  AND (d.rid IS NULL OR d.rid NOT IN (SELECT rid FROM prefill_rids))
  AND (d.bootstrap_room IS NULL OR d.bootstrap_room NOT IN (SELECT bootstrap_room FROM prefill_rooms))
ORDER BY d.time NULLS LAST, d.node, d.rid, d.bootstrap_room, d.event, d.output_len NULLS LAST, request_id NULLS LAST,
         tenant_id NULLS LAST
