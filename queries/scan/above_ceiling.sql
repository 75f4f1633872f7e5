-- id: above_ceiling
-- kind: suspect
-- title: Prompts above the real KV-pool ceiling, on the case's models, inside the window
-- returns: one response whose prompt, by its trusted token count (never the placeholder's reported 1), did not fit in the real pool: the low end of its count's band is at or above the ceiling. Requests that failed with no response text and no output tokens are left out (nothing was delivered); a stream that broke after output tokens were counted (by the gateway, or by a decode node's log) still delivered them, while a call made without streaming that failed delivered nothing, whatever a decode node generated (undelivered_output lists those). A prompt a prefill node shows prefilled whole, with no over-limit line naming it, is left out too: that node's pool held it (prefilled_above_ceiling lists them).
-- param: models VARCHAR[] the case's model names (a row matches on the name asked for or the routed name)
-- param: window_start TIMESTAMPTZ first instant of the incident window (inclusive)
-- param: window_end TIMESTAMPTZ end of the incident window (exclusive)
-- param: ceiling BIGINT the real pool ceiling in tokens
-- A prompt of `ceiling` - 1 tokens already does not fit: SGLang refuses an input of at least its limit, the pool
-- less one ("exceeds the maximum allowed length (681279 tokens)" for a 681280-token pool; forensics.tokens.refused_from).
SELECT
  x.request_id, x.tenant_id, x.model, x.received_at,
  x.prompt_tokens, x.prompt_tokens_source, x.prompt_tokens_low, x.prompt_tokens_high,
  x.reported_prompt_tokens
FROM exchanges x
WHERE (list_contains($models, x.model) OR list_contains($models, x.model_routed))
  AND coalesce(x.received_at, x.completed_at) >= $window_start
  AND coalesce(x.received_at, x.completed_at) < $window_end
  AND coalesce(x.prompt_tokens_low, x.prompt_tokens) >= $ceiling - 1
  AND NOT (x.status IS NOT DISTINCT FROM 'failure' AND length(coalesce(x.response_text, '')) = 0
           AND coalesce(x.completion_tokens, 0) = 0
           -- a decode node that generated output for it (its id naming no other exchange): the stream delivered
           -- tokens before it broke, whatever the gateway kept of it. Not a call made without streaming: its answer
           -- is sent whole at the end, so one that failed delivered nothing, whatever the decode node generated
           -- (undelivered_output lists those)
           AND (x.stream IS NOT DISTINCT FROM false
                OR NOT EXISTS (SELECT 1 FROM decode_output d
                               WHERE d.rid = coalesce(x.rid, x.request_id)
                                 AND (SELECT count(DISTINCT (e.request_id, e.tenant_id)) FROM exchanges e
                                      WHERE coalesce(e.rid, e.request_id) = d.rid) = 1)))
  -- a prefill node prefilled it whole, no over-limit line naming it (prefilled_above_ceiling lists them): its pool
  -- held the prompt, so no placeholder took its place (x.rid: the engine lines are this exchange's alone)
  AND NOT EXISTS (SELECT 1 FROM prefilled_whole p WHERE p.rid = x.rid AND p.input_len >= $ceiling - 1)
ORDER BY x.request_id, x.tenant_id
