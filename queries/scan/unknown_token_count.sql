-- id: unknown_token_count
-- kind: anomaly
-- title: In-scope responses whose prompt size is unknown
-- returns: one response on the case's models inside the window with no trusted prompt token count (no text, no plausible figure, no engine record): the scan cannot say whether it overflowed the pool. A data gap, listed for a look.
-- param: models VARCHAR[] the case's model names (a row matches on the name asked for or the routed name)
-- param: window_start TIMESTAMPTZ first instant of the incident window (inclusive)
-- param: window_end TIMESTAMPTZ end of the incident window (exclusive)
SELECT x.request_id, x.tenant_id, x.model, x.received_at, x.reported_prompt_tokens, x.orphan, x.status
FROM exchanges x
WHERE (list_contains($models, x.model) OR list_contains($models, x.model_routed))
  AND coalesce(x.received_at, x.completed_at) >= $window_start
  AND coalesce(x.received_at, x.completed_at) < $window_end
  AND x.prompt_tokens IS NULL
ORDER BY x.received_at NULLS LAST, x.request_id, x.tenant_id
