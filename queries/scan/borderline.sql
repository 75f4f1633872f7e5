-- id: borderline
-- kind: suspect
-- title: Borderline prompts: the token count's error band straddles the ceiling
-- returns: one response on the case's models inside the window whose prompt count is only known within a band (an estimate, typically from the text's length) that reaches the ceiling from below: it may or may not have overflowed the pool. Reported as a suspect with borderline = true; a tokenizer file or engine logs settle it.
-- param: models VARCHAR[] the case's model names (a row matches on the name asked for or the routed name)
-- param: window_start TIMESTAMPTZ first instant of the incident window (inclusive)
-- param: window_end TIMESTAMPTZ end of the incident window (exclusive)
-- param: ceiling BIGINT the real pool ceiling in tokens
SELECT
  x.request_id, x.tenant_id, x.model, x.received_at,
  x.prompt_tokens, x.prompt_tokens_source, x.prompt_tokens_low, x.prompt_tokens_high
FROM exchanges x
WHERE (list_contains($models, x.model) OR list_contains($models, x.model_routed))
  AND coalesce(x.received_at, x.completed_at) >= $window_start
  AND coalesce(x.received_at, x.completed_at) < $window_end
  -- (the engine refuses from `ceiling` - 1 tokens, as above_ceiling says)
  AND coalesce(x.prompt_tokens_low, x.prompt_tokens) < $ceiling - 1
  -- an estimate with no upper bound: the text of a prompt whose image, audio or file parts hold any number of tokens,
  -- logged with the placeholder's count (forensics.tokens): it reaches any ceiling
  AND (coalesce(x.prompt_tokens_high, x.prompt_tokens) >= $ceiling - 1
       OR (x.prompt_tokens_high IS NULL AND x.prompt_tokens_source = 'estimate'))
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
