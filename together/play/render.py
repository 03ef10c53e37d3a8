"""The report as JSON (sorted keys, indent 2) or as text: the same facts, one chat after another."""

from __future__ import annotations

import json

from together.play.scenario import PRESS_WORDS


def report_json(report: dict) -> str:
    return json.dumps(report, sort_keys=True, indent=2, ensure_ascii=False)


def _indent(text: str, prefix: str) -> str:
    lines = text.splitlines() or [""]
    return "\n".join([lines[0], *(prefix + line for line in lines[1:])])


def _args(args: dict) -> str:
    return json.dumps(args, sort_keys=True, ensure_ascii=False)


def report_text(report: dict) -> str:
    """The readable form: the same facts as the JSON, one chat after another."""
    out: list[str] = []
    head = f"Scenario {report.get('scenario', '')}".rstrip()
    count = len(report["chats"])
    out.append(f"{head}: {count} chat{'s' if count != 1 else ''}, {report['ticks']} ticks")
    if report.get("description"):
        out.append(report["description"])
    if report.get("error"):
        out.append(f"ERROR: {report['error']}")
    for chat in report["chats"]:
        out.append("")
        out.append(f"=== {chat['name']} ({chat['id']}): {chat['title']}")
        origin = chat["origin"] + (f" ({chat['origin_channel']})" if chat["origin_channel"] else "")
        out.append(
            f"folder {chat['folder']} · origin {origin} · mode {chat['mode']} · inbound "
            f"{chat['inbound']} · taint {chat['taint']} · status {chat['status']}"
            + (f" · person {chat['person']}" if chat.get("person", "owner") != "owner" else "")
        )
        out.append("Transcript")
        for entry in chat["transcript"] or []:
            prefix = f"  [{entry['reply'] or '-'}] {entry['role']} {entry['kind']}: "
            out.append(prefix + _indent(entry["text"], " " * len(prefix)))
        if not chat["transcript"]:
            out.append("  (empty)")
        out.append("Replies")
        for reply in chat["replies"]:
            tick = "" if reply.get("tick") is None else f" at tick {reply['tick']}"
            out.append(
                f"  reply {reply['number']} · {reply['state']} · started by "
                f"{reply['started_by']}{tick} · chain {reply['chain']} · lane {reply['lane']}"
            )
            if reply["end_reason"]:
                out.append(f"    why: {_indent(reply['end_reason'], '         ')}")
            for step in reply["steps"]:
                out.append(
                    f"    step {step['number']} · {step['tool']} · {step['family'] or '-'}"
                    f" · {step['effect']}"
                )
                out.append(f"      args: {_args(step['args'])}")
                if step["result"]:
                    out.append(f"      result: {_indent(step['result'], '        | ')}")
                if step["error"]:
                    out.append(f"      error: {_indent(step['error'], '        | ')}")
                if step["files"]:
                    out.append(f"      files: {', '.join(step['files'])}")
            if reply["waiting_for"]:
                waiting = reply["waiting_for"]
                out.append(f"    waiting for your OK: {waiting['tool']} {_args(waiting['args'])}")
            changed = ", ".join(reply["files_changed"]) or "(none)"
            out.append(f"    files changed: {changed}")
        if not chat["replies"]:
            out.append("  (none)")
        for title, key in (("Notes", "notes"), ("Cards", "cards")):
            out.append(title)
            for entry in chat[key]:
                prefix = f"  [{entry['reply'] or '-'}] {entry['role']}: "
                out.append(prefix + _indent(entry["text"], " " * len(prefix)))
            if not chat[key]:
                out.append("  (none)")
        out.extend(_messages_text(chat.get("messages", [])))
        out.extend(_waits_text(chat.get("waits", [])))
        out.extend(_trust_text(chat.get("trust", [])))
        if chat.get("presses"):
            out.append("Presses")
            for press in chat["presses"]:
                out.append(
                    f"  tick {press['at']} · pressed {PRESS_WORDS[press['action']]} · message "
                    f"{press['message']} ({press['id']}) · now {press['state']}"
                )
        out.append("Events")
        for event in chat["events"]:
            out.append(_event_line(event))
    if report.get("chains"):
        out.append("")
        out.append("=== Chains")
        for chain in report["chains"]:
            pairs = ", ".join(f"{p['from']}→{p['to']} {p['count']}" for p in chain["pairs"])
            out.append(
                f"{chain['id']} · messages {chain['messages']} · replies started "
                f"{chain['replies_started']} · pairs: {pairs or '(none)'}"
            )
    out.extend(_runner_text(report))
    if report.get("other_events"):
        out.append("")
        out.append("=== Other events")
        for event in report["other_events"]:
            out.append(_event_line(event))
    out.append("")
    out.append("=== Files after the run")
    for path, text in report["files_after"].items():
        out.append(path)
        for line in text.splitlines() or [""]:
            out.append(f"  | {line}")
    return "\n".join(line.rstrip() for line in out)


