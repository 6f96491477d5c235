"""
The console's HTML, rendered on the server from the same dicts the JSON API
answers.  Every value that came from the broker -- topic and group names,
member and client ids, hosts, config values, record keys, values and
headers -- goes through L{h} (or L{u} inside a URL) and nothing else.
"""

from __future__ import annotations

import html
from urllib.parse import quote


def h(value) -> str:
    """
    Escaped for HTML text and attribute values.
    """
    if value is None:
        return ""
    return html.escape(str(value), quote=True)


def u(value) -> str:
    """
    One URL path segment (escaped for HTML too).
    """
    return h(quote(str(value), safe=""))


def fmtBytes(n) -> str:
    if n is None:
        return "—"
    n = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TiB"


def fmtNum(n) -> str:
    if n is None:
        return "—"
    if isinstance(n, float):
        return f"{n:,.1f}"
    return f"{n:,}"


def fmtRate(n, unit="/s") -> str:
    if n is None:
        return "—"
    return f"{n:,.1f}{unit}"


NAV = (
    ("overview", "/", "Overview"), ("topics", "/topics", "Topics"), ("groups", "/groups", "Consumer groups"),
    ("security", "/security", "Security"),
)


def layout(title: str, active: str, body: str, *, clusterId: str | None = None, who: str | None = None,
           logout: str = "", flash=None) -> str:
    links = "".join(
        f'<a href="{href}" class="{"on" if key == active else ""}">{label}</a>' for key, href, label in NAV
    )
    whoLine = f'<div class="who">Signed in as<br><b>{h(who)}</b>{logout}</div>' if who else ""
    return (
        "<!doctype html><html lang=en><head><meta charset=utf-8>"
        '<meta name="viewport" content="width=device-width,initial-scale=1">'
        f"<title>{h(title)} · kafkatwist</title>"
        '<link rel="stylesheet" href="/static/console.css"></head><body>'
        '<nav class="side"><div class="brand">kafkatwist</div>'
        f'<div class="cluster">{("cluster " + h(clusterId)) if clusterId else "console"}</div>'
        f"{links}{whoLine}</nav>"
        f"<main>{_flash(flash)}{body}</main>"
        '<script src="/static/console.js"></script></body></html>'
    )


def logoutForm(csrf: str) -> str:
    return (
        f'<form method="post" action="/logout" class="logout"><input type="hidden" name="csrf" value="{h(csrf)}">'
        '<button type="submit">Log out</button></form>'
    )


def loginPage(csrf: str, next: str, message: str = "", user: str = "") -> str:
    error = f'<div class="err" id="login-error">{h(message)}</div>' if message else ""
    return (
        "<!doctype html><html lang=en><head><meta charset=utf-8>"
        '<meta name="viewport" content="width=device-width,initial-scale=1">'
        '<title>Log in · kafkatwist</title><link rel="stylesheet" href="/static/console.css"></head><body>'
        '<main><div class="login panel"><h1>kafkatwist</h1>'
        '<div class="sub">Log in with a SASL user of this broker (its SCRAM credentials).</div>'
        f"{error}"
        f'<form method="post" action="/login" class="stack" id="login">'
        f'<input type="hidden" name="csrf" value="{h(csrf)}"><input type="hidden" name="next" value="{h(next)}">'
        f'<label>User <input type="text" name="username" value="{h(user)}" autocomplete="username" required autofocus></label>'
        '<label>Password <input type="password" name="password" autocomplete="current-password" required></label>'
        '<div><button class="primary" type="submit">Log in</button></div></form></div></main></body></html>'
    )


