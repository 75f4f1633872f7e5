-- id: suspects_logged_twice
-- kind: anomaly
-- title: Suspect responses logged twice under two customer ids (one exchange, two ids)
-- returns: one pair of requests on the case's models inside the window, both of a size that makes a suspect (a prompt count whose band reaches the ceiling), under two customer ids, that are one exchange logged twice as forensics.match.findings._same_exchange tells it: the same answer, one request's prompt (the same; one after blocks a gateway adds of its own, system messages or tools; where a log cut one short, the same first 512 and last 1024 characters; or none logged, with the same reported usage), received within 10 s of each other, and one's run holding the other's give or take 1 s at each end (where one logged no completion time, only the same long prompt, or one after a gateway's own blocks with the same usage reported, passes). A second gateway in front of the first logging under its own ids and account names, or one customer's two ids: both ids are named recipients, though one customer received the answer; check the ids before notifying.
-- param: models VARCHAR[] the case's model names (a row matches on the name asked for or the routed name)
-- param: window_start TIMESTAMPTZ first instant of the incident window (inclusive)
-- param: window_end TIMESTAMPTZ end of the incident window (exclusive)
-- param: ceiling BIGINT the real pool ceiling in tokens
-- Texts are compared with CRLF as LF and no white space at their end; a completion time before the call began, or
-- over an hour after, is none. The prompts are read for the pairs the answers and times give, not for every suspect.
WITH big AS (
  SELECT DISTINCT request_id, tenant_id, received_at,
         CASE WHEN completed_at >= received_at AND completed_at <= received_at + INTERVAL 1 HOUR THEN completed_at END
           AS completed_at,
         md5(rtrim(replace(response_text, chr(13) || chr(10), chr(10)), ' ' || chr(9) || chr(10) || chr(13))) AS answer
  FROM exchanges
  WHERE (list_contains($models, model) OR list_contains($models, model_routed))
    AND received_at >= $window_start AND received_at < $window_end
    AND length(coalesce(response_text, '')) > 0 AND tenant_id IS NOT NULL
    AND coalesce(prompt_tokens_high, prompt_tokens) >= $ceiling - 1
),
timed AS (
  SELECT DISTINCT a.request_id AS a_id, a.tenant_id AS a_tenant, b.request_id AS b_id, b.tenant_id AS b_tenant,
         a.received_at AS a_received, b.received_at AS b_received,
         a.completed_at IS NOT NULL AND b.completed_at IS NOT NULL AS both_ended,
         coalesce((epoch_us(a.received_at) <= epoch_us(b.received_at) + 1000000
                   AND epoch_us(b.completed_at) <= epoch_us(a.completed_at) + 1000000)
                  OR (epoch_us(b.received_at) <= epoch_us(a.received_at) + 1000000
                      AND epoch_us(a.completed_at) <= epoch_us(b.completed_at) + 1000000), false) AS one_holds_other
  FROM big a JOIN big b ON a.answer = b.answer AND a.tenant_id < b.tenant_id
   AND abs(epoch_us(a.received_at) - epoch_us(b.received_at)) <= 10000000
),
prompts AS (
  SELECT DISTINCT request_id, tenant_id, coalesce(prompt_truncated, false) AS cut, reported_prompt_tokens AS usage,
         rtrim(replace(coalesce(prompt_text, ''), chr(13) || chr(10), chr(10)), ' ' || chr(9) || chr(10) || chr(13)) AS prompt
  FROM exchanges
  WHERE request_id IN (SELECT a_id FROM timed UNION SELECT b_id FROM timed)
),
alike AS (  -- how the two prompts are one request's, as forensics.match.findings._prompts_alike has it
  SELECT t.*,
         CASE
           WHEN pa.prompt = '' OR pb.prompt = '' THEN CASE WHEN pa.usage = pb.usage THEN 'unknown' END
           WHEN pa.prompt = pb.prompt THEN CASE WHEN length(pa.prompt) >= 64 THEN 'same' ELSE 'short' END
           WHEN starts_with(pb.prompt, '<|') AND length(pa.prompt) > length(pb.prompt) AND ends_with(pa.prompt, pb.prompt)
             AND (starts_with(left(pa.prompt, length(pa.prompt) - length(pb.prompt)), '<|') AND ends_with(left(pa.prompt, length(pa.prompt) - length(pb.prompt)), chr(10) || chr(10)) AND list_bool_and(list_transform(string_split(substr(left(pa.prompt, length(pa.prompt) - length(pb.prompt)), 3, length(left(pa.prompt, length(pa.prompt) - length(pb.prompt))) - 4), chr(10) || chr(10) || '<|'), lambda x: split_part(x, '|>', 1) IN ('system', 'developer', 'tools')))) THEN 'held'
           WHEN starts_with(pa.prompt, '<|') AND length(pb.prompt) > length(pa.prompt) AND ends_with(pb.prompt, pa.prompt)
             AND (starts_with(left(pb.prompt, length(pb.prompt) - length(pa.prompt)), '<|') AND ends_with(left(pb.prompt, length(pb.prompt) - length(pa.prompt)), chr(10) || chr(10)) AND list_bool_and(list_transform(string_split(substr(left(pb.prompt, length(pb.prompt) - length(pa.prompt)), 3, length(left(pb.prompt, length(pb.prompt) - length(pa.prompt))) - 4), chr(10) || chr(10) || '<|'), lambda x: split_part(x, '|>', 1) IN ('system', 'developer', 'tools')))) THEN 'held'
           WHEN (pa.cut OR pb.cut) AND length(pa.prompt) >= 1536 AND length(pb.prompt) >= 1536
             AND left(pa.prompt, 512) = left(pb.prompt, 512) AND right(pa.prompt, 1024) = right(pb.prompt, 1024) THEN 'cut'
         END AS how,
         coalesce(pa.usage = pb.usage, false) AS same_usage
  FROM timed t
  JOIN prompts pa ON pa.request_id = t.a_id AND pa.tenant_id = t.a_tenant
  JOIN prompts pb ON pb.request_id = t.b_id AND pb.tenant_id = t.b_tenant
)
-- where one logged no completion time, only the same long prompt, or one after a gateway's own blocks with the same usage,
-- passes over it
SELECT a_id AS request_id, a_tenant AS tenant_id, b_id AS other_request_id, b_tenant AS other_tenant_id,
       min(a_received) AS received_at, min(b_received) AS other_received_at
FROM alike
WHERE how IS NOT NULL AND (one_holds_other OR (NOT both_ended AND (how = 'same' OR (how = 'held' AND same_usage))))
GROUP BY a_id, a_tenant, b_id, b_tenant  -- one pair per two requests, however many rows each
ORDER BY received_at, request_id, tenant_id, other_request_id, other_tenant_id
