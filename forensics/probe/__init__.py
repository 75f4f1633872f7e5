"""``forensics probe``: the pre-launch canary check and ceiling finder for a chat endpoint.

Library only (no printing): :func:`probe` runs the check and returns a :class:`ProbeResult`;
:func:`write_report` writes probe.json and probe.md. See forensics.probe.core for the checks.
"""

from forensics.probe.client import ChatClient, ClientSettings, Reply
from forensics.probe.core import (
    DEFAULT_LEVELS,
    DEFAULT_MAX_TOTAL_TOKENS,
    Calibration,
    CeilingResult,
    ProbeResult,
    ProbeSettings,
    RequestRecord,
    api_key_from_env,
    check_out_dir,
    finding_text,
    parse_levels,
    plan_tokens,
    probe,
    summary_markdown,
    write_report,
)

__all__ = [
    "DEFAULT_LEVELS", "DEFAULT_MAX_TOTAL_TOKENS", "Calibration", "CeilingResult", "ChatClient", "ClientSettings",
    "ProbeResult", "ProbeSettings", "Reply", "RequestRecord", "api_key_from_env", "check_out_dir", "finding_text", "parse_levels",
    "plan_tokens", "probe", "summary_markdown", "write_report",
]