def security(data: dict) -> str:
    errors = data.get("errors") or {}
    if not data["authorizer"]:
        acls = '<div class="empty">No authorizer is configured: every principal may do everything.</div>'
    elif data["acls"] is None:
        acls = f'<div class="err">{h(errors.get("acls", "ACLs not available"))}</div>'
    elif not data["acls"]:
        acls = '<div class="empty">No ACLs.</div>'
    else:
        rows = "".join(
            f'<tr data-key="{h(a["principal"] + " " + a["resourceName"])}"><td class="mono">{h(a["principal"])}</td>'
            f'<td>{h(a["resourceType"].lower())}</td><td class="mono">{h(a["resourceName"])}</td>'
            f'<td>{h(a["patternType"].lower())}</td><td>{h(a["operation"])}</td>'
            f'<td><span class="badge {"ok" if a["permission"] == "ALLOW" else "bad"}">{h(a["permission"])}</span></td>'
            f'<td class="mono">{h(a["host"])}</td></tr>'
            for a in data["acls"]
        )
        acls = (
            '<div class="toolbar"><input type="search" placeholder="Filter ACLs" data-filter="acls"></div>'
            '<table id="acls"><thead><tr><th>Principal</th><th>Resource</th><th>Name</th><th>Pattern</th>'
            f"<th>Operation</th><th>Permission</th><th>Host</th></tr></thead><tbody>{rows}</tbody></table>"
        )
    if data["scramUsers"] is None:
        users = f'<div class="err">{h(errors.get("scramUsers", "SCRAM users not available"))}</div>'
    elif not data["scramUsers"]:
        users = '<div class="empty">No SCRAM users.</div>'
    else:
        rows = "".join(
            f'<tr><td class="mono">{h(u["user"])}</td><td>'
            + " ".join(f'<span class="badge blue">{h(m["mechanism"])}</span> <span class="muted">{fmtNum(m["iterations"])} iterations</span>' for m in u["mechanisms"])
            + "</td></tr>"
            for u in data["scramUsers"]
        )
        users = f'<table id="scram-users"><thead><tr><th>User</th><th>Mechanisms</th></tr></thead><tbody>{rows}</tbody></table>'
    return f"<h1>Security</h1><h2>ACLs</h2>{acls}<h2>SCRAM users</h2>{users}"


def _flash(flash) -> str:
    if not flash:
        return ""
    kind, text = flash
    return f'<div class="flash {"ok" if kind == "ok" else "err"}" id="flash" role="status">{h(text)}</div>'


def hidden(csrf: str, action: str) -> str:
    return f'<input type="hidden" name="csrf" value="{h(csrf)}"><input type="hidden" name="action" value="{h(action)}">'


def card(label: str, value: str, cls: str = "") -> str:
    return f'<div class="card"><div class="k">{h(label)}</div><div class="v {cls}">{value}</div></div>'


def errorBody(status: int, message: str) -> str:
    titles = {403: "Not authorized", 404: "Not found", 400: "Bad request", 409: "Refused"}
    return (
        f"<h1>{h(titles.get(status, 'Error'))}</h1>"
        f'<div class="err">{h(message)}</div>'
        '<p><a href="/">Back to the overview</a></p>'
    )


# -- charts ------------------------------------------------------------------------

COLORS = ("#2f6fed", "#d98a00", "#1f9d55", "#d64545")


def _fmtUnit(value, unit: str) -> str:
    if value is None:
        return "—"
    if unit == "B/s":
        return fmtBytes(value) + "/s"
    if unit == "ms":
        return f"{value:,.1f} ms"
    if unit == "/s":
        return f"{value:,.1f}/s"
    return fmtNum(value)


def chartSvg(series: dict[str, list], width: int = 300, height: int = 90) -> str:
    """
    One small line chart: C{series} name -> [[time, value], ...] (values
    may be None).  The same drawing as console.js's.
    """
    points = [p for values in series.values() for p in values if p[1] is not None]
    if len(points) < 2:
        return f'<svg viewBox="0 0 {width} {height}" preserveAspectRatio="none"><text x="4" y="{height // 2}" class="nodata">collecting…</text></svg>'
    t0 = min(p[0] for p in points)
    t1 = max(p[0] for p in points)
    top = (max(p[1] for p in points) or 1) * 1.15
    span = (t1 - t0) or 1
    lines = []
    for i, values in enumerate(series.values()):
        coords = " ".join(
            f"{(t - t0) / span * width:.1f},{height - 4 - (v / top) * (height - 8):.1f}"
            for t, v in values if v is not None
        )
        lines.append(f'<polyline fill="none" stroke="{COLORS[i % len(COLORS)]}" stroke-width="1.6" points="{coords}"/>')
    return f'<svg viewBox="0 0 {width} {height}" preserveAspectRatio="none">{"".join(lines)}</svg>'


def _latest(values: list, unit: str, interval: float | None) -> str:
    """
    A chart's legend value: the last interval's.  For latencies (C{ms}, a
    p99 exists only over an interval with requests): the last interval that
    had requests, with its age when older than the last, or "no requests in
    the last N s" over the sampled window.  As console.js's.
    """
    if unit != "ms" or not values or interval is None:
        return _fmtUnit(values[-1][1] if values else None, unit)
    last = values[-1][0]
    for at, value in reversed(values):
        if value is not None:
            age = round(last - at)
            return _fmtUnit(value, unit) + (f", {age} s ago" if age else "")
    return f"no requests in the last {round(last - values[0][0] + interval)} s"


