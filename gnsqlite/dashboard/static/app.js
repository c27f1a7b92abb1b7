// gnsqlite dashboard: renders the websocket's samples. Read-only: it never sends commands.
// Every text from the server goes through textContent, never innerHTML.
"use strict";

const state = { interval: 1, historySeconds: 600, history: {}, cards: {} };
const COLORS = { received: "#2563eb", finished: "#16a34a", requeued: "#dc2626" };
const MAX_TAIL = 50;
const MAX_EVENTS = 200;

function el(tag, text, cls) {
  const node = document.createElement(tag);
  if (text !== undefined && text !== null) node.textContent = String(text);
  if (cls) node.className = cls;
  return node;
}

function fmt(n) {
  return Number(n || 0).toLocaleString("en-US", { maximumFractionDigits: 1 });
}

function clock(t) {
  return new Date(t * 1000).toLocaleTimeString("en-GB");
}

function card(source) {
  let c = state.cards[source.id];
  if (c) return c;
  const template = document.getElementById(source.kind + "-card");
  const node = template.content.firstElementChild.cloneNode(true);
  node.dataset.source = source.id;
  node.dataset.kind = source.kind;
  node.querySelector(".title").textContent = source.title;
  document.getElementById("sources").appendChild(node);
  c = { node, canvas: node.querySelector("canvas") };
  state.cards[source.id] = c;
  return c;
}

function setCounters(node, totals, rates, extra) {
  const values = Object.assign({}, totals || {}, extra || {});
  node.querySelectorAll("[data-counter]").forEach((span) => {
    const key = span.dataset.counter;
    if (key in values) span.textContent = fmt(values[key]);
  });
  node.querySelectorAll("[data-rate]").forEach((span) => {
    const value = rates ? rates[span.dataset.rate] : 0;
    span.textContent = fmt(value) + " /s";
  });
}

function fillRows(tbody, rows) {
  tbody.replaceChildren(...rows.map((cells) => {
    const tr = el("tr");
    cells.forEach((cell, i) => {
      const td = el("td", cell.text !== undefined ? cell.text : cell);
      if (cell.cls) td.className = cell.cls;
      if (i === 0 && cell.text === undefined) td.className = "name";
      tr.appendChild(td);
    });
    return tr;
  }));
}

function renderConsumer(source) {
  const c = card(source);
  const t = source.totals || {};
  setCounters(c.node, t, source.rates, { max_in_flight: source.max_in_flight });
  const backoff = c.node.querySelector(".badge.backoff");
  const b = source.backoff || { state: "off" };
  backoff.textContent = "backoff: " + b.state + (b.level ? " (level " + b.level + ")" : "");
  backoff.classList.toggle("warn", b.state !== "off" && b.state !== "normal");
  const starved = c.node.querySelector(".badge.starved");
  starved.textContent = source.starved ? "starved" : "not starved";
  starved.classList.toggle("warn", !!source.starved);
  fillRows(c.node.querySelector("tbody"), (source.connections || []).map((conn) => [
    conn.address, fmt(conn.rdy), { text: conn.rdy_reason || "", cls: "reason" },
    fmt(conn.in_flight), fmt(conn.received),
    fmt(conn.finished), fmt(conn.requeued),
  ]));
}

function renderProducer(source) {
  const c = card(source);
  setCounters(c.node, source.counts);
  const list = c.node.querySelector(".nsqds");
  list.replaceChildren(...(source.connections || []).map((conn) => {
    const li = el("li", conn.address + (conn.connected ? " (connected)" : " (down)"));
    if (conn.connected) li.className = "up";
    return li;
  }));
  fillRows(c.node.querySelector("table.publishes tbody"), (source.publishes || []).map((row) => [
    row.topic, row.command, fmt(row.count), fmt(row.messages),
  ]));
  const errors = Object.entries(source.errors || {}).map(([code, n]) => code + ": " + fmt(n));
  c.node.querySelector(".errors").textContent = errors.length ? "errors by code: " + errors.join(", ") : "";
}

function renderCluster(source) {
  const c = card(source);
  setCounters(c.node, source.totals, source.rates);
  const errors = Object.entries(source.errors || {}).map(([a, e]) => a + ": " + e);
  c.node.querySelector(".errors").textContent = errors.join("; ");
  const rows = [];
  (source.topics || []).forEach((topic) => {
    rows.push([topic.topic, fmt(topic.depth), "", "", "", fmt(topic.message_count), ""]);
    topic.channels.forEach((ch) => rows.push([
      { text: ch.channel, cls: "channel" }, fmt(ch.depth), fmt(ch.in_flight_count),
      fmt(ch.requeue_count), fmt(ch.timeout_count), fmt(ch.message_count), fmt(ch.clients),
    ]));
  });
  fillRows(c.node.querySelector("tbody"), rows);
}

