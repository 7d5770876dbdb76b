"""Directors: who drives the canvas. The Flow-Director policy loop and the honest baselines (`direct`, `template`)."""

from flowsteer_mcp.director.episode import Director, EpisodeResult, TurnRecord

__all__ = ["Director", "EpisodeResult", "TurnRecord"]