def chart(chartId: str, title: str, series: dict[str, list], unit: str, keys: str, group: str | None = None,
          cls: str = "", interval: float | None = None) -> str:
    legend = " ".join(
        f'<span style="color:{COLORS[i % len(COLORS)]}">● {h(name)} '
        f'<b>{h(_latest(values, unit, interval))}</b></span>'
        for i, (name, values) in enumerate(series.items())
    )
    groupAttr = f' data-group="{h(group)}"' if group is not None else ""
    return (
        f'<div class="chart {cls}" id="{h(chartId)}" data-keys="{h(keys)}" data-unit="{h(unit)}"{groupAttr}>'
        f'<div class="t">{h(title)}</div><div class="legend">{legend}</div>'
        f'<div class="plot">{chartSvg(series)}</div></div>'
    )


def overviewCharts(history: list[dict], interval: float | None = None) -> str:
    def pick(key):
        return [[r["at"], r[key]] for r in history]

    return '<div class="charts">' + "".join([
        chart("chart-bytes", "Bytes in / out", {"in": pick("bytesInPerSec"), "out": pick("bytesOutPerSec")},
              "B/s", "bytesInPerSec,bytesOutPerSec"),
        chart("chart-requests", "Requests", {"requests": pick("requestsPerSec")}, "/s", "requestsPerSec"),
        chart("chart-latency", "Produce / fetch p99", {"produce": pick("produceP99Ms"), "fetch": pick("fetchP99Ms")},
              "ms", "produceP99Ms,fetchP99Ms", interval=interval),
    ]) + "</div>"


# -- overview --------------------------------------------------------------------


def overview(data: dict) -> str:
    under = data["underReplicatedPartitions"]
    offline = data["offlinePartitions"]
    cards = "".join([
        card("Brokers", fmtNum(len(data["brokers"]))),
        card("Topics", fmtNum(data["topics"])),
        card("Partitions", fmtNum(data["partitions"])),
        card("Under-replicated", fmtNum(under), "bad" if under else "ok"),
        card("Offline", fmtNum(offline), "bad" if offline else "ok"),
        card("Requests", fmtRate(data["requestsPerSec"])),
        card("Bytes in", fmtBytes(data["bytesInPerSec"]) + "/s"),
        card("Bytes out", fmtBytes(data["bytesOutPerSec"]) + "/s"),
    ])
    rows = []
    for b in data["brokers"]:
        role = '<span class="badge blue">controller</span>' if b["controller"] else ""
        here = ' <span class="badge">this broker</span>' if b["thisBroker"] else ""
        rows.append(
            f'<tr><td class="n">{h(b["id"])}</td><td class="mono">{h(b["address"])}'
            + (f' <a class="console-link" href="{h(b["console"])}/">console ↗</a>' if b.get("console") and not b["thisBroker"] else "")
            + "</td>"
            + f"<td>{role}{here}</td><td>{h(b['rack'] or '—')}</td>"
            + f'<td class="n">{fmtNum(b["partitionsLed"])}</td><td class="n">{fmtBytes(b["diskBytes"])}</td>'
            + f'<td>{h(b["upSince"] or "—")}</td></tr>'
        )
    table = (
        '<table id="brokers"><thead><tr><th class="n">Id</th><th>Address</th><th>Role</th><th>Rack</th>'
        '<th class="n">Partitions led</th><th class="n">Disk use</th><th>Up since</th></tr></thead>'
        f"<tbody>{''.join(rows)}</tbody></table>"
    )
    interval = h(format(data.get("historyInterval", 5), "g"))
    return (
        "<h1>Overview</h1>"
        f'<div class="sub">Cluster <code>{h(data["clusterId"])}</code> · controller '
        f'{h(data["controllerId"])} · seen from broker {h(data["thisBroker"])}</div>'
        f'<div class="cards" id="stats">{cards}</div>'
        f'<h2>Last minutes <span class="muted small">(this broker, every {interval} s)</span></h2>'
        f'{overviewCharts(data.get("history", []), data.get("historyInterval"))}'
        f"<h2>Brokers</h2>{table}"
    )


# -- topics ------------------------------------------------------------------------


