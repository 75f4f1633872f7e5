-- id: exposure_band
-- kind: summary
-- title: The exposure band by day: requests between the real ceiling and the advertised window
-- returns: one row per (UTC day, model, prefill node, decode node) with the number of requests whose trusted prompt count was at or above the real ceiling less one (what the engine refuses) and within the advertised window (the prompts the service accepted but could not hold), how many of them fell inside the incident window, and how many were above the advertised window. Every model is listed, not only the case's: the surface of the incident.
-- param: window_start TIMESTAMPTZ first instant of the incident window (inclusive)
-- param: window_end TIMESTAMPTZ end of the incident window (exclusive)
-- param: ceiling BIGINT the real pool ceiling in tokens
-- param: advertised_window BIGINT the advertised context window in tokens (NULL when unknown: no upper bound)
WITH x AS (
  SELECT coalesce(received_at, completed_at) AS t, coalesce(model, model_routed) AS model,
         prefill_node, decode_node, prompt_tokens
  FROM exchanges
  WHERE prompt_tokens >= $ceiling - 1 AND  -- refused from the pool less one (above_ceiling)
    coalesce(received_at, completed_at) IS NOT NULL
)
SELECT strftime(timezone('UTC', t), '%Y-%m-%d') AS day, model, prefill_node, decode_node,
       count(*) FILTER (WHERE $advertised_window IS NULL OR prompt_tokens <= $advertised_window) AS requests,
       count(*) FILTER (WHERE ($advertised_window IS NULL OR prompt_tokens <= $advertised_window)
                          AND t >= $window_start AND t < $window_end) AS in_window,
       count(*) FILTER (WHERE prompt_tokens > $advertised_window) AS above_advertised,
       max(prompt_tokens) AS max_prompt_tokens
FROM x
GROUP BY ALL
ORDER BY day, model NULLS LAST, prefill_node NULLS LAST, decode_node NULLS LAST
