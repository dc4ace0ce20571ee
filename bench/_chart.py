"""The latency chart for the README: per-turn stage timeline (voice_server, one session, from
the client's clock) beside Pipecat's voice-to-voice, and p50/p95 by concurrency."""

from __future__ import annotations

from typing import Any

STAGES = [("stt_done", "pause + speech to text", "#66c2a5"),
          ("llm_first_token", "LLM first token", "#fc8d62"),
          ("first_audio", "first piece + TTS", "#e78ac3"),
          (None, "transport to ear", "#a6d854")]


COLORS = {"ours": "#fc8d62", "ours_embedded": "#8da0cb", "pipecat": "#999999"}
LABELS = {"ours": "voice_server (shared LLM server)",
          "ours_embedded": "voice_server (embedded LLM)",
          "pipecat": "Pipecat (shared LLM server)"}


def stage_bars(turn: dict[str, Any], record: dict[str, Any]) -> list[tuple[float, float]]:
    """(start, width) in ms from the end of the user's speech, one per stage: the server's own
    stage times (its turn record, from the end of the speech it heard), then the client's ear.
    The end-of-turn decision is not a stage: the answer starts before it (held until it)."""
    at = record.get("at", {})
    bars, prev = [], 0.0
    for key, _, _ in STAGES:
        t = turn["v2v_ms"] if key is None else at.get(key)
        end = prev if t is None else max(prev, t)
        bars.append((prev, end - prev))
        prev = end
    return bars


def timeline_chart(result: dict[str, Any], path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    phase = result["local_llm"]
    one = phase["ours"].get("sessions_1", {})
    turns, records = one.get("_turns", []), one.get("_records", [])
    if len(turns) != len(records):  # paired by position: a missing record shifts every bar
        raise ValueError(f"{len(turns)} turns but {len(records)} server turn records")
    ours = [(t, r) for t, r in zip(turns, records, strict=True) if t["first_loud"]]
    theirs = [t for t in phase.get("pipecat", {}).get("sessions_1", {}).get("_turns", [])
              if t["first_loud"]]
    if not ours:  # the printed JSON leaves the per-turn data out: an empty timeline otherwise
        raise ValueError("no per-turn data: draw from the file bench/voice_latency.py --json "
                         "wrote, not from its printed output")
    fig, (ax, ax2) = plt.subplots(1, 2, figsize=(13, 5), width_ratios=[3, 2])
    y = 0
    labels = []
    for i, (turn, record) in enumerate(ours):
        for (start, width), (_, name, color) in zip(stage_bars(turn, record), STAGES,
                                                    strict=True):
            ax.barh(y, width, left=start, color=color, label=name if i == 0 else None)
        if record.get("end_of_turn_ms") is not None:
            ax.plot([record["end_of_turn_ms"]] * 2, [y - 0.4, y + 0.4], color="black", lw=2,
                    label="end of turn decided" if i == 0 else None)
        labels.append(f"voice_server #{i + 1}")
        y += 1
    for i, turn in enumerate(theirs):
        ax.barh(y, turn["v2v_ms"], color="#999999", label="Pipecat (total)" if i == 0 else None)
        labels.append(f"Pipecat #{i + 1}")
        y += 1
    ax.set_yticks(range(len(labels)), labels)
    ax.invert_yaxis()
    ax.set_xlabel("ms after the end of the user's speech (first agent audio at the bar's end)")
    ax.set_title("Voice-to-voice per turn, 1 session, same models (2 CPU cores)")
    ax.legend(loc="upper right", fontsize=8)
    levels = sorted(phase["ours"], key=lambda k: int(k.split("_")[1]))
    xs = range(len(levels))
    names = [n for n in ("ours", "ours_embedded", "pipecat") if n in phase]
    width = 0.8 / len(names)
    for k, name in enumerate(names):
        offset = (k - (len(names) - 1) / 2) * width
        color = COLORS[name]
        p50 = [phase[name].get(lv, {}).get("voice_to_voice_ms", {}).get("p50", 0) for lv in levels]
        p95 = [phase[name].get(lv, {}).get("voice_to_voice_ms", {}).get("p95", 0) for lv in levels]
        label = LABELS[name]
        ax2.bar([x + offset for x in xs], p95, width * 0.95, color=color, alpha=0.45,
                label=f"{label} p95")
        ax2.bar([x + offset for x in xs], p50, width * 0.95, color=color, label=f"{label} p50")
    ax2.set_xticks(list(xs), [lv.replace("sessions_", "") + " session(s)" for lv in levels])
    ax2.set_ylabel("voice-to-voice (ms)")
    ax2.set_title("By concurrent sessions")
    ax2.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
