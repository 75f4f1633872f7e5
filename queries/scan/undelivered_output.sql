-- id: undelivered_output
-- kind: anomaly
-- title: Calls made without streaming that failed at the gateway, though a decode node generated their answer
-- returns: one response on the case's models inside the window that would be a suspect by its size (a prompt count reaching the ceiling, or an over-limit line naming it) but was made without streaming (`stream` false) and logged by the gateway as a failure with no answer and no output tokens, while a decode node logged output for it (by an engine rid that names this exchange alone). Such an answer is sent whole at the end: the customer received the error (a timeout, say), not the generated text, so it is no suspect and names nobody. Listed so that an analyst can check the gateway delivered nothing (its status code, a client's log).
-- param: models VARCHAR[] the case's model names (a row matches on the name asked for or the routed name)
-- param: window_start TIMESTAMPTZ first instant of the incident window (inclusive)
-- param: window_end TIMESTAMPTZ end of the incident window (exclusive)
-- param: ceiling BIGINT the real pool ceiling in tokens
WITH attributable AS (  -- engine ids that name exactly one exchange
  SELECT coalesce(rid, request_id) AS engine_rid
  FROM exchanges
  GROUP BY 1
  HAVING count(DISTINCT (request_id, tenant_id)) = 1
),
generated AS (
  SELECT rid, string_agg(DISTINCT node, ';' ORDER BY node) AS decode_nodes, max(output_len) AS decode_output_len
  FROM decode_output WHERE rid IS NOT NULL GROUP BY rid
),
over AS (
  SELECT DISTINCT rid FROM engine_events
  WHERE event IN ('over_limit', 'exceeds_max_tokens') AND rid IS NOT NULL AND role IS DISTINCT FROM 'decode'
)
SELECT x.request_id, x.tenant_id, x.model, x.received_at, x.completed_at, x.status_code, x.prompt_tokens,
       o.rid IS NOT NULL AS over_limit_line, g.decode_nodes, g.decode_output_len
FROM exchanges x
JOIN attributable a ON a.engine_rid = coalesce(x.rid, x.request_id)
JOIN generated g ON g.rid = coalesce(x.rid, x.request_id)
LEFT JOIN over o ON o.rid = coalesce(x.rid, x.request_id)
WHERE (list_contains($models, x.model) OR list_contains($models, x.model_routed))
  AND coalesce(x.received_at, x.completed_at) >= $window_start
  AND coalesce(x.received_at, x.completed_at) < $window_end
  AND x.stream IS NOT DISTINCT FROM false AND x.status IS NOT DISTINCT FROM 'failure'
  AND length(coalesce(x.response_text, '')) = 0 AND coalesce(x.completion_tokens, 0) = 0
  AND (o.rid IS NOT NULL OR coalesce(x.prompt_tokens_high, x.prompt_tokens) >= $ceiling - 1)
ORDER BY x.received_at NULLS LAST, x.request_id, x.tenant_id
