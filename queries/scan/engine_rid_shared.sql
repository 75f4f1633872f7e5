-- id: engine_rid_shared
-- kind: anomaly
-- title: Engine request ids that several exchanges carry: their engine records are attributed to none
-- returns: one exchange inside the window whose engine id (its rid, else its request id) appears in the engine logs and is also carried by another exchange, in the window or not (two customers sending the same client-supplied id, or two gateways). The engine logs name a request only by that id, so its records cannot be told apart: the scan attributes the engine's bug signature to none of them, and each is judged by its own prompt size alone. `engine_signature` says whether the shared id carries the bug's signature (over-limit on prefill, output on decode); those rows deserve a look by hand.
-- param: window_start TIMESTAMPTZ first instant of the incident window (inclusive)
-- param: window_end TIMESTAMPTZ end of the incident window (exclusive)
WITH in_window AS (
  SELECT request_id, tenant_id, coalesce(rid, request_id) AS engine_rid, model, received_at
  FROM exchanges
  WHERE coalesce(received_at, completed_at) >= $window_start AND coalesce(received_at, completed_at) < $window_end
),
shared AS (  -- counted over every exchange, as engine_signature and ingest count them
  SELECT coalesce(rid, request_id) AS engine_rid, count(DISTINCT (request_id, tenant_id)) AS exchanges_sharing
  FROM exchanges
  WHERE coalesce(rid, request_id) IN (SELECT rid FROM engine_events WHERE rid IS NOT NULL)
  GROUP BY 1
  HAVING count(DISTINCT (request_id, tenant_id)) > 1
),
over AS (
  SELECT DISTINCT rid FROM engine_events
  WHERE event IN ('over_limit', 'exceeds_max_tokens') AND rid IS NOT NULL AND role IS DISTINCT FROM 'decode'
),
rooms AS (
  SELECT DISTINCT rid, bootstrap_room FROM engine_events WHERE rid IS NOT NULL AND bootstrap_room IS NOT NULL
),
signature AS (
  SELECT o.rid FROM over o
  WHERE EXISTS (SELECT 1 FROM decode_output d WHERE d.rid = o.rid)
     OR EXISTS (SELECT 1 FROM decode_output d JOIN rooms r ON r.bootstrap_room = d.bootstrap_room WHERE r.rid = o.rid)
)
SELECT w.engine_rid, w.request_id, w.tenant_id, w.model, w.received_at, s.exchanges_sharing,
       w.engine_rid IN (SELECT rid FROM signature) AS engine_signature
FROM in_window w JOIN shared s ON s.engine_rid = w.engine_rid
ORDER BY w.engine_rid, w.request_id, w.tenant_id NULLS LAST, w.received_at NULLS LAST