def createTopicForm(csrf: str) -> str:
    return (
        '<details class="panel" id="create-topic"><summary>Create a topic</summary>'
        f'<form method="post" action="/topics" class="stack">{hidden(csrf, "create")}'
        '<label>Name <input type="text" name="name" required pattern="[a-zA-Z0-9._-]+" maxlength="249"></label>'
        '<label>Partitions <input type="number" name="partitions" min="1" value="1"></label>'
        '<label>Replication factor <input type="number" name="replicationFactor" min="-1" value="-1">'
        ' <span class="muted">-1: the broker\'s default</span></label>'
        '<label>Configs <textarea name="configs" rows="3" placeholder="retention.ms=86400000"></textarea>'
        ' <span class="muted">one key=value a line</span></label>'
        '<div><button class="primary" type="submit">Create</button></div></form></details>'
    )


def topics(data: dict, search: str = "", csrf: str = "") -> str:
    rows = []
    for t in data["topics"]:
        flags = ""
        if t["internal"]:
            flags += ' <span class="badge">internal</span>'
        if t["offline"]:
            flags += f' <span class="badge bad">{t["offline"]} offline</span>'
        urp = t["underReplicated"]
        size = fmtBytes(t["sizeBytes"]) + ("" if t["sizeComplete"] else " *")
        urpCell = f'<span class="badge warn">{fmtNum(urp)}</span>' if urp else "0"
        rows.append(
            f'<tr data-key="{h(t["name"])}"><td><a href="/topics/{u(t["name"])}">{h(t["name"])}</a>{flags}</td>'
            f'<td class="n">{fmtNum(t["partitions"])}</td><td class="n">{fmtNum(t["replicationFactor"])}</td>'
            f'<td class="n">{size}</td><td class="n">{fmtRate(t["recordsPerSec"])}</td>'
            f'<td class="n">{urpCell}</td></tr>'
        )
    body = (
        '<table id="topics"><thead><tr><th>Topic</th><th class="n">Partitions</th><th class="n">Replication</th>'
        '<th class="n">Size</th><th class="n">Records in</th><th class="n">Under-replicated</th></tr></thead>'
        f"<tbody>{''.join(rows)}</tbody></table>"
        if rows else '<div class="empty">No topics' + (" match." if search else " yet.") + "</div>"
    )
    partial = any(not t["sizeComplete"] for t in data["topics"])
    return (
        f'<h1>Topics</h1><div class="sub">{fmtNum(data["count"])} topics</div>'
        '<form class="toolbar" method="get" action="/topics">'
        f'<input type="search" name="q" value="{h(search)}" placeholder="Search topics" data-filter="topics" autofocus>'
        "</form>"
        f"{body}"
        + ('<p class="muted">* size of the replicas this broker holds</p>' if partial else "")
        + (createTopicForm(csrf) if csrf else "")
    )


def _leaderCell(p: dict, topic: str) -> str:
    url = p.get("leaderConsole")
    if not url:
        return h(p["leader"])
    return f'<a class="leader-link" href="{h(url)}/topics/{u(topic)}" title="its leader\'s console">{h(p["leader"])} ↗</a>'


def topicActions(data: dict, csrf: str) -> str:
    name = data["name"]
    n = len(data["partitions"])
    partitionOptions = _option("", "any (random)", "") + "".join(_option(p["partition"], str(p["partition"]), "") for p in data["partitions"])
    configNames = "".join(f'<option value="{h(c["name"])}">' for c in data["configs"] or ())
    action = f"/topics/{u(name)}"
    return (
        '<h2>Actions</h2><div class="actions">'
        f'<form method="post" action="{action}" class="panel stack" id="produce">{hidden(csrf, "produce")}'
        '<b>Produce a message</b>'
        f'<label>Partition <select name="partition">{partitionOptions}</select></label>'
        '<label>Key <input type="text" name="key" placeholder="(none)"></label>'
        '<label>Value <textarea name="value" rows="3"></textarea></label>'
        '<label>Headers <textarea name="headers" rows="2" placeholder="trace-id=abc"></textarea>'
        ' <span class="muted">one key=value a line</span></label>'
        '<div><button class="primary" type="submit">Produce</button></div></form>'
        f'<form method="post" action="{action}" class="panel stack" id="set-config">{hidden(csrf, "config")}'
        '<b>Change a config</b>'
        f'<label>Config <input type="text" name="key" list="config-names" required></label><datalist id="config-names">{configNames}</datalist>'
        '<label>Value <input type="text" name="value"></label>'
        '<label><input type="checkbox" name="reset" value="1"> back to the default</label>'
        '<div><button type="submit">Apply</button></div></form>'
        f'<form method="post" action="{action}" class="panel stack" id="add-partitions">{hidden(csrf, "partitions")}'
        '<b>Add partitions</b>'
        f'<label>New partition count <input type="number" name="count" min="{n + 1}" value="{n + 1}"></label>'
        '<div><button type="submit">Add</button></div></form>'
        f'<form method="post" action="{action}" class="panel stack" id="delete-topic">{hidden(csrf, "delete")}'
        '<b>Delete this topic</b>'
        f'<label>Type its name to confirm <input type="text" name="confirm" required autocomplete="off"></label>'
        '<div><button class="danger" type="submit">Delete topic</button></div></form>'
        "</div>"
    )


