-- id: suspects_logged_twice
-- kind: anomaly
-- title: Suspect responses logged twice under two customer ids (one exchange, two ids)
-- returns: one pair of exchanges on the case's models inside the window, both of a size that makes a suspect (a prompt count whose band reaches the ceiling), under two customer ids, with the same answer and the same end of the prompt, received within 10 s of each other and running at the same time (clocks 1 s apart at most): one exchange logged twice (a second gateway in front of the first logging under its own ids and account names, or one customer's two ids). Both ids are named recipients, though one customer received the answer: check the ids before notifying.
-- param: models VARCHAR[] the case's model names (a row matches on the name asked for or the routed name)
-- param: window_start TIMESTAMPTZ first instant of the incident window (inclusive)
-- param: window_end TIMESTAMPTZ end of the incident window (exclusive)
-- param: ceiling BIGINT the real pool ceiling in tokens
WITH big AS (
  SELECT DISTINCT request_id, tenant_id, received_at, completed_at,
         md5(response_text) AS answer, right(coalesce(prompt_text, ''), 256) AS prompt_end
  FROM exchanges
  WHERE (list_contains($models, model) OR list_contains($models, model_routed))
    AND received_at >= $window_start AND received_at < $window_end
    AND length(coalesce(response_text, '')) > 0 AND tenant_id IS NOT NULL
    AND coalesce(prompt_tokens_high, prompt_tokens) >= $ceiling - 1
)
SELECT a.request_id, a.tenant_id, b.request_id AS other_request_id, b.tenant_id AS other_tenant_id,
       min(a.received_at) AS received_at, min(b.received_at) AS other_received_at
FROM big a JOIN big b
  ON a.answer = b.answer AND a.prompt_end = b.prompt_end AND a.tenant_id < b.tenant_id
 AND abs(epoch_us(a.received_at) - epoch_us(b.received_at)) <= 10000000
 -- running at the same time (two gateways' clocks 1 s apart at most): where both logged when they completed, their
 -- times overlap; where one did not, they were received within 1 s (a source that ended before the other began is no
 -- copy of it, as forensics.match.findings._same_exchange has it)
 AND (CASE WHEN a.completed_at IS NULL OR b.completed_at IS NULL
           THEN abs(epoch_us(a.received_at) - epoch_us(b.received_at)) <= 1000000
           ELSE epoch_us(a.received_at) <= epoch_us(b.completed_at) + 1000000
                AND epoch_us(b.received_at) <= epoch_us(a.completed_at) + 1000000 END)
GROUP BY a.request_id, a.tenant_id, b.request_id, b.tenant_id  -- one pair per two requests, however many rows each
ORDER BY received_at, a.request_id, a.tenant_id, other_request_id, other_tenant_id
