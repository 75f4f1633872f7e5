-- id: engine_signature
-- kind: suspect
-- title: The engine's own signature of the bug: over-limit on prefill, yet output was generated
-- returns: one response (on the case's models, inside the window) whose request the prefill side rejected as over the limit ("Input length ... exceeds the maximum allowed length" or "exceeds the maximum number of tokens") while a decode node nevertheless produced output for it (joined by rid or bootstrap_room), or the gateway received a non-empty answer; not a call made without streaming that the gateway logged as failed with no answer (nothing was delivered: undelivered_output lists those). A suspect whatever token count the gateway logged (the placeholder's 1 included). The engine logs name a request only by its rid (or bootstrap room): a rid that two exchanges carry (two customers sending the same client-supplied id), in the window or not, cannot be told apart, so its engine records make neither a suspect (listed in engine_rid_shared; each is still judged by its own prompt size). Ingest withholds such an id's engine keys from every exchange for the same reason. An over-limit count the exchange's own prompt cannot have (more tokens than any tokenizer makes of its logged text, the chat template's few tokens aside: a line naming another request under the id) is not its signature; ingest keeps the gateway's count for it and names it in the row's problems.
-- param: models VARCHAR[] the case's model names (a row matches on the name asked for or the routed name)
-- param: window_start TIMESTAMPTZ first instant of the incident window (inclusive)
-- param: window_end TIMESTAMPTZ end of the incident window (exclusive)
-- param: band_tokens_per_byte BIGINT most tokens a tokenizer makes of one byte of text (forensics.tokens)
-- param: template_tokens_per_message BIGINT tokens a chat template may add per message (forensics.tokens)
-- param: template_tokens_fixed BIGINT tokens a chat template may add per prompt (forensics.tokens)
WITH over_lines AS (
  SELECT rid, input_len, "limit", node
  FROM engine_events
  WHERE event IN ('over_limit', 'exceeds_max_tokens') AND rid IS NOT NULL AND role IS DISTINCT FROM 'decode'
),
over AS (  -- per exchange, the over-limit lines its prompt can have (its whole text known: forensics.tokens.band_bound)
  SELECT x.request_id, x.tenant_id, o.rid, max(o.input_len) AS engine_input_len, max(o."limit") AS engine_limit,
         string_agg(DISTINCT o.node, ';' ORDER BY o.node) AS over_limit_nodes
  FROM exchanges x JOIN over_lines o ON o.rid = coalesce(x.rid, x.request_id)
  WHERE x.prompt_bytes IS NULL OR coalesce(x.prompt_truncated, false) OR coalesce(x.prompt_nontext_parts, 0) > 0
     OR o.input_len IS NULL
     OR o.input_len <= $band_tokens_per_byte * x.prompt_bytes
                       + $template_tokens_per_message * greatest(coalesce(x.prompt_messages, 1), 1) + $template_tokens_fixed
  GROUP BY x.request_id, x.tenant_id, o.rid
),
attributable AS (  -- engine ids that name exactly one exchange: an over-limit line of a long prompt sent
  -- before the window must not make a later one-line question with the same id a suspect
  SELECT coalesce(rid, request_id) AS engine_rid
  FROM exchanges
  GROUP BY 1
  HAVING count(DISTINCT (request_id, tenant_id)) = 1
),
linked AS (  -- two equi-joins rather than one OR join: DuckDB turns an OR join into a nested loop
  SELECT k.request_id, k.tenant_id, d.node, d.output_len
  FROM exchange_keys k JOIN decode_output d ON d.rid = k.engine_rid
  UNION ALL
  SELECT k.request_id, k.tenant_id, d.node, d.output_len
  FROM exchange_keys k JOIN decode_output d ON d.bootstrap_room = k.bootstrap_room
),
decoded AS (
  SELECT request_id, tenant_id, string_agg(DISTINCT node, ';' ORDER BY node) AS decode_nodes, max(output_len) AS decode_output_len
  FROM linked GROUP BY request_id, tenant_id
)
SELECT
  x.request_id, x.tenant_id, x.model, x.received_at, x.reported_prompt_tokens,
  o.engine_input_len, o.engine_limit, o.over_limit_nodes, d.decode_nodes, d.decode_output_len,
  length(coalesce(x.response_text, '')) > 0 AS gateway_answer
FROM exchanges x
JOIN over o ON o.request_id = x.request_id AND o.tenant_id IS NOT DISTINCT FROM x.tenant_id
JOIN attributable a ON a.engine_rid = o.rid
LEFT JOIN decoded d ON d.request_id = x.request_id AND d.tenant_id IS NOT DISTINCT FROM x.tenant_id
WHERE (list_contains($models, x.model) OR list_contains($models, x.model_routed))
  AND coalesce(x.received_at, x.completed_at) >= $window_start
  AND coalesce(x.received_at, x.completed_at) < $window_end
  AND (d.request_id IS NOT NULL OR length(coalesce(x.response_text, '')) > 0 OR coalesce(x.completion_tokens, 0) > 0)
  -- a call made without streaming that the gateway logged as failed, with no answer and no output tokens: its answer
  -- would have been sent whole at the end, so the customer received the error, not what the decode node generated
  -- (undelivered_output lists those)
  AND NOT (x.stream IS NOT DISTINCT FROM false AND x.status IS NOT DISTINCT FROM 'failure'
           AND length(coalesce(x.response_text, '')) = 0 AND coalesce(x.completion_tokens, 0) = 0)
ORDER BY x.request_id, x.tenant_id