def topic(data: dict, csrf: str = "") -> str:
    name = data["name"]
    rows = []
    for p in data["partitions"]:
        isr = ", ".join(str(r) for r in p["isr"])
        state = '<span class="badge warn">under-replicated</span>' if p["underReplicated"] else '<span class="badge ok">in sync</span>'
        if p["leader"] < 0:
            state = '<span class="badge bad">offline</span>'
        rows.append(
            f'<tr><td class="n">{h(p["partition"])}</td><td class="n">{_leaderCell(p, data["name"])}</td>'
            f'<td>{h(", ".join(str(r) for r in p["replicas"]))}</td><td>{h(isr)}</td><td>{state}</td>'
            f'<td class="n">{fmtNum(p["logStartOffset"])}</td><td class="n">{fmtNum(p["logEndOffset"])}</td>'
            f'<td class="n">{fmtBytes(p["sizeBytes"])}</td></tr>'
        )
    parts = (
        '<table id="partitions"><thead><tr><th class="n">Partition</th><th class="n">Leader</th><th>Replicas</th>'
        '<th>ISR</th><th>State</th><th class="n">Log start</th><th class="n">Log end</th><th class="n">Size</th>'
        f"</tr></thead><tbody>{''.join(rows)}</tbody></table>"
    )
    configs = data["configs"]
    if configs is None:
        cfg = '<div class="empty">Not authorized to describe this topic\'s configs.</div>'
    else:
        crow = []
        for c in configs:
            src = '<span class="badge blue">dynamic</span>' if c["dynamic"] else f'<span class="muted">{h(c["source"].lower().replace("_", " "))}</span>'
            value = "<i>sensitive</i>" if c["sensitive"] else f'<code>{h(c["value"])}</code>'
            crow.append(f'<tr data-key="{h(c["name"])}"><td class="mono">{h(c["name"])}</td><td>{value}</td><td>{src}</td></tr>')
        cfg = (
            '<div class="toolbar"><input type="search" placeholder="Filter configs" data-filter="configs"></div>'
            '<table id="configs"><thead><tr><th>Config</th><th>Value</th><th>Source</th></tr></thead>'
            f"<tbody>{''.join(crow)}</tbody></table>"
        )
    dynamic = sum(1 for c in configs or () if c["dynamic"])
    cards = "".join([
        card("Partitions", fmtNum(len(data["partitions"]))),
        card("Replication", fmtNum(data["replicationFactor"])),
        card("Size", fmtBytes(data["sizeBytes"])),
        card("Records in", fmtRate(data["recordsPerSec"])),
        card("Dynamic configs", fmtNum(dynamic)),
    ])
    return (
        '<div class="crumbs"><a href="/topics">Topics</a> /</div>'
        f'<h1 id="topic-name">{h(name)}</h1>'
        f'<div class="sub">id <code>{h(data["topicId"])}</code>'
        f' · <a href="/topics/{u(name)}/messages" id="browse-link">Browse messages</a>'
        + (' · <span class="badge">internal</span>' if data["internal"] else "")
        + f'</div><div class="cards">{cards}</div>'
        f"<h2>Partitions</h2>{parts}"
        f"<h2>Configs</h2>{cfg}"
        + (topicActions(data, csrf) if csrf else "")
    )


# -- groups ------------------------------------------------------------------------


def _stateBadge(state: str) -> str:
    cls = {"Stable": "ok", "Empty": "", "Dead": "bad", "PreparingRebalance": "warn",
           "CompletingRebalance": "warn", "Assigning": "warn", "Reconciling": "warn"}.get(state, "")
    return f'<span class="badge {cls}">{h(state)}</span>'


