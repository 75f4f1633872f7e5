-- id: signature_outside_scope
-- kind: anomaly
-- title: The engine's bug signature outside the case's scope (other model, model unknown, outside the window, or no gateway record)
-- returns: one engine rid that carries the bug signature (over-limit on prefill, output on decode) but is not a suspect because its gateway record is on another model (or names none), falls outside the window, or is missing. Any row here means the window, the model list or the gateway logs deserve a second look.
-- param: models VARCHAR[] the case's model names (a row matches on the name asked for or the routed name)
-- param: window_start TIMESTAMPTZ first instant of the incident window (inclusive)
-- param: window_end TIMESTAMPTZ end of the incident window (exclusive)
WITH over AS (
  SELECT rid, max(input_len) AS engine_input_len, min(time) AS first_seen
  FROM engine_events
  WHERE event IN ('over_limit', 'exceeds_max_tokens') AND rid IS NOT NULL AND role IS DISTINCT FROM 'decode'
  GROUP BY rid
),
rooms AS (
  SELECT DISTINCT rid, bootstrap_room FROM engine_events WHERE rid IS NOT NULL AND bootstrap_room IS NOT NULL
),
signature AS (
  SELECT o.* FROM over o
  WHERE EXISTS (SELECT 1 FROM decode_output d WHERE d.rid = o.rid)
     OR EXISTS (SELECT 1 FROM decode_output d JOIN rooms r ON r.bootstrap_room = d.bootstrap_room WHERE r.rid = o.rid)
)
SELECT s.rid, s.first_seen, s.engine_input_len, x.request_id, x.tenant_id, x.model, x.model_routed, x.received_at,
       CASE
         WHEN x.request_id IS NULL THEN 'no gateway record'
         WHEN x.model IS NULL AND x.model_routed IS NULL THEN 'model unknown'
         WHEN NOT coalesce(list_contains($models, x.model) OR list_contains($models, x.model_routed), false) THEN 'other model'
         ELSE 'outside window'
       END AS why
FROM signature s
LEFT JOIN exchanges x ON coalesce(x.rid, x.request_id) = s.rid
WHERE x.request_id IS NULL
   OR NOT coalesce(list_contains($models, x.model) OR list_contains($models, x.model_routed), false)
   OR NOT (coalesce(x.received_at, x.completed_at) >= $window_start AND coalesce(x.received_at, x.completed_at) < $window_end)
   OR coalesce(x.received_at, x.completed_at) IS NULL
ORDER BY s.first_seen NULLS LAST, s.rid, x.request_id, x.tenant_id NULLS LAST, x.received_at NULLS LAST, x.model NULLS LAST,
         x.model_routed NULLS LAST
