// chatroom dashboard: a read-only live view of a room.
//
// Rules this file keeps:
// - Every string written by agents goes into the page as text (textContent,
//   text nodes), never parsed as HTML.
// - The token lives in sessionStorage only, and goes only to this origin's
//   /v1 API in the Authorization header.
// - Nothing here writes to the server: the dashboard only reads.
// - Live updates come from /v1/stream read with fetch (EventSource cannot send
//   a header), reconnecting with back-off after a drop.
'use strict';

(function () {
  const TOKEN_KEY = 'chatroom.token';
  const MAX_CHAT = 500;
  const MAX_ACTIVITY = 300;
  const TAIL = 300;
  const STALL_MS = 40000; // three missed keep-alives
  const COLUMNS = [
    ['pending', 'Pending'],
    ['in_progress', 'In progress'],
    ['blocked', 'Blocked'],
    ['in_review', 'In review'],
    ['closed', 'Done'],
  ];

  const $ = (id) => document.getElementById(id);

  /** Builds an element; string children become text nodes. */
  function el(tag, attrs, ...children) {
    const node = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (v === undefined || v === null || v === false) continue;
      if (k === 'class') node.className = v;
      else if (k === 'text') node.textContent = v;
      else if (k === 'title') node.title = v;
      else if (k.startsWith('data-')) node.setAttribute(k, v);
      else if (k === 'onclick') node.addEventListener('click', v);
      else node.setAttribute(k, v);
    }
    for (const c of children.flat()) {
      if (c === undefined || c === null || c === false) continue;
      node.append(c instanceof Node ? c : document.createTextNode(String(c)));
    }
    return node;
  }

  const state = {
    token: null,
    me: null,
    rooms: [],
    room: null,
    gen: 0,
    abort: null,
    lastEvent: null,
    lastMsg: null,
    tasks: [],
    closed: [],
    files: [],
    agents: [],
    messages: new Map(),
    activity: new Set(),
    timers: {},
  };

  // ---------- API ----------

  class ApiError extends Error {
    constructor(status, code, message) {
      super(message);
      this.status = status;
      this.code = code;
    }
  }

  async function api(path, params) {
    const url = new URL(path, location.origin);
    for (const [k, v] of Object.entries(params || {})) {
      if (v !== undefined && v !== null) url.searchParams.set(k, v);
    }
    const res = await fetch(url, {
      headers: { Authorization: 'Bearer ' + state.token, Accept: 'application/json' },
      cache: 'no-store',
    });
    let body = null;
    try {
      body = await res.json();
    } catch (_) {
      body = null;
    }
    if (!res.ok) {
      const err = (body && body.error) || {};
      throw new ApiError(res.status, err.code || 'http_' + res.status, err.message || 'HTTP ' + res.status);
    }
    return body;
  }

  // ---------- formatting ----------

  function parseTs(ts) {
    const t = Date.parse(ts);
    return Number.isNaN(t) ? null : t;
  }

  function clock(ts) {
    const t = parseTs(ts);
    if (t === null) return '';
    const d = new Date(t);
    const now = new Date();
    const hm = d.toLocaleTimeString([], { hour: '2-digit', minute: '2-digit', hourCycle: 'h23' });
    if (d.toDateString() === now.toDateString()) return hm;
    return d.toLocaleDateString([], { month: 'short', day: 'numeric' }) + ' ' + hm;
  }

  function ago(ts) {
    const t = parseTs(ts);
    if (t === null) return 'never';
    const s = Math.max(0, (Date.now() - t) / 1000);
    if (s < 45) return 'just now';
    if (s < 3600) return Math.round(s / 60) + 'm ago';
    if (s < 86400) return Math.round(s / 3600) + 'h ago';
    return Math.round(s / 86400) + 'd ago';
  }

  function presence(ts) {
    const t = parseTs(ts);
    if (t === null) return 'away';
    const s = (Date.now() - t) / 1000;
    if (s < 300) return 'active';
    if (s < 3600) return 'idle';
    return 'away';
  }

  function size(n) {
    if (n < 1024) return n + ' B';
    if (n < 1024 * 1024) return (n / 1024).toFixed(1) + ' KB';
    return (n / 1024 / 1024).toFixed(1) + ' MB';
  }

  /** Text with @mentions wrapped in spans (as text nodes, never HTML). */
  function withMentions(text) {
    const out = [];
    const re = /(^|[^\p{L}\p{N}_.-])@([\p{L}\p{N}_.-]+)/gu;
    let last = 0;
    let m;
    while ((m = re.exec(text)) !== null) {
      const start = m.index + m[1].length;
      const name = m[2].replace(/[.-]+$/, '');
      if (!name) continue;
      out.push(text.slice(last, start));
      const mine = state.me && name.toLowerCase() === state.me.agent.toLowerCase();
      out.push(el('span', { class: mine ? 'mention me' : 'mention' }, '@' + name));
      last = start + 1 + name.length;
      re.lastIndex = last;
    }
    out.push(text.slice(last));
    return out;
  }

  function snippet(text, n) {
    const flat = String(text || '').replace(/\s+/g, ' ').trim();
    return flat.length > n ? flat.slice(0, n - 1) + '…' : flat;
  }

  // ---------- connection indicator ----------

  function setConn(kind, text) {
    $('conn').dataset.state = kind;
    $('conn-text').textContent = text;
  }

  // ---------- login ----------

  function showLogin(message) {
    state.gen++;
    if (state.abort) state.abort.abort();
    $('app').hidden = true;
    $('login').hidden = false;
    $('forget').hidden = true;
    $('whoami').textContent = '';
    $('room-title').textContent = '';
    $('room-desc').textContent = '';
    setConn('off', 'not connected');
    const err = $('login-error');
    err.hidden = !message;
    err.textContent = message || '';
    $('token').focus();
  }

  async function start(token) {
    state.token = token;
    let rooms;
    try {
      rooms = await api('/v1/rooms');
    } catch (e) {
      state.token = null;
      sessionStorage.removeItem(TOKEN_KEY);
      if (e instanceof ApiError && e.status === 401) return showLogin('That token was refused (mistyped, revoked, or for another server).');
      if (e instanceof ApiError) return showLogin(e.message);
      return showLogin('Cannot reach the server.');
    }
    sessionStorage.setItem(TOKEN_KEY, token);
    state.me = rooms;
    state.rooms = rooms.rooms || [];
    $('login').hidden = true;
    $('app').hidden = false;
    $('forget').hidden = false;
    const flags = [];
    if (rooms.readonly) flags.push('observer');
    if (rooms.lead) flags.push('lead');
    if (rooms.admin) flags.push('admin');
    if (rooms.all_rooms) flags.push('all rooms');
    $('whoami').replaceChildren(
      el('span', { class: 'agent-name' }, rooms.agent),
      flags.length ? el('span', { class: 'flags' }, ' · ' + flags.join(', ')) : null,
    );
    const wanted = decodeURIComponent((location.hash.match(/room=([^&]+)/) || [])[1] || '');
    const names = state.rooms.map((r) => r.name);
    const room = names.includes(wanted) ? wanted : names.includes(rooms.default_room) ? rooms.default_room : names[0];
    if (!room) {
      renderRooms();
      setConn('off', 'no rooms');
      return;
    }
    openRoom(room);
  }

  // ---------- rooms ----------

  function renderRooms() {
    const list = $('rooms');
    list.replaceChildren(
      ...state.rooms.map((r) =>
        el(
          'li',
          {
            class: r.name === state.room ? 'room current' : 'room',
            tabindex: '0',
            'data-room': r.name,
            onclick: () => r.name !== state.room && openRoom(r.name),
          },
          el('div', { class: 'room-name' }, '#' + r.name),
          el(
            'div',
            { class: 'room-counts' },
            el('span', { title: 'open tasks' }, String(r.open_tasks), el('small', {}, ' open')),
            el('span', { title: 'messages' }, String(r.messages), el('small', {}, ' msgs')),
            el('span', { title: 'files' }, String(r.files), el('small', {}, ' files')),
          ),
        ),
      ),
    );
    if (state.rooms.length === 0) list.append(el('li', { class: 'empty' }, 'No rooms for this token.'));
    const cur = state.rooms.find((r) => r.name === state.room);
    $('room-title').textContent = cur ? '#' + cur.name : '';
    $('room-desc').textContent = cur ? snippet(cur.description, 140) : '';
    renderInfo(cur);
  }

  function renderInfo(room) {
    const box = $('info');
    if (!room) return box.replaceChildren();
    const rows = [];
    if (room.description) rows.push(el('p', { class: 'desc' }, room.description));
    if (room.repo_url) {
      const url = room.repo_url.trim();
      const link = /^https?:\/\//i.test(url)
        ? el('a', { href: url, target: '_blank', rel: 'noopener noreferrer' }, url)
        : el('span', {}, url);
      rows.push(el('div', { class: 'kv' }, el('span', { class: 'k' }, 'repo'), link));
    }
    rows.push(
      el('div', { class: 'kv' }, el('span', { class: 'k' }, 'retention'), room.retention_days ? room.retention_days + ' days' : 'keep everything'),
    );
    if (room.onboarding_notes) {
      rows.push(el('details', {}, el('summary', {}, 'Onboarding notes'), el('pre', { class: 'notes' }, room.onboarding_notes)));
    }
    if (!room.description && !room.repo_url && !room.onboarding_notes) {
      rows.unshift(el('p', { class: 'muted' }, 'No description yet.'));
    }
    box.replaceChildren(...rows);
  }

  function refreshRoomsSoon() {
    clearTimeout(state.timers.rooms);
    state.timers.rooms = setTimeout(async () => {
      try {
        const r = await api('/v1/rooms');
        state.me = r;
        state.rooms = r.rooms || [];
        renderRooms();
      } catch (e) {
        handleApiFailure(e);
      }
    }, 1500);
  }

  function handleApiFailure(e) {
    if (e instanceof ApiError && e.status === 401) showLogin('The token was refused: it may have been revoked.');
  }

  function openRoom(name) {
    state.gen++;
    if (state.abort) state.abort.abort();
    state.room = name;
    state.lastEvent = null;
    state.lastMsg = null;
    state.tasks = [];
    state.closed = [];
    state.files = [];
    state.agents = [];
    state.messages = new Map();
    state.activity = new Set();
    $('chat').replaceChildren();
    $('activity').replaceChildren();
    renderBoard();
    renderFiles();
    renderAgents();
    renderRooms();
    history.replaceState(null, '', '#room=' + encodeURIComponent(name));
    loadAgents();
    follow(name, state.gen);
  }

  // ---------- agents (presence) ----------

  async function loadAgents() {
    const room = state.room;
    try {
      const r = await api('/v1/agents', { room });
      if (room !== state.room) return;
      state.agents = r.agents || [];
      renderAgents();
    } catch (e) {
      handleApiFailure(e);
    }
  }

  function seen(agent, ts) {
    const a = state.agents.find((x) => x.agent === agent);
    if (a && (!a.last_seen || parseTs(ts) > parseTs(a.last_seen))) {
      a.last_seen = ts;
      renderAgents();
    }
  }

  function renderAgents() {
    const order = { active: 0, idle: 1, away: 2 };
    const agents = [...state.agents].sort(
      (a, b) => order[presence(a.last_seen)] - order[presence(b.last_seen)] || (parseTs(b.last_seen) || 0) - (parseTs(a.last_seen) || 0),
    );
    const active = agents.filter((a) => presence(a.last_seen) === 'active').length;
    $('agents-count').textContent = agents.length ? active + '/' + agents.length + ' active' : '';
    $('agents').replaceChildren(
      ...agents.map((a) => {
        const tags = [];
        if (a.is_you) tags.push('you');
        if (a.lead) tags.push('lead');
        if (a.admin) tags.push('admin');
        if (a.readonly) tags.push('observer');
        return el(
          'li',
          { class: 'agent ' + presence(a.last_seen), title: a.last_seen ? 'last seen ' + new Date(parseTs(a.last_seen)).toLocaleString() : 'never seen' },
          el('span', { class: 'dot' }),
          el('span', { class: 'agent-name' }, a.agent),
          tags.length ? el('span', { class: 'tags' }, tags.join(' · ')) : null,
          a.skills && a.skills.length ? el('span', { class: 'skills' }, a.skills.join(', ')) : null,
          el('span', { class: 'ago' }, ago(a.last_seen)),
        );
      }),
    );
  }

  // ---------- board ----------

  function renderBoard() {
    const groups = { pending: [], in_progress: [], blocked: [], in_review: [], closed: [] };
    for (const t of state.tasks) (groups[t.status] || groups.pending).push(t);
    groups.closed = state.closed;
    const rank = { urgent: 0, high: 1, normal: 2, low: 3 };
    for (const k of ['pending', 'in_progress', 'blocked', 'in_review']) {
      groups[k].sort((a, b) => (rank[a.priority] ?? 2) - (rank[b.priority] ?? 2) || a.id - b.id);
    }
    $('board-count').textContent = state.tasks.length + ' open';
    $('board').replaceChildren(
      ...COLUMNS.map(([key, label]) =>
        el(
          'div',
          { class: 'col col-' + key },
          el('div', { class: 'col-head' }, el('span', {}, label), el('span', { class: 'n' }, String(groups[key].length))),
          el('div', { class: 'cards' }, ...groups[key].map(card), groups[key].length ? null : el('div', { class: 'empty' }, '—')),
        ),
      ),
    );
  }

  function card(t) {
    const meta = [];
    if (t.assignee) meta.push(el('span', { class: 'holder', title: 'assignee' }, '● ' + t.assignee));
    else meta.push(el('span', { class: 'unheld' }, 'unclaimed'));
    if (t.required_skill) meta.push(el('span', { class: 'chip skill', title: 'required skill' }, t.required_skill));
    if (t.needs_review) meta.push(el('span', { class: 'chip review', title: 'needs review' }, 'review'));
    if (t.blocked_by_unfinished && t.blocked_by_unfinished.length) {
      meta.push(el('span', { class: 'chip deps', title: 'waiting for ' + t.blocked_by_unfinished.map((d) => '#' + d).join(', ') }, 'waits on ' + t.blocked_by_unfinished.map((d) => '#' + d).join(' ')));
    }
    if (t.lease_expires_ts) meta.push(el('span', { class: 'chip lease', title: 'lease expires ' + new Date(parseTs(t.lease_expires_ts)).toLocaleString() }, 'lease'));
    const node = el(
      'article',
      {
        class: 'card prio-' + (t.priority || 'normal') + ' st-' + t.status,
        tabindex: '0',
        'data-task': String(t.id),
        onclick: () => showTask(t.id),
      },
      el(
        'div',
        { class: 'card-top' },
        el('span', { class: 'id' }, '#' + t.id),
        t.priority && t.priority !== 'normal' ? el('span', { class: 'prio' }, t.priority) : null,
        t.status === 'cancelled' ? el('span', { class: 'chip cancelled' }, 'cancelled') : null,
        el('span', { class: 'ver', title: 'version' }, 'v' + t.version),
      ),
      el('div', { class: 'title' }, t.title),
      el('div', { class: 'meta' }, ...meta),
      el('div', { class: 'by' }, 'by ' + t.created_by + ' · ' + ago(t.updated_ts)),
    );
    node.addEventListener('keydown', (ev) => {
      if (ev.key === 'Enter') showTask(t.id);
    });
    return node;
  }

  async function showTask(id) {
    const room = state.room;
    let r;
    try {
      r = await api('/v1/tasks/' + encodeURIComponent(id), { room });
    } catch (e) {
      handleApiFailure(e);
      return;
    }
    const t = r.task;
    const kv = (k, v) => el('div', { class: 'kv' }, el('span', { class: 'k' }, k), el('span', {}, v));
    const body = [
      el('div', { class: 'modal-id' }, '#' + t.id + ' · ' + t.status.replace('_', ' ') + ' · v' + t.version),
      el('h3', { id: 'modal-title' }, t.title),
      el(
        'div',
        { class: 'kvs' },
        kv('holder', t.assignee || '—'),
        kv('priority', t.priority),
        kv('created', t.created_by + ', ' + clock(t.created_ts)),
        kv('updated', clock(t.updated_ts)),
        t.depends_on.length ? kv('depends on', t.depends_on.map((d) => '#' + d).join(', ')) : null,
        t.required_skill ? kv('skill', t.required_skill) : null,
        t.needs_review ? kv('review', 'required') : null,
      ),
    ];
    if (t.body) body.push(el('h4', {}, 'Description'), el('pre', { class: 'text' }, t.body));
    if (t.result) body.push(el('h4', {}, 'Result'), el('pre', { class: 'text' }, t.result));
    body.push(el('h4', {}, 'Notes (' + t.notes.length + ')'));
    body.push(
      el(
        'ol',
        { class: 'notes-list' },
        ...t.notes.map((n) => el('li', {}, el('div', { class: 'who' }, n.author + ' · ' + clock(n.ts)), el('div', { class: 'text' }, ...withMentions(n.body)))),
      ),
    );
    body.push(el('p', { class: 'warn' }, 'Written by agents: data, not instructions.'));
    $('modal-body').replaceChildren(...body);
    $('modal').hidden = false;
    $('modal-close').focus();
  }

  function closeModal() {
    $('modal').hidden = true;
  }

  // ---------- files ----------

  function renderFiles() {
    $('files-count').textContent = state.files.length ? String(state.files.length) : '';
    $('files').replaceChildren(
      ...state.files.map((f) =>
        el(
          'li',
          { class: 'file', title: f.mime + ' · sha256 ' + f.sha256 },
          el('button', { class: 'link', type: 'button', onclick: () => download(f) }, f.name),
          el('span', { class: 'fmeta' }, size(f.size) + ' · ' + f.author + ' · ' + ago(f.ts)),
        ),
      ),
    );
    if (!state.files.length) $('files').append(el('li', { class: 'empty' }, 'No files.'));
  }

  /** Fetches a file with the token and hands it to the browser as a download. */
  async function download(f) {
    try {
      const res = await fetch('/v1/files/' + encodeURIComponent(f.file_id) + '?room=' + encodeURIComponent(state.room), {
        headers: { Authorization: 'Bearer ' + state.token },
      });
      if (!res.ok) throw new ApiError(res.status, 'http', 'HTTP ' + res.status);
      const blob = await res.blob();
      const url = URL.createObjectURL(new Blob([blob], { type: 'application/octet-stream' }));
      const a = el('a', { href: url, download: f.name });
      document.body.append(a);
      a.click();
      a.remove();
      setTimeout(() => URL.revokeObjectURL(url), 10000);
    } catch (e) {
      handleApiFailure(e);
    }
  }

  // ---------- chat ----------

  function addMessage(m) {
    if (state.messages.has(m.id)) return;
    state.messages.set(m.id, m);
    state.lastMsg = Math.max(state.lastMsg || 0, m.id);
    const list = $('chat');
    const stick = list.scrollHeight - list.scrollTop - list.clientHeight < 40;
    const mine = state.me && m.author === state.me.agent;
    const mentionsMe = m.mentions_you;
    const parts = [];
    if (m.reply_to) {
      const parent = state.messages.get(m.reply_to);
      parts.push(
        el(
          'div',
          { class: 'quote', 'data-parent': String(m.reply_to) },
          '↪ ',
          parent ? el('span', { class: 'qa' }, parent.author) : el('span', { class: 'qa' }, '#' + m.reply_to),
          parent ? ' ' + snippet(parent.body, 90) : '',
        ),
      );
    }
    parts.push(
      el('div', { class: 'mhead' }, el('span', { class: 'author' }, m.author), el('span', { class: 'mid' }, '#' + m.id), el('time', {}, clock(m.ts))),
      el('div', { class: 'body' }, ...withMentions(m.body || '')),
    );
    const root = threadRoot(m);
    const item = el(
      'li',
      {
        class: 'msg' + (m.reply_to ? ' reply' : '') + (mine ? ' mine' : '') + (mentionsMe ? ' mentions-me' : ''),
        'data-id': String(m.id),
        'data-thread': String(root),
      },
      ...parts,
    );
    item.addEventListener('mouseenter', () => highlightThread(root, true));
    item.addEventListener('mouseleave', () => highlightThread(root, false));
    // Keep the list in id order even when a replay interleaves.
    let before = null;
    for (let n = list.lastElementChild; n; n = n.previousElementSibling) {
      if (Number(n.dataset.id) > m.id) before = n;
      else break;
    }
    list.insertBefore(item, before);
    while (list.children.length > MAX_CHAT) {
      state.messages.delete(Number(list.firstElementChild.dataset.id));
      list.firstElementChild.remove();
    }
    // A message that others reply to gets a count.
    if (m.reply_to) {
      const p = list.querySelector('li[data-id="' + CSS.escape(String(m.reply_to)) + '"] .mhead');
      if (p) {
        let c = p.querySelector('.replies');
        if (!c) {
          c = el('span', { class: 'replies' }, '');
          p.append(c);
        }
        c.dataset.n = String(Number(c.dataset.n || 0) + 1);
        c.textContent = c.dataset.n + (c.dataset.n === '1' ? ' reply' : ' replies');
      }
    }
    $('chat-count').textContent = state.messages.size ? String(state.messages.size) : '';
    if (stick) list.scrollTop = list.scrollHeight;
  }

  function threadRoot(m) {
    let cur = m;
    for (let i = 0; i < 50 && cur && cur.reply_to; i++) {
      const p = state.messages.get(cur.reply_to);
      if (!p) return cur.reply_to;
      cur = p;
    }
    return cur ? cur.id : m.id;
  }

  function highlightThread(root, on) {
    for (const n of $('chat').querySelectorAll('li[data-thread="' + CSS.escape(String(root)) + '"]')) {
      n.classList.toggle('thread-hl', on);
    }
  }

  // ---------- activity ----------

  const VERBS = {
    message: 'posted',
    task_created: 'created',
    task_claimed: 'claimed',
    task_updated: 'updated',
    task_released: 'released',
    note_added: 'noted on',
    task_submitted: 'submitted',
    task_reviewed: 'reviewed',
    task_cancelled: 'cancelled',
    task_lease_expired: 'lease lapsed on',
    file_added: 'shared',
    file_deleted: 'deleted',
    room_info_updated: 'updated the room info',
    retention_set: 'set retention',
  };

  function addActivity(e) {
    if (state.activity.has(e.id)) return;
    state.activity.add(e.id);
    state.lastEvent = Math.max(state.lastEvent || 0, e.id);
    const d = e.detail || {};
    let what = '';
    if (e.task_id) what = '#' + e.task_id + ' ' + (d.title || '');
    else if (e.kind === 'message') what = snippet(d.body, 120);
    else if (e.kind.startsWith('file_')) what = d.name || '';
    else if (e.kind === 'retention_set') what = d.days + ' days';
    else if (e.kind === 'room_info_updated') what = (d.fields || []).join(', ');
    let extra = '';
    if (e.kind === 'task_reviewed') extra = d.approve ? ' ✓ approved' : ' ✗ rejected';
    else if (d.status && e.task_id && e.kind !== 'note_added') extra = ' → ' + String(d.status).replace('_', ' ');
    const list = $('activity');
    const item = el(
      'li',
      { class: 'act k-' + e.kind + (e.mentions_you ? ' mentions-me' : ''), 'data-id': String(e.id) },
      el('time', {}, clock(e.ts)),
      el('span', { class: 'actor' }, e.actor),
      el('span', { class: 'verb' }, VERBS[e.kind] || e.kind),
      el('span', { class: 'what' }, what),
      extra ? el('span', { class: 'extra' }, extra) : null,
    );
    if (e.task_id) item.addEventListener('click', () => showTask(e.task_id));
    let before = null;
    for (let n = list.firstElementChild; n; n = n.nextElementSibling) {
      if (Number(n.dataset.id) < e.id) {
        before = n;
        break;
      }
    }
    list.insertBefore(item, before);
    while (list.children.length > MAX_ACTIVITY) list.lastElementChild.remove();
    seen(e.actor, e.ts);
    if (e.kind === 'room_info_updated' || e.kind === 'retention_set') refreshRoomsSoon();
  }

  // ---------- the stream ----------

  const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

  async function follow(room, gen) {
    let backoff = 1000;
    while (gen === state.gen) {
      const params = { room };
      if (state.lastEvent === null) {
        params.after = 'all';
        params.tail = String(TAIL);
      } else {
        params.after = String(state.lastEvent);
        params.after_msg = String(state.lastMsg || 0);
      }
      const ctrl = new AbortController();
      state.abort = ctrl;
      setConn('connecting', 'connecting…');
      let fatal = null;
      try {
        const url = new URL('/v1/stream', location.origin);
        for (const [k, v] of Object.entries(params)) url.searchParams.set(k, v);
        const res = await fetch(url, {
          headers: { Authorization: 'Bearer ' + state.token, Accept: 'text/event-stream' },
          signal: ctrl.signal,
          cache: 'no-store',
        });
        if (res.status === 401) {
          fatal = 'The token was refused: it may have been revoked.';
        } else if (!res.ok) {
          let msg = 'HTTP ' + res.status;
          try {
            msg = (await res.json()).error.message;
          } catch (_) {
            /* keep the status */
          }
          if (res.status === 403 || res.status === 404) fatal = msg;
          else throw new Error(msg);
        } else {
          backoff = 1000;
          await readStream(res.body, ctrl, (name, data) => {
            if (gen === state.gen) handle(name, data);
          });
        }
      } catch (_) {
        /* dropped: reconnect below */
      }
      if (gen !== state.gen) return;
      if (fatal) {
        if (fatal.startsWith('The token')) return showLogin(fatal);
        setConn('error', fatal);
        return;
      }
      setConn('retry', 'reconnecting in ' + Math.round(backoff / 1000) + ' s');
      await sleep(backoff);
      backoff = Math.min(backoff * 2, 15000);
    }
  }

  /** Reads Server-Sent Events from a fetch body; gives up when it stalls. */
  async function readStream(body, ctrl, onEvent) {
    const reader = body.getReader();
    const decoder = new TextDecoder();
    let buf = '';
    let stall = setTimeout(() => ctrl.abort(), STALL_MS);
    try {
      for (;;) {
        const { value, done } = await reader.read();
        if (done) return;
        clearTimeout(stall);
        stall = setTimeout(() => ctrl.abort(), STALL_MS);
        buf += decoder.decode(value, { stream: true }).replace(/\r\n?/g, '\n');
        let cut;
        while ((cut = buf.indexOf('\n\n')) >= 0) {
          const block = buf.slice(0, cut);
          buf = buf.slice(cut + 2);
          let name = 'message';
          const data = [];
          for (const line of block.split('\n')) {
            if (line.startsWith(':')) continue;
            const i = line.indexOf(':');
            const field = i < 0 ? line : line.slice(0, i);
            let v = i < 0 ? '' : line.slice(i + 1);
            if (v.startsWith(' ')) v = v.slice(1);
            if (field === 'event') name = v;
            else if (field === 'data') data.push(v);
          }
          if (data.length) {
            let parsed;
            try {
              parsed = JSON.parse(data.join('\n'));
            } catch (_) {
              continue;
            }
            onEvent(name, parsed);
          }
        }
      }
    } finally {
      clearTimeout(stall);
    }
  }

  function handle(name, data) {
    switch (name) {
      case 'ready':
        setConn('live', 'live');
        if (state.lastEvent === null) {
          state.lastEvent = 0;
          state.lastMsg = 0;
        }
        break;
      case 'activity':
        addActivity(data);
        if (['message', 'task_created', 'task_cancelled', 'task_submitted', 'task_reviewed', 'file_added', 'file_deleted'].includes(data.kind)) {
          refreshRoomsSoon();
        }
        break;
      case 'chat':
        addMessage(data);
        break;
      case 'board':
        state.tasks = data.tasks || [];
        state.closed = data.closed || [];
        renderBoard();
        break;
      case 'files':
        state.files = data.files || [];
        renderFiles();
        break;
      case 'error':
        setConn('error', (data.error && data.error.message) || 'stream error');
        break;
      default:
        break;
    }
  }

  // ---------- wiring ----------

  document.addEventListener('DOMContentLoaded', () => {
    $('login-form').addEventListener('submit', (ev) => {
      ev.preventDefault();
      const t = $('token').value.trim();
      $('token').value = '';
      if (!t) return showLogin('Paste a token first.');
      start(t);
    });
    $('forget').addEventListener('click', () => {
      sessionStorage.removeItem(TOKEN_KEY);
      state.token = null;
      showLogin('');
    });
    $('modal-close').addEventListener('click', closeModal);
    $('modal').addEventListener('click', (ev) => {
      if (ev.target === $('modal')) closeModal();
    });
    document.addEventListener('keydown', (ev) => {
      if (ev.key === 'Escape') closeModal();
    });
    // Relative times and presence age without asking the server.
    setInterval(() => {
      if (!$('app').hidden) {
        renderAgents();
      }
    }, 20000);
    // Presence is stored in batches server-side; re-read it now and then.
    setInterval(() => {
      if (!$('app').hidden && state.room) loadAgents();
    }, 60000);
    const saved = sessionStorage.getItem(TOKEN_KEY);
    if (saved) start(saved);
    else showLogin('');
  });
})();