def groups(data: dict, search: str = "") -> str:
    clustered = any(g.get("coordinator") != data.get("coordinator") for g in data["groups"]) or data.get("otherConsoles")
    rows = []
    for g in data["groups"]:
        base = g.get("console") or ""
        remote = g.get("coordinator") != data.get("coordinator")
        link = f"{h(base)}/groups/{u(g['groupId'])}" if (not remote or base) else ""
        name = f'<a href="{link}">{h(g["groupId"])}</a>' + (" ↗" if remote and base else "") if link else h(g["groupId"])
        coordinator = f'<td class="n">{h(g.get("coordinator"))}</td>' if clustered else ""
        rows.append(
            f'<tr data-key="{h(g["groupId"])}"><td>{name}</td>'
            f'<td>{_stateBadge(g["state"])}</td><td>{h(g["protocol"])}</td>{coordinator}'
            f'<td class="n">{fmtNum(g["members"])}</td><td class="n">{fmtNum(g["topics"])}</td>'
            f'<td class="n">{fmtNum(g["lag"])}</td></tr>'
        )
    coordinatorHead = '<th class="n">Coordinator</th>' if clustered else ""
    body = (
        '<table id="groups"><thead><tr><th>Group</th><th>State</th><th>Protocol</th>'
        f'{coordinatorHead}<th class="n">Members</th><th class="n">Topics</th><th class="n">Lag</th></tr></thead>'
        f"<tbody>{''.join(rows)}</tbody></table>"
        if rows else '<div class="empty">No consumer groups' + (" match." if search else " yet.") + "</div>"
    )
    sub = f'{fmtNum(data["count"])} groups'
    if clustered:
        sub += " in the cluster; topics and lag of the groups other brokers coordinate are on their consoles (↗)"
    missing = data.get("unanswered") or []
    if missing:
        sub += " · not answering: " + ", ".join(f"broker {h(i)}" for i in missing)
    return (
        f'<h1>Consumer groups</h1><div class="sub">{sub}</div>'
        '<form class="toolbar" method="get" action="/groups">'
        f'<input type="search" name="q" value="{h(search)}" placeholder="Search groups" data-filter="groups" autofocus>'
        f"</form>{body}"
    )


def groupActions(data: dict, csrf: str) -> str:
    gid = data["groupId"]
    action = f"/groups/{u(gid)}"
    if data["members"]:
        return (
            '<h2>Actions</h2><div class="note">This group has active members: stop its consumers to reset '
            "its offsets or delete it.</div>"
        )
    topics = sorted({o["topic"] for o in data["offsets"]})
    topicOptions = _option("", "every topic", "") + "".join(_option(t, t, "") for t in topics)
    strategies = "".join(_option(v, l, "") for v, l in (
        ("earliest", "Earliest"), ("latest", "Latest"), ("timestamp", "To a timestamp"), ("exact", "To an offset")))
    return (
        '<h2>Actions</h2><div class="actions">'
        f'<form method="post" action="{action}" class="panel stack" id="reset-offsets">{hidden(csrf, "reset")}'
        "<b>Reset offsets</b>"
        f'<label>Topic <select name="topic">{topicOptions}</select></label>'
        '<label>Partition <input type="number" name="partition" min="0" placeholder="every partition"></label>'
        f'<label>To <select name="strategy">{strategies}</select></label>'
        '<label>Offset or timestamp <input type="text" name="value" placeholder="42, or 2026-01-31T12:00:00 (UTC)"></label>'
        '<div><button class="primary" type="submit">Reset</button></div></form>'
        f'<form method="post" action="{action}" class="panel stack" id="delete-group">{hidden(csrf, "delete")}'
        "<b>Delete this group</b><span class=\"muted\">and its committed offsets</span>"
        '<label>Type its id to confirm <input type="text" name="confirm" required autocomplete="off"></label>'
        '<div><button class="danger" type="submit">Delete group</button></div></form>'
        "</div>"
    )