function drawChart(id) {
  const c = state.cards[id];
  if (!c || !c.canvas) return;
  const canvas = c.canvas;
  const points = state.history[id] || [];
  const ratio = window.devicePixelRatio || 1;
  const width = canvas.clientWidth || 600;
  const height = canvas.clientHeight || 180;
  canvas.width = Math.round(width * ratio);
  canvas.height = Math.round(height * ratio);
  const ctx = canvas.getContext("2d");
  ctx.setTransform(ratio, 0, 0, ratio, 0, 0);
  ctx.clearRect(0, 0, width, height);
  const pad = { left: 44, right: 8, top: 8, bottom: 20 };
  const now = points.length ? points[points.length - 1][0] : Date.now() / 1000;
  const span = Math.min(state.historySeconds, Math.max(60, points.length ? now - points[0][0] : 60));
  let max = 0;
  points.forEach((p) => { max = Math.max(max, p[1], p[2], p[3]); });
  const top = max > 0 ? niceCeil(max) : 1;
  const x = (t) => pad.left + (width - pad.left - pad.right) * (1 - (now - t) / span);
  const y = (v) => pad.top + (height - pad.top - pad.bottom) * (1 - v / top);
  ctx.strokeStyle = "#e5e7eb";
  ctx.fillStyle = "#6b7280";
  ctx.font = "11px system-ui, sans-serif";
  ctx.lineWidth = 1;
  for (let i = 0; i <= 4; i++) {
    const v = (top * i) / 4;
    ctx.beginPath();
    ctx.moveTo(pad.left, y(v));
    ctx.lineTo(width - pad.right, y(v));
    ctx.stroke();
    ctx.fillText(fmt(v), 4, y(v) + 4);
  }
  ctx.fillText("-" + Math.round(span) + " s", pad.left, height - 5);
  ctx.fillText("now", width - pad.right - 22, height - 5);
  ["received", "finished", "requeued"].forEach((key, k) => {
    ctx.strokeStyle = COLORS[key];
    ctx.lineWidth = 2;
    ctx.beginPath();
    points.filter((p) => now - p[0] <= span).forEach((p, i) => {
      if (i === 0) ctx.moveTo(x(p[0]), y(p[k + 1]));
      else ctx.lineTo(x(p[0]), y(p[k + 1]));
    });
    ctx.stroke();
  });
  // what the chart shows, for people reading the DOM (and for tests)
  canvas.dataset.points = String(points.length);
  canvas.dataset.max = String(max);
  const last = points[points.length - 1];
  canvas.dataset.last = last ? JSON.stringify(last.slice(1)) : "[]";
}

function niceCeil(v) {
  const power = Math.pow(10, Math.floor(Math.log10(v)));
  for (const step of [1, 2, 2.5, 5, 10]) {
    if (step * power >= v) return step * power;
  }
  return 10 * power;
}

function addTail(items) {
  const list = document.getElementById("tail");
  items.forEach((m) => {
    const li = el("li");
    li.appendChild(el("span", clock(m.t) + " " + m.nsqd + " #" + m.attempts, "meta"));
    li.appendChild(el("span", m.body + (m.truncated ? " \u2026" : ""), "body"));
    list.prepend(li);
  });
  while (list.children.length > MAX_TAIL) list.lastElementChild.remove();
}

function addEvents(items) {
  const list = document.getElementById("events");
  items.forEach((e) => {
    const li = el("li");
    li.appendChild(el("span", clock(e.t), "time"));
    const card = state.cards[e.source];
    const title = card ? card.node.querySelector(".title").textContent + ": " : "";
    li.appendChild(el("span", title + e.text));
    list.prepend(li);
  });
  while (list.children.length > MAX_EVENTS) list.lastElementChild.remove();
}

function render(snapshot) {
  (snapshot.sources || []).forEach((source) => {
    if (source.kind === "consumer") renderConsumer(source);
    else if (source.kind === "producer") renderProducer(source);
    else if (source.kind === "cluster") renderCluster(source);
    drawChart(source.id);
  });
  document.getElementById("updated").textContent = "updated " + clock(snapshot.t);
}

function onFrame(frame) {
  if (frame.type === "hello") {
    state.interval = frame.interval;
    state.historySeconds = frame.history_seconds;
    state.history = frame.history || {};
    document.getElementById("tail").replaceChildren();
    document.getElementById("events").replaceChildren();
    render(frame.snapshot);
    addEvents(frame.events || []);
    addTail(frame.tail || []);
    return;
  }
  const limit = Math.ceil(state.historySeconds / state.interval) + 1;
  Object.entries(frame.points || {}).forEach(([id, point]) => {
    const series = (state.history[id] = state.history[id] || []);
    series.push(point);
    if (series.length > limit) series.splice(0, series.length - limit);
  });
  render(frame.snapshot);
  addEvents(frame.events || []);
  addTail(frame.tail || []);
}

function connect(delay) {
  const link = document.getElementById("link");
  const scheme = location.protocol === "https:" ? "wss://" : "ws://";
  const ws = new WebSocket(scheme + location.host + "/ws");
  ws.onopen = () => { link.textContent = "live"; link.className = "pill on"; delay = 1000; };
  ws.onmessage = (event) => onFrame(JSON.parse(event.data));
  ws.onclose = () => {
    link.textContent = "reconnecting";
    link.className = "pill off";
    setTimeout(() => connect(Math.min(delay * 2, 10000)), delay);
  };
}

window.addEventListener("resize", () => Object.keys(state.cards).forEach(drawChart));
connect(1000);
