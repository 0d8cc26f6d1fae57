// The compaction-proxy dashboard. Plain JavaScript, no build step, no library, and no network
// beyond this proxy's own session API (the page's Content-Security-Policy enforces that).
//
// Everything client-controlled (session ids, tenants, models, strategies) is inserted as
// text, never as HTML: a session id is whatever a client sent in X-Session-Id.
"use strict";

(() => {
  const TOKEN_KEY = "compaction-proxy.admin-token";
  const REFRESH_MS = 5000;
  const PAGE_SIZE = 50;
  const MAX_SESSIONS = 1000; // listing stops here: a page, not an export
  const RECENT_SESSIONS = 20; // most recently seen sessions read for "recent compactions"
  const RECENT_ROWS = 25;
  const SVG = "http://www.w3.org/2000/svg";
  const CHART = { width: 640, height: 220, left: 58, right: 14, top: 14, bottom: 30 };
  const CATEGORIES = ["system", "tools", "summary", "messages", "tool_results", "placeholders"];

  // Fixed locale: the same digits and separators for every operator (and for the tests).
  const integer = new Intl.NumberFormat("en-US", { maximumFractionDigits: 0 });

  const state = {
    token: null,
    sessions: [],
    sort: { key: "last_pressure", descending: true },
    selected: null, // key of the selected session
    details: new Map(), // key -> { stamp, detail }: refetched only when the session changed
    timer: null,
    busy: false,
  };

  class Unauthorized extends Error {}
  class NotFound extends Error {}

  const $ = (id) => document.getElementById(id);

  // ---------------------------------------------------------------- formatting

  function formatInt(value) {
    return value === null || value === undefined ? "–" : integer.format(value);
  }

  function formatPressure(value) {
    return value === null || value === undefined ? "–" : `${(value * 100).toFixed(1)}%`;
  }

  // Green at 0 through amber to red at 100 % of the usable window (and beyond).
  function pressureHue(value) {
    return Math.round(130 * (1 - Math.min(Math.max(value, 0), 1)));
  }

  function formatAgo(at) {
    if (at === null || at === undefined) return "–";
    const seconds = Math.max(0, Date.now() / 1000 - at);
    if (seconds < 60) return `${Math.round(seconds)} s ago`;
    if (seconds < 3600) return `${Math.round(seconds / 60)} min ago`;
    if (seconds < 86400) return `${Math.round(seconds / 3600)} h ago`;
    return new Date(at * 1000).toLocaleDateString();
  }

  function formatWhen(at) {
    return at === null || at === undefined ? "" : new Date(at * 1000).toLocaleString();
  }

  function element(tag, { text, className, title, attrs } = {}) {
    const node = document.createElement(tag);
    if (text !== undefined) node.textContent = text;
    if (className) node.className = className;
    if (title) node.title = title;
    for (const [name, value] of Object.entries(attrs || {})) node.setAttribute(name, value);
    return node;
  }

  function svg(tag, attrs = {}, text) {
    const node = document.createElementNS(SVG, tag);
    for (const [name, value] of Object.entries(attrs)) node.setAttribute(name, String(value));
    if (text !== undefined) node.textContent = text;
    return node;
  }

  // ---------------------------------------------------------------- the token

  // `#token=...` never reaches the server; it is kept for this tab only, then taken out of
  // the address bar so that a shared URL or a screenshot does not carry it.
  function takeTokenFromFragment() {
    const token = new URLSearchParams(location.hash.slice(1)).get("token");
    if (token) {
      sessionStorage.setItem(TOKEN_KEY, token);
      history.replaceState(null, "", location.pathname + location.search);
    }
  }

  function askForToken(message) {
    clearTimeout(state.timer);
    state.token = null;
    state.details.clear();
    sessionStorage.removeItem(TOKEN_KEY);
    $("content").hidden = true;
    $("sign-out").hidden = true;
    $("login").hidden = false;
    $("login-message").textContent =
      message || "Enter the proxy's admin.token, or open /dashboard#token=…";
    $("login-message").classList.toggle("error", Boolean(message));
    setStatus("");
    $("token-input").focus();
  }

  function start() {
    takeTokenFromFragment();
    state.token = sessionStorage.getItem(TOKEN_KEY);
    if (!state.token) {
      askForToken();
      return;
    }
    $("login").hidden = true;
    $("content").hidden = false;
    $("sign-out").hidden = false;
    $("scope-note").hidden = true;
    probeScope();
    refresh();
  }

  // Any API key is a valid credential for the session API (it shows that key's own tenant),
  // so a mistyped admin token would quietly show an empty fleet. The admin-only config
  // endpoint tells the two apart: 403 means a tenant's key.
  async function probeScope() {
    try {
      const response = await fetch("v1/compaction/config", {
        headers: { Authorization: `Bearer ${state.token}` },
        cache: "no-store",
      });
      $("scope-note").hidden = response.status !== 403;
    } catch (_) {
      // Unreachable: the refresh reports that.
    }
  }

  // ---------------------------------------------------------------- the API

  async function api(path) {
    const response = await fetch(path, {
      headers: { Authorization: `Bearer ${state.token}`, Accept: "application/json" },
      cache: "no-store",
    });
    if (response.ok) return response.json();
    const message = await errorMessage(response);
    if (response.status === 401 || response.status === 403) throw new Unauthorized(message);
    if (response.status === 404) throw new NotFound(message);
    throw new Error(`${response.status}: ${message}`);
  }

  async function errorMessage(response) {
    try {
      const body = await response.json();
      return (body.error && body.error.message) || response.statusText;
    } catch (_) {
      return response.statusText;
    }
  }

  // Every page, by the offset of what arrived: the server may cap `limit` below ours.
  async function listSessions() {
    const sessions = [];
    while (sessions.length < MAX_SESSIONS) {
      const page = await api(`v1/compaction/sessions?limit=${PAGE_SIZE}&offset=${sessions.length}`);
      sessions.push(...page.data);
      if (!page.has_more || page.data.length === 0) break;
    }
    return sessions;
  }

  const keyOf = (session) => JSON.stringify([session.tenant, session.id]);
  const stampOf = (session) => `${session.turns}|${session.compactions}|${session.last_seen}`;

  async function detailOf(session) {
    const key = keyOf(session);
    const cached = state.details.get(key);
    if (cached && cached.stamp === stampOf(session)) return cached.detail;
    const path =
      `v1/compaction/sessions/${encodeURIComponent(session.id)}` +
      `?tenant=${encodeURIComponent(session.tenant)}`;
    try {
      const detail = await api(path);
      state.details.set(key, { stamp: stampOf(session), detail });
      return detail;
    } catch (error) {
      if (!(error instanceof NotFound)) throw error;
      state.details.delete(key); // deleted since the listing: the next refresh drops it
      return null;
    }
  }

  // ---------------------------------------------------------------- refreshing

  async function refresh() {
    clearTimeout(state.timer);
    if (state.busy || !state.token) return;
    state.busy = true;
    try {
      // A background tab polls nothing; it catches up when shown (see `wire`).
      if (!document.hidden) {
        await load();
        setStatus(`updated ${new Date().toLocaleTimeString()} · every ${REFRESH_MS / 1000} s`);
      }
    } catch (error) {
      failed(error);
    } finally {
      state.busy = false;
      if (state.token) state.timer = setTimeout(refresh, REFRESH_MS);
    }
  }

  async function load() {
    state.sessions = await listSessions();
    const known = new Set(state.sessions.map(keyOf));
    for (const key of state.details.keys()) if (!known.has(key)) state.details.delete(key);
    if (!known.has(state.selected)) {
      const first = sortedSessions()[0];
      state.selected = first ? keyOf(first) : null;
    }
    renderTotals();
    renderSessions();
    await Promise.all([showDetail(), showRecentCompactions()]);
  }

  function failed(error) {
    if (error instanceof Unauthorized) {
      askForToken(`The proxy refused this token (${error.message}). Enter the admin token.`);
    } else {
      setStatus(`refresh failed: ${error.message}; retrying`, true);
    }
  }

  function setStatus(text, isError = false) {
    $("status").textContent = text;
    $("status").classList.toggle("error", isError);
  }

  // ---------------------------------------------------------------- totals and sessions

  function renderTotals() {
    const sum = (field) => state.sessions.reduce((total, s) => total + (s[field] || 0), 0);
    const sent = sum("tokens_sent");
    const saved = sum("tokens_saved");
    $("total-sessions").textContent = formatInt(state.sessions.length);
    $("total-compactions").textContent = formatInt(sum("compactions"));
    $("total-sent").textContent = formatInt(sent);
    $("total-forwarded").textContent = formatInt(sum("tokens_forwarded"));
    const share = sent > 0 ? ` (${((saved / sent) * 100).toFixed(1)}%)` : "";
    $("total-saved").textContent = formatInt(saved) + share;
  }

  // Missing values sort last whichever the direction; ties keep a stable order by id.
  function compareSessions(a, b) {
    const { key, descending } = state.sort;
    const x = a[key];
    const y = b[key];
    const byId = String(a.id).localeCompare(String(b.id));
    const xMissing = x === null || x === undefined;
    const yMissing = y === null || y === undefined;
    if (xMissing || yMissing) return xMissing && yMissing ? byId : xMissing ? 1 : -1;
    const order = typeof x === "number" ? x - y : String(x).localeCompare(String(y));
    if (order === 0) return byId;
    return descending ? -order : order;
  }

  function sortedSessions() {
    return [...state.sessions].sort(compareSessions);
  }

  function renderSessions() {
    const body = $("sessions").tBodies[0];
    const focused = document.activeElement && document.activeElement.dataset.key;
    body.replaceChildren(...sortedSessions().map(sessionRow));
    $("sessions-empty").hidden = state.sessions.length > 0;
    for (const th of $("sessions").tHead.rows[0].cells) {
      const sorted = th.dataset.key === state.sort.key;
      th.setAttribute(
        "aria-sort",
        sorted ? (state.sort.descending ? "descending" : "ascending") : "none",
      );
    }
    // Rows are rebuilt on every refresh: give keyboard focus back to the row that had it.
    if (focused) {
      const row = [...body.rows].find((r) => r.dataset.key === focused);
      if (row) row.focus();
    }
  }

  function sessionRow(session) {
    const key = keyOf(session);
    const row = element("tr", {
      attrs: {
        "data-key": key,
        "data-id": session.id,
        "data-tenant": session.tenant,
        tabindex: "0",
      },
    });
    if (key === state.selected) row.classList.add("selected");
    row.append(
      cell("id", session.id, "code", session.id),
      cell("tenant", session.tenant, "code"),
      cell("model", session.model ?? "–"),
      cell("turns", formatInt(session.turns), "num"),
      pressureCell(session.last_pressure),
      cell("compactions", formatInt(session.compactions), "num"),
      cell("tokens_sent", formatInt(session.tokens_sent), "num"),
      cell("tokens_forwarded", formatInt(session.tokens_forwarded), "num"),
      cell("tokens_saved", formatInt(session.tokens_saved), "num"),
      cell("last_seen", formatAgo(session.last_seen), "num", formatWhen(session.last_seen)),
    );
    row.addEventListener("click", () => select(key));
    row.addEventListener("keydown", (event) => {
      if (event.key === "Enter" || event.key === " ") {
        event.preventDefault();
        select(key);
      }
    });
    return row;
  }

  function cell(field, text, className, title) {
    return element("td", { text, className, title, attrs: { "data-field": field } });
  }

  function pressureCell(value) {
    const td = element("td", {
      className: "num pressure",
      attrs: { "data-field": "last_pressure" },
    });
    if (value === null || value === undefined) {
      td.textContent = "–";
      return td;
    }
    const hue = pressureHue(value);
    const bar = element("span", { className: "bar" });
    bar.style.setProperty("--fill", `${Math.min(value, 1) * 100}%`);
    bar.style.setProperty("--hue", hue);
    const text = element("span", { className: "value", text: formatPressure(value) });
    text.style.setProperty("--hue", hue);
    td.append(bar, text);
    return td;
  }

  function sortBy(key) {
    const same = state.sort.key === key;
    // A new column starts with the interesting end: highest numbers, or A to Z for text.
    const numeric = !["id", "tenant", "model"].includes(key);
    state.sort = { key, descending: same ? !state.sort.descending : numeric };
    renderSessions();
  }

  function select(key) {
    state.selected = key;
    renderSessions();
    showDetail().catch(failed);
  }

  // ---------------------------------------------------------------- one session

  function selectedSession() {
    return state.sessions.find((s) => keyOf(s) === state.selected) || null;
  }

  async function showDetail() {
    const session = selectedSession();
    const detail = session ? await detailOf(session) : null;
    if (session && keyOf(session) !== state.selected) return; // another row was clicked since
    $("detail").hidden = detail === null;
    if (detail === null) return;
    $("detail").dataset.key = keyOf(session);
    $("detail-id").textContent = detail.id;
    const meta = [
      detail.tenant,
      detail.model || "model unknown",
      `${formatInt(detail.turns)} turns`,
    ];
    $("detail-meta").textContent = meta.join(" · ");
    drawPressure($("pressure-chart"), detail);
    drawSaved($("saved-chart"), detail);
    renderBreakdown($("breakdown"), detail.context);
  }

  function drawPressure(container, detail) {
    const timeline = detail.timeline || [];
    const context = detail.context;
    const top = Math.max(1, context ? context.trigger : 0, ...timeline.map((p) => p.pressure));
    const guides = context
      ? [
          { y: context.trigger, label: `trigger ${formatPressure(context.trigger)}` },
          { y: context.target, label: `target ${formatPressure(context.target)}` },
        ]
      : [];
    drawChart(container, {
      label: `Pressure per turn of session ${detail.id}`,
      points: timeline.map((p) => ({
        x: p.turn,
        y: p.pressure,
        hue: pressureHue(p.pressure),
        title:
          `turn ${p.turn}: ${formatPressure(p.pressure)} · ` +
          `${formatInt(p.tokens_before)} → ${formatInt(p.tokens_after)} tokens` +
          (p.action !== "none" ? ` · ${p.action}` : ""),
        data: { turn: p.turn, pressure: p.pressure, action: p.action },
      })),
      markers: timeline
        .filter((p) => p.action !== "none")
        .map((p) => ({
          x: p.turn,
          title:
            `turn ${p.turn}: ${p.action}, ` +
            `${formatInt(p.tokens_before)} → ${formatInt(p.tokens_after)} tokens`,
          data: { turn: p.turn, action: p.action },
        })),
      yMax: top,
      yFormat: (v) => `${Math.round(v * 100)}%`,
      guides,
    });
  }

  // tokens saved by the turns on the timeline (the store keeps the latest 200 turns)
  function drawSaved(container, detail) {
    let total = 0;
    const points = (detail.timeline || []).map((p) => {
      total += p.tokens_before - p.tokens_after;
      return {
        x: p.turn,
        y: total,
        title: `turn ${p.turn}: ${formatInt(total)} tokens saved so far`,
        data: { turn: p.turn, saved: total },
      };
    });
    drawChart(container, {
      label: `Tokens saved over the turns of session ${detail.id}`,
      points,
      markers: [],
      yMax: Math.max(1, ...points.map((p) => p.y)),
      yMin: Math.min(0, ...points.map((p) => p.y)),
      yFormat: formatInt,
      guides: [],
      line: true,
    });
  }

  function renderBreakdown(container, context) {
    if (!context) {
      container.replaceChildren(
        element("p", { className: "muted", text: "No request forwarded yet." }),
      );
      return;
    }
    const bar = element("div", {
      className: "stack",
      attrs: { role: "img", "aria-label": "context by category" },
    });
    const legend = element("ul", { className: "legend" });
    for (const name of CATEGORIES) {
      const tokens = context.breakdown[name] || 0;
      const share = context.window > 0 ? (tokens / context.window) * 100 : 0;
      const segment = element("span", {
        className: `segment ${name}`,
        title: `${name}: ${formatInt(tokens)}`,
      });
      segment.style.width = `${share}%`;
      bar.append(segment);
      const item = element("li", { attrs: { "data-category": name } });
      item.append(
        element("span", { className: `swatch ${name}` }),
        `${name.replace("_", " ")} ${formatInt(tokens)}`,
      );
      legend.append(item);
    }
    const facts = element("p", {
      className: "muted",
      text:
        `${formatInt(context.tokens)} of ${formatInt(context.window)} tokens · ` +
        `${formatInt(context.output_reserved)} reserved for the answer · ` +
        `pressure ${formatPressure(context.pressure)} · ` +
        `trigger ${formatPressure(context.trigger)} · target ${formatPressure(context.target)} · ` +
        `calibration ×${context.calibration.toFixed(3)}`,
    });
    container.replaceChildren(bar, legend, facts);
  }

  // ---------------------------------------------------------------- charts (inline SVG)

  // A small line-and-points chart: x is the turn, y from `yMin` (0) to `yMax`; `guides` are
  // dashed horizontal lines, `markers` diamonds on a vertical line at a turn.
  function drawChart(container, spec) {
    const { width, height, left, right, top, bottom } = CHART;
    const root = svg("svg", {
      viewBox: `0 0 ${width} ${height}`,
      role: "img",
      "aria-label": spec.label,
    });
    if (spec.points.length === 0) {
      root.append(
        svg(
          "text",
          { x: width / 2, y: height / 2, class: "empty", "text-anchor": "middle" },
          "no turns yet",
        ),
      );
      container.replaceChildren(root);
      return;
    }
    const xs = spec.points.map((p) => p.x);
    const scale = {
      x: linear(Math.min(...xs), Math.max(...xs), left, width - right),
      y: linear(spec.yMin || 0, spec.yMax, height - bottom, top),
    };
    root.append(axes(spec, scale, xs), guideLines(spec.guides, scale));
    if (spec.line) root.append(polyline(spec.points, scale));
    root.append(markerGroup(spec.markers, scale), pointGroup(spec.points, scale));
    container.replaceChildren(root);
  }

  // Maps [d0, d1] onto [r0, r1]; a single value lands in the middle.
  function linear(d0, d1, r0, r1) {
    if (d1 === d0) return () => (r0 + r1) / 2;
    return (value) => r0 + ((value - d0) / (d1 - d0)) * (r1 - r0);
  }

  function axes(spec, scale, xs) {
    const { width, height, left, right, bottom } = CHART;
    const group = svg("g", { class: "axes" });
    for (const value of ticks(spec.yMin || 0, spec.yMax, 4)) {
      const y = scale.y(value);
      group.append(
        svg("line", { x1: left, x2: width - right, y1: y, y2: y, class: "grid" }),
        svg("text", { x: left - 6, y: y + 4, "text-anchor": "end" }, spec.yFormat(value)),
      );
    }
    const first = Math.min(...xs);
    const last = Math.max(...xs);
    for (const value of ticks(first, last, 8).filter(Number.isInteger)) {
      group.append(
        svg("text", { x: scale.x(value), y: height - bottom + 18, "text-anchor": "middle" }, value),
      );
    }
    group.append(
      svg("line", {
        x1: left,
        x2: width - right,
        y1: height - bottom,
        y2: height - bottom,
        class: "axis",
      }),
      svg(
        "text",
        { x: width - right, y: height - 2, "text-anchor": "end", class: "axis-label" },
        "turn",
      ),
    );
    return group;
  }

  // Round steps (1, 2 or 5 times a power of ten) from `low` to `high`, about `count` of them.
  function ticks(low, high, count) {
    if (high <= low) return [low];
    const raw = (high - low) / count;
    const power = 10 ** Math.floor(Math.log10(raw));
    const step = [1, 2, 5, 10].map((m) => m * power).find((s) => s >= raw);
    const values = [];
    for (let v = Math.ceil(low / step) * step; v <= high + step * 1e-9; v += step) {
      values.push(Number(v.toPrecision(12)));
    }
    return values;
  }

  function guideLines(guides, scale) {
    const { width, left, right } = CHART;
    const group = svg("g", { class: "guides" });
    for (const guide of guides) {
      const y = scale.y(guide.y);
      group.append(
        svg("line", { x1: left, x2: width - right, y1: y, y2: y, class: "guide" }),
        svg("text", { x: width - right, y: y - 4, "text-anchor": "end" }, guide.label),
      );
    }
    return group;
  }

  function polyline(points, scale) {
    const coordinates = points.map((p) => `${scale.x(p.x)},${scale.y(p.y)}`).join(" ");
    return svg("polyline", { points: coordinates, class: "line" });
  }

  function withData(node, data) {
    for (const [name, value] of Object.entries(data))
      node.setAttribute(`data-${name}`, String(value));
    return node;
  }

  function markerGroup(markers, scale) {
    const { height, top, bottom } = CHART;
    const group = svg("g", { class: "markers" });
    for (const marker of markers) {
      const x = scale.x(marker.x);
      const diamond = `M ${x} ${top - 6} l 6 6 l -6 6 l -6 -6 z`;
      const node = withData(svg("g", { class: "marker" }), marker.data);
      node.append(
        svg("title", {}, marker.title),
        svg("line", { x1: x, x2: x, y1: top + 6, y2: height - bottom, class: "marker-line" }),
        svg("path", { d: diamond, class: "marker-shape" }),
      );
      group.append(node);
    }
    return group;
  }

  function pointGroup(points, scale) {
    const group = svg("g", { class: "points" });
    for (const point of points) {
      const circle = withData(
        svg("circle", { cx: scale.x(point.x), cy: scale.y(point.y), r: 3.5, class: "point" }),
        point.data,
      );
      if (point.hue !== undefined) circle.style.setProperty("--hue", point.hue);
      circle.append(svg("title", {}, point.title));
      group.append(circle);
    }
    return group;
  }

  // ---------------------------------------------------------------- recent compactions

  // From the compaction histories of the sessions seen most recently that ever compacted.
  async function showRecentCompactions() {
    const candidates = state.sessions
      .filter((s) => s.compactions > 0)
      .sort((a, b) => (b.last_seen || 0) - (a.last_seen || 0))
      .slice(0, RECENT_SESSIONS);
    const details = await Promise.all(candidates.map(detailOf));
    const events = [];
    candidates.forEach((session, index) => {
      const history = (details[index] && details[index].history) || [];
      for (const entry of history) events.push({ session, entry });
    });
    events.sort((a, b) => b.entry.at - a.entry.at);
    const rows = events.slice(0, RECENT_ROWS).map(compactionRow);
    $("compactions").tBodies[0].replaceChildren(...rows);
    $("compactions-empty").hidden = rows.length > 0;
  }

  function compactionRow({ session, entry }) {
    const row = element("tr", { attrs: { "data-id": session.id, "data-tenant": session.tenant } });
    const summarizer = entry.summarizer_model
      ? `${entry.summarizer_model} (${formatInt(entry.summarizer_tokens)} tokens)`
      : "–";
    const link = element("button", {
      text: session.id,
      className: "link code",
      attrs: { type: "button" },
    });
    link.addEventListener("click", () => {
      select(keyOf(session));
      $("detail").scrollIntoView({ behavior: "smooth", block: "start" });
    });
    const sessionCell = cell("session", undefined);
    sessionCell.append(link);
    row.append(
      cell("at", formatAgo(entry.at), undefined, formatWhen(entry.at)),
      sessionCell,
      cell("strategy", entry.strategy),
      cell("trigger", entry.trigger),
      cell("tokens_before", formatInt(entry.tokens_before), "num"),
      cell("tokens_after", formatInt(entry.tokens_after), "num"),
      cell("saved", formatInt(entry.tokens_before - entry.tokens_after), "num"),
      cell("summarizer", summarizer),
    );
    return row;
  }

  // ---------------------------------------------------------------- wiring

  function wire() {
    for (const th of $("sessions").tHead.rows[0].cells) {
      th.querySelector("button").addEventListener("click", () => sortBy(th.dataset.key));
    }
    $("login-form").addEventListener("submit", (event) => {
      event.preventDefault();
      const token = $("token-input").value.trim();
      if (!token) return;
      sessionStorage.setItem(TOKEN_KEY, token);
      $("token-input").value = "";
      start();
    });
    $("sign-out").addEventListener("click", () => askForToken());
    $("scope-sign-out").addEventListener("click", () => askForToken());
    // A new `#token=` typed into the address bar does not reload the page.
    window.addEventListener("hashchange", start);
    document.addEventListener("visibilitychange", () => {
      if (!document.hidden) refresh();
    });
  }

  wire();
  start();
})();