def group(data: dict, csrf: str = "") -> str:
    members = []
    for m in data["members"]:
        assignment = "; ".join(
            f'{h(a["topic"])} [{h(", ".join(str(p) for p in a["partitions"]))}]' for a in m["assignment"]
        ) or '<span class="muted">none</span>'
        members.append(
            f'<tr><td class="mono">{h(m["memberId"])}</td><td>{h(m["clientId"])}</td>'
            f'<td class="mono">{h(m["host"])}</td><td>{h(m.get("instanceId") or "—")}</td><td>{assignment}</td></tr>'
        )
    membersTable = (
        '<table id="members"><thead><tr><th>Member</th><th>Client</th><th>Host</th><th>Instance</th>'
        f"<th>Assignment</th></tr></thead><tbody>{''.join(members)}</tbody></table>"
        if members else '<div class="empty">No active members.</div>'
    )
    rows = []
    biggest = max((o["lag"] or 0 for o in data["offsets"]), default=0) or 1
    for o in data["offsets"]:
        lag = o["lag"]
        bar = f'<div class="bar"><span style="width:{int(100 * (lag or 0) / biggest)}%"></span></div>'
        uncommitted = o["committed"] is None
        rows.append(
            ('<tr class="uncommitted">' if uncommitted else "<tr>")
            + f'<td><a href="/topics/{u(o["topic"])}">{h(o["topic"])}</a></td><td class="n">{h(o["partition"])}</td>'
            f'<td class="n">{fmtNum(o["committed"])}</td><td class="n">{fmtNum(o["logEndOffset"])}</td>'
            f'<td class="n">{fmtNum(lag)}</td>'
            f'<td class="mono">{h(o.get("memberId") or "—")}</td><td>{h(o.get("clientId") or "—")}</td>'
            f'<td class="mono">{h(o.get("host") or "—")}</td><td>{bar}</td></tr>'
        )
    uncommittedCount = data.get("uncommitted", 0)
    lagNote = (
        '<div class="muted small" id="lag-note">Total lag is the sum over partitions with a committed offset '
        "(as kafka-consumer-groups.sh --describe)"
        + (f"; {uncommittedCount} assigned partition{'s' if uncommittedCount != 1 else ''} with no committed offset "
           "(committed and lag —) not counted" if uncommittedCount else "")
        + ".</div>"
    )
    offsets = (
        '<table id="offsets"><thead><tr><th>Topic</th><th class="n">Partition</th><th class="n">Committed</th>'
        '<th class="n">Log end</th><th class="n">Lag</th><th>Member</th><th>Client</th><th>Host</th><th></th></tr></thead>'
        f"<tbody>{''.join(rows)}</tbody></table>{lagNote}"
        if rows else '<div class="empty">No committed offsets and no assigned partitions.</div>'
    )
    cards = "".join([
        card("State", _stateBadge(data["state"])),
        card("Protocol", h(data["protocol"]) + (f'<div class="muted small">assignor {h(data["assignor"])}</div>' if data.get("assignor") else "")),
        card("Members", fmtNum(len(data["members"]))),
        card("Total lag" if data.get("lagComplete", True) else "Lag known here", fmtNum(data["totalLag"])
             + (f'<div class="muted small">committed partitions only; {fmtNum(data["uncommitted"])} uncommitted</div>'
                if data.get("uncommitted") else ""),
             "bad" if data["totalLag"] else "ok"),
        chart("chart-lag", "Total lag, last minutes", {"lag": data.get("lagHistory", [])}, "", "lag",
              group=data["groupId"], cls="wide"),
    ])
    return (
        '<div class="crumbs"><a href="/groups">Consumer groups</a> /</div>'
        f'<h1 id="group-id">{h(data["groupId"])}</h1>'
        f'<div class="cards">{cards}</div>'
        f"<h2>Members</h2>{membersTable}"
        f"<h2>Partitions: committed offsets and lag</h2>{offsets}"
        + (groupActions(data, csrf) if csrf else "")
    )


# -- messages ------------------------------------------------------------------------


def _when(ms) -> str:
    if ms is None or ms < 0:
        return "—"
    import datetime

    moment = datetime.datetime.fromtimestamp(ms / 1000, datetime.timezone.utc)
    return moment.strftime("%Y-%m-%d %H:%M:%S.") + f"{moment.microsecond // 1000:03d}"


def showValue(shown, fmt: str) -> str:
    """
    A key, value or header value in the chosen format (C{auto}: JSON when
    it is JSON, else text when it is UTF-8, else hex).
    """
    if shown is None:
        return '<span class="muted">null</span>'
    if fmt == "hex":
        text, kind = shown["hex"], "hex"
    elif fmt == "json" and shown["json"] is not None:
        text, kind = shown["json"], "json"
    elif fmt in ("utf8", "json") and shown["utf8"] is not None:
        text, kind = shown["utf8"], "utf8"
    elif fmt == "auto":
        if shown["json"] is not None:
            text, kind = shown["utf8"], "json"
        elif shown["utf8"] is not None:
            text, kind = shown["utf8"], "utf8"
        else:
            text, kind = shown["hex"], "hex"
    else:
        text, kind = shown["hex"], "hex"
    more = f' <span class="muted">… {fmtBytes(shown["size"])}</span>' if shown["truncated"] else ""
    badge = f'<span class="badge">{kind}</span> ' if kind != "utf8" else ""
    return f'<pre class="val {kind}">{badge}{h(text)}</pre>{more}'


def _option(value, label, current) -> str:
    selected = " selected" if str(value) == str(current) else ""
    return f'<option value="{h(value)}"{selected}>{h(label)}</option>'


