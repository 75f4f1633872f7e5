-- id: transfer_fault_output
-- kind: anomaly
-- title: Context corruption or a failed KV transfer, yet output was generated
-- returns: one response (on the case's models, inside the window) whose request the engine logged with a context-corruption line (its decode side received another bootstrap room's metadata), a failed prefill bootstrap, a failed decode transfer or a KVTransferError, and for which a decode node or the gateway nevertheless shows generated output. The first rows to look at among the engine anomalies.
-- Not a suspect by itself: SGLang aborts the request on each of these (prepare_abort before the transfer is
-- committed), so the guard fired and nothing was generated from the wrong pages; output seen afterwards is
-- normally a retry. The incident's bug is the opposite case -- no guard fired (see engine_signature).
-- The engine names a request only by its rid (or bootstrap room): when another exchange (in the window or not) carries
-- the same id (two customers sending the same client-supplied id), the engine line may be either's, and
-- `engine_id_shared` is true (see engine_rid_shared).
-- param: models VARCHAR[] the case's model names (a row matches on the name asked for or the routed name)
-- param: window_start TIMESTAMPTZ first instant of the incident window (inclusive)
-- param: window_end TIMESTAMPTZ end of the incident window (exclusive)
WITH faults AS (
  SELECT k.request_id, k.tenant_id, e.event
  FROM exchange_keys k JOIN engine_events e ON e.rid = k.engine_rid
  WHERE e.event IN ('context_corruption', 'bootstrap_failed', 'transfer_failed', 'kv_transfer_error')
  UNION ALL
  SELECT k.request_id, k.tenant_id, e.event
  FROM exchange_keys k JOIN engine_events e ON e.bootstrap_room = k.bootstrap_room
  WHERE e.event IN ('context_corruption', 'bootstrap_failed', 'transfer_failed', 'kv_transfer_error')
),
fault_kinds AS (
  SELECT request_id, tenant_id, string_agg(DISTINCT event, ';' ORDER BY event) AS fault_events
  FROM faults GROUP BY request_id, tenant_id
),
shared AS (  -- engine ids that several exchanges carry, in the window or not
  SELECT coalesce(rid, request_id) AS engine_rid
  FROM exchanges
  GROUP BY 1
  HAVING count(DISTINCT (request_id, tenant_id)) > 1
),
linked AS (
  SELECT k.request_id, k.tenant_id FROM exchange_keys k JOIN decode_output d ON d.rid = k.engine_rid
  UNION
  SELECT k.request_id, k.tenant_id FROM exchange_keys k JOIN decode_output d ON d.bootstrap_room = k.bootstrap_room
)
SELECT x.request_id, x.tenant_id, x.model, x.received_at, f.fault_events,
       l.request_id IS NOT NULL AS decode_output, length(coalesce(x.response_text, '')) > 0 AS gateway_answer,
       coalesce(x.rid, x.request_id) IN (SELECT engine_rid FROM shared) AS engine_id_shared
FROM exchanges x
JOIN fault_kinds f ON f.request_id = x.request_id AND f.tenant_id IS NOT DISTINCT FROM x.tenant_id
LEFT JOIN linked l ON l.request_id = x.request_id AND l.tenant_id IS NOT DISTINCT FROM x.tenant_id
WHERE (list_contains($models, x.model) OR list_contains($models, x.model_routed))
  AND coalesce(x.received_at, x.completed_at) >= $window_start
  AND coalesce(x.received_at, x.completed_at) < $window_end
  AND (l.request_id IS NOT NULL OR length(coalesce(x.response_text, '')) > 0)
ORDER BY x.request_id, x.tenant_id