def _messages_text(messages: list[dict]) -> list[str]:
    out = ["Messages"]
    for m in messages:
        number = f"#{m['number']} " if m["number"] is not None else ""
        whose = "its" if m["side"] == "to" else "this chat's"
        where = f"read in {whose} reply {m['read_in_reply']}" if m["read_in_reply"] else ""
        extras = [
            m["state"],
            *([where] if where else []),
            *(["start_reply"] if m["start_reply"] else []),
            *(["passed on"] if m["passed_on"] else []),
            f"chain {m['chain']}",
        ]
        out.append(
            f"  {number}{m['id']} · {m['side']} {m['chat']} “{m['title']}” · " + " · ".join(extras)
        )
        out.append(f"    words: {_indent(m['text'], '      | ')}")
        if m["reason"]:
            out.append(f"    why: {m['reason']}")
        history = ", ".join(
            f"{h['state']} (tick {'-' if h['tick'] is None else h['tick']})" for h in m["history"]
        )
        out.append(f"    history: {history or '(none)'}")
    if not messages:
        out.append("  (none)")
    return out


def _waits_text(waits: list[dict]) -> list[str]:
    out = ["Waits"]
    for w in waits:
        ended = f" · {w['headline']}" if w["headline"] else ""
        bare = " · heard only how it ended" if w["bare"] else ""
        out.append(f"  {w['kind']} {w['target']} “{w['title']}” · {w['state']}{ended}{bare}")
    if not waits:
        out.append("  (none)")
    return out


def _trust_text(trust: list[dict]) -> list[str]:
    """Each rise of the chat's taint in the page's words, then the chats it came from, each
    with why it was careful then."""
    out = ["Trust timeline"]
    for rise in trust:
        out.append(f"  {rise['before']} → {rise['after']}: {rise['said']}{_carried_in(rise)}")
        for hop in rise["from"]:
            out.append(f"    ← “{hop['title']}” ({hop['chat']}) {hop['had']}{_carried_in(hop)}")
        if rise.get("goes_on"):
            out.append(f"    ← and on, from {rise['goes_on']}")
    if not trust:
        out.append("  (none)")
    return out


def _carried_in(rise: dict) -> str:
    where = [f"{key} {rise[key]}" for key in ("reply", "step") if rise.get(key) is not None]
    return f" ({', '.join(where)})" if where else ""


def _runner_text(report: dict) -> list[str]:
    """The runner's kills and restarts, the clock's moves and the sweeps, and deleted chats."""
    runner = report.get("runner") or {}
    out: list[str] = []
    if runner.get("kills") or runner.get("restarts") or runner.get("clock_moved_seconds"):
        out += ["", "=== Runner"]
        for kill in runner.get("kills", []):
            out.append(
                f"tick {kill['tick']} · killed during {kill['chat']}'s action ({kill['cut']})"
            )
        for restart in runner.get("restarts", []):
            picked = ", ".join(
                f"{r['chat']} reply {r['reply']} {r['state']}" for r in restart["recovered"]
            )
            out.append(f"tick {restart['tick']} · restarted · recovered: {picked or '(none)'}")
        if runner.get("clock_moved_seconds"):
            out.append(f"clock moved {runner['clock_moved_seconds']} s in all")
        for sweep in runner.get("sweeps", []):
            out.append(f"tick {sweep['tick']} · sweep {sweep['sweep']}")
    if report.get("deleted"):
        out += ["", "=== Deleted chats", ", ".join(report["deleted"])]
    return out


def _event_line(event: dict) -> str:
    data = " ".join(
        f"{k}={json.dumps(v, ensure_ascii=False) if not isinstance(v, str) else v}"
        for k, v in sorted(event["data"].items())
    )
    return f"  #{event['seq']} {event['type']} {event['chat'] or '-'} {data}".rstrip()