def messages(data: dict, query: dict) -> str:
    name = data["topic"]
    fmt = query.get("format") or "auto"
    mode = data["mode"]
    partition = query.get("partition") or "all"
    partitions = "".join(
        [_option("all", "All partitions", partition)]
        + [_option(p, f"Partition {p}", partition) for p in data["allPartitions"]]
    )
    modes = "".join(_option(v, l, mode) for v, l in (
        ("newest", "Newest first"), ("oldest", "Oldest first"), ("offset", "From offset"), ("timestamp", "From timestamp")))
    formats = "".join(_option(v, l, fmt) for v, l in (("auto", "Auto"), ("utf8", "UTF-8"), ("json", "JSON"), ("hex", "Hex")))
    form = (
        f'<form class="toolbar" method="get" action="/topics/{u(name)}/messages" id="browse">'
        f'<select name="partition">{partitions}</select><select name="mode">{modes}</select>'
        f'<input type="number" name="offset" min="0" placeholder="offset" value="{h(query.get("offset"))}" style="width:110px">'
        f'<input type="text" name="timestamp" placeholder="2026-01-31T12:00:00 (UTC) or ms" value="{h(query.get("timestamp"))}" style="width:250px">'
        f'<select name="format">{formats}</select><button class="primary" type="submit">Show</button></form>'
    )
    rows = []
    for r in data["records"]:
        flags = []
        if r["control"]:
            flags.append(f'<span class="badge {"ok" if r["control"] == "COMMIT" else "bad"}">{h(r["control"])} marker</span>')
        elif r["transactional"]:
            state = r.get("transaction") or "transactional"
            cls = {"aborted": "bad", "open": "warn"}.get(state, "blue")
            flags.append(f'<span class="badge {cls}">{h("transactional · " + state)}</span>')
        headers = "".join(
            f'<div class="hdr"><code>{h(x["key"])}</code> {showValue(x["value"], fmt)}</div>' for x in r["headers"]
        )
        rows.append(
            f'<tr class="rec{" control" if r["control"] else ""}"><td class="n">{h(r["partition"])}</td>'
            f'<td class="n">{h(r["offset"])}</td><td class="mono nowrap">{h(_when(r["timestamp"]))}</td>'
            f'<td class="k">{showValue(r["key"], fmt) if not r["control"] else ""}</td>'
            f'<td class="v">{showValue(r["value"], fmt) if not r["control"] else ""}</td>'
            f'<td class="hd">{headers}</td><td>{"".join(flags)}</td></tr>'
        )
    table = (
        '<table id="records"><thead><tr><th class="n">Partition</th><th class="n">Offset</th><th>Timestamp (UTC)</th>'
        '<th>Key</th><th>Value</th><th>Headers</th><th></th></tr></thead>'
        f"<tbody>{''.join(rows)}</tbody></table>"
        if rows else '<div class="empty">No records here.</div>'
    )
    base = f"/topics/{u(name)}/messages?partition={u(partition)}&amp;format={u(fmt)}"
    links = []
    if data.get("older"):
        links.append(f'<a class="btn" id="older" href="{base}&amp;mode=newest&amp;cursor={u(data["older"])}">Older records →</a>')
    if data.get("next"):
        links.append(f'<a class="btn" id="next" href="{base}&amp;mode={u(mode)}&amp;cursor={u(data["next"])}">Next records →</a>')
    ranges = ", ".join(
        f'{h(p)}: {fmtNum(r["logStartOffset"])}–{fmtNum(r["highWatermark"])}' for p, r in sorted(data["ranges"].items(), key=lambda kv: int(kv[0]))
    )
    notHere = ""
    if data["notHere"]:
        consoles = data.get("leaderConsoles") or {}
        notHere = '<div class="note">' + "; ".join(
            f'partition {h(p)} is not on this broker (leader: broker {h(data["leaders"].get(str(p)))}'
            + (f', <a href="{h(consoles[str(p)])}/topics/{u(name)}/messages?partition={h(p)}">browse it there ↗</a>'
               if consoles.get(str(p)) else "")
            + ")"
            for p in data["notHere"]
        ) + "</div>"
    return (
        f'<div class="crumbs"><a href="/topics">Topics</a> / <a href="/topics/{u(name)}">{h(name)}</a> /</div>'
        f'<h1>Messages <span class="muted" id="topic-name">{h(name)}</span></h1>'
        f'<div class="sub">{len(data["records"])} records shown · offsets (start–end) {ranges or "—"}</div>'
        f"{form}{notHere}{table}"
        f'<div class="toolbar">{"".join(links)}</div>'
    )
