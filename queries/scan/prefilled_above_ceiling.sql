-- id: prefilled_above_ceiling
-- kind: anomaly
-- title: Prompts at or above the ceiling that a prefill node prefilled whole
-- returns: one response on the case's models inside the window whose prompt a prefill node shows prefilled whole with at least the tokens the ceiling refuses (`prefilled_tokens`), with no over-limit line naming it (`prefilled_whole`, by an engine rid that names this exchange alone). That node's pool held it, so no placeholder took its place: it is not a suspect, whatever its count. Many such rows mean the ceiling is not this model's pool (the smallest of several, or a number given too low).
-- param: models VARCHAR[] the case's model names (a row matches on the name asked for or the routed name)
-- param: window_start TIMESTAMPTZ first instant of the incident window (inclusive)
-- param: window_end TIMESTAMPTZ end of the incident window (exclusive)
-- param: ceiling BIGINT the real pool ceiling in tokens
SELECT x.request_id, x.tenant_id, x.model, x.received_at, x.prompt_tokens, p.input_len AS prefilled_tokens,
       x.prefill_node
FROM exchanges x JOIN prefilled_whole p ON p.rid = x.rid
WHERE (list_contains($models, x.model) OR list_contains($models, x.model_routed))
  AND coalesce(x.received_at, x.completed_at) >= $window_start
  AND coalesce(x.received_at, x.completed_at) < $window_end
  AND p.input_len >= $ceiling - 1
ORDER BY x.received_at NULLS LAST, x.request_id, x.tenant_id
