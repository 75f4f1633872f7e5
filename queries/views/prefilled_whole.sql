-- id: prefilled_whole
-- kind: view
-- title: Requests a prefill node shows prefilled whole, in a pool that held them, no over-limit line naming them
-- returns: one row per engine rid that a prefill node's `ReqTimeStats` (type=prefill) shows prefilled with more than the placeholder's one token, fewer than that node's startup line in effect then refuses (its pool, `max_total_num_tokens`, less one), where no over-limit line of the engine names that rid: `input_len`, the most tokens such a line names. The prompt fit that node's pool: no placeholder took its place.
-- params: none
-- Why: with the bug, a prompt over the pool is prefilled as the one-token placeholder (input_len=1) after an
-- over-limit line. A node that prefilled a prompt whole, in a pool its own startup line shows large enough, held it:
-- two models served by nodes with pools of their own put the smaller pool's ceiling on the other model's prompts,
-- and its customers were named recipients of answers nothing corrupted. A node with no startup line before the
-- prefill, or one whose pool could not hold what it logged, proves nothing.
WITH stats AS (
  SELECT rid, node, time, input_len FROM engine_events
  WHERE event = 'req_time_stats' AND role = 'prefill' AND rid IS NOT NULL AND input_len > 1 AND time IS NOT NULL
), pools AS (
  SELECT node, time, max(max_total_num_tokens) AS pool FROM engine_events
  WHERE event = 'startup' AND max_total_num_tokens IS NOT NULL AND time IS NOT NULL
  GROUP BY node, time
)
SELECT s.rid, max(s.input_len) AS input_len
FROM stats s ASOF JOIN pools p ON s.node = p.node AND s.time >= p.time
WHERE s.input_len < p.pool - 1  -- what that pool admits (it refuses from the pool less one: forensics.tokens.refused_from)
  AND s.rid NOT IN (SELECT rid FROM engine_events
                    WHERE event IN ('over_limit', 'exceeds_max_tokens') AND rid IS NOT NULL)
GROUP BY s.rid
