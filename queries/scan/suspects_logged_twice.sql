-- id: suspects_logged_twice
-- kind: anomaly
-- title: Suspect responses logged twice under two customer ids (one exchange, two ids)
-- returns: one pair of exchanges on the case's models inside the window, both of a size that makes a suspect (a prompt count whose band reaches the ceiling), under two customer ids, with the same answer and the same end of the prompt, received within 10 s of each other, one's run holding the other's where both logged when it ended (clocks 1 s apart at most), else received within 1 s: one exchange logged twice (a second gateway in front of the first logging under its own ids and account names, or one customer's two ids). Both ids are named recipients, though one customer received the answer: check the ids before notifying.
-- param: models VARCHAR[] the case's model names (a row matches on the name asked for or the routed name)
-- param: window_start TIMESTAMPTZ first instant of the incident window (inclusive)
-- param: window_end TIMESTAMPTZ end of the incident window (exclusive)
-- param: ceiling BIGINT the real pool ceiling in tokens
WITH big AS (
  -- (texts as forensics.match.findings._logged_rows compares them: CRLF as LF, no white space at their end; a
  -- completion time before the call was received, or hours after, is none)
  SELECT DISTINCT request_id, tenant_id, received_at,
         CASE WHEN completed_at >= received_at AND completed_at <= received_at + INTERVAL 1 HOUR THEN completed_at END
           AS completed_at,
         md5(rtrim(replace(response_text, chr(13) || chr(10), chr(10)), ' ' || chr(9) || chr(10) || chr(13))) AS answer,
         right(rtrim(replace(coalesce(prompt_text, ''), chr(13) || chr(10), chr(10)), ' ' || chr(9) || chr(10) || chr(13)),
               256) AS prompt_end
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
 -- the one call's time in both logs, as forensics.match.findings._same_exchange has it: where both logged when it
 -- ended, one's run holds the other's give or take two gateways' clocks (1 s) at each end (a gateway in front receives
 -- the call first and sees it end last); where one did not, received within 1 s of each other
 AND abs(epoch_us(a.received_at) - epoch_us(b.received_at)) <= 10000000
 AND (CASE WHEN a.completed_at IS NULL OR b.completed_at IS NULL
           THEN abs(epoch_us(a.received_at) - epoch_us(b.received_at)) <= 1000000
           ELSE (epoch_us(a.received_at) <= epoch_us(b.received_at) + 1000000
                 AND epoch_us(b.completed_at) <= epoch_us(a.completed_at) + 1000000)
             OR (epoch_us(b.received_at) <= epoch_us(a.received_at) + 1000000
                 AND epoch_us(a.completed_at) <= epoch_us(b.completed_at) + 1000000) END)
GROUP BY a.request_id, a.tenant_id, b.request_id, b.tenant_id  -- one pair per two requests, however many rows each
ORDER BY received_at, a.request_id, a.tenant_id, other_request_id, other_tenant_id
