// chatroom dashboard: a read-only live view of a room.
//
// Rules this file keeps:
// - Agent text reaches the page only through the shared markdown.js (a
//   sanitised fragment) or as text (textContent, text nodes); this file
//   never parses a string as HTML.
// - The token lives in sessionStorage only, and goes only to this origin's
//   /v1 API in the Authorization header.
// - Nothing here writes to the server: the dashboard only reads.
// - Live updates come from /v1/stream read with fetch (EventSource cannot send
//   a header), reconnecting with back-off after a drop. While the stream is
//   down the page says so and greys the last data; a refused token says so.
// - The room (and an open task) live in the URL hash, both ways.
// - What the viewer's token may do with a task, the server says (`can`).
//
// An ES module (no build step): the DOM, time, API and Markdown helpers are
// the shared ones every page of the server imports from /assets/.
import { $, el } from '/assets/dom.js';
import { ago, clock, countdown, leaseShort, parseTs } from '/assets/time.js';
import { ApiError, api as call } from '/assets/api.js';
import { plain, render } from '/assets/markdown.js';

const TOKEN_KEY = 'chatroom.token';
const CONSOLE_KEY = 'chatroom-admin-token';
const SEEN_KEY = 'chatroom.seen';
const SIDE_KEY = 'chatroom.side';
const MAX_CHAT = 500;
const MAX_ACTIVITY = 300;
const LONG_MESSAGE = 1500; // characters; longer ones are folded
const TAIL = 300;
const STALL_MS = 40000; // three missed keep-alives
const MAX_BACKOFF = 10000;
const ROOMS_POLL_MS = 30000;
const WIDE = window.matchMedia('(min-width: 1280px)');
const COLUMNS = [
  ['pending', 'Pending'],
  ['in_progress', 'In progress'],
  ['blocked', 'Blocked'],
  ['in_review', 'In review'],
  ['closed', 'Done'],
];
const STATUS = {
  pending: 'pending',
  in_progress: 'in progress',
  blocked: 'blocked',
  in_review: 'in review',
  done: 'done',
  cancelled: 'cancelled',
};

const state = {
  token: null,
  me: null,
  rooms: [],
  room: null,
  gen: 0,
  abort: null,
  // The latest ids when the stream said `ready`: what follows up to them
  // is history being replayed, not news.
  readyMsg: Infinity,
  readyEvent: Infinity,
  online: false,
  refused: false,
  offlineSince: null,
  retryAt: null,
  wake: null,
  lastEvent: null,
  lastMsg: null,
  tasks: [],
  closed: [],
  files: [],
  agents: [],
  messages: new Map(),
  activity: new Set(),
  unseenChat: 0,
  unread: {},
  seen: {},
  openTask: null,
  timers: {},
};

// ---------- API ----------

/** A GET of this server's API with the dashboard's token. */
function api(path, params) {
  return call(state.token, path, { params });
}

/** What a failed read means to the reader, in one sentence. */
function failureText(e) {
  if (e instanceof ApiError && e.status === 0) return 'The server is unreachable.';
  if (e instanceof ApiError && e.status === 401) return 'The server refused the token.';
  if (e instanceof ApiError) return e.message;
  return String(e && e.message ? e.message : e);
}

function handleApiFailure(e) {
  if (e instanceof ApiError && e.status === 401) setRefused();
}

// ---------- formatting ----------

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

const plural = (n, one, many) => n + ' ' + (n === 1 ? one : many);

function snippet(text, n) {
  const flat = String(text || '').replace(/\s+/g, ' ').trim();
  return flat.length > n ? flat.slice(0, n - 1) + '…' : flat;
}

function taskHref(n) {
  return '#room=' + encodeURIComponent(state.room || '') + '&task=' + n;
}

/** Agent text as sanitised Markdown in a `.md` box. */
function md(text, inline) {
  const frag = render(text, { taskHref, me: state.me && state.me.agent, inline: !!inline });
  return el(inline ? 'span' : 'div', { class: inline ? 'md inline' : 'md' }, frag);
}

/** Agent text flattened for a one-line snippet. */
function flat(text, n) {
  return snippet(plain(text || ''), n);
}

// ---------- connection state and banner ----------

function setConn(kind, text) {
  $('conn').dataset.state = kind;
  $('conn-text').textContent = text;
}

function banner(kind, title, text, action, onAction) {
  const b = $('banner');
  if (!kind) {
    b.hidden = true;
    return;
  }
  b.className = 'cr-banner' + (kind === 'bad' ? ' bad' : '');
  b.dataset.kind = kind;
  $('banner-title').textContent = title;
  $('banner-text').textContent = text;
  const btn = $('banner-action');
  btn.hidden = !action;
  btn.textContent = action || '';
  btn.onclick = onAction || null;
  b.hidden = false;
}

function setOnline() {
  state.online = true;
  state.offlineSince = null;
  $('app').classList.remove('stale');
  if (!state.refused) banner(null);
  setConn('live', 'live');
}

function setOffline() {
  if (state.refused) return;
  state.online = false;
  if (state.offlineSince === null) state.offlineSince = Date.now();
  $('app').classList.add('stale');
  renderOffline();
}

function renderOffline() {
  if (state.online || state.refused || $('app').hidden) return;
  const left = state.retryAt ? Math.max(0, Math.ceil((state.retryAt - Date.now()) / 1000)) : 0;
  const retry = state.retryAt && left > 0 ? 'retrying in ' + left + ' s' : 'reconnecting…';
  banner(
    'offline',
    'Offline.',
    'The live connection to the server is down since ' + clock(state.offlineSince) + '; the greyed data is the last seen, and opening a task or a file needs the server (' + retry + ').',
    'Retry now',
    () => state.wake && state.wake(),
  );
  setConn('retry', 'offline');
}

/** The server no longer takes the token: stop, say so, keep the data. */
function setRefused() {
  if (state.refused) return;
  state.refused = true;
  state.online = false;
  state.gen++;
  if (state.abort) state.abort.abort();
  $('app').classList.add('stale');
  setConn('refused', 'token refused');
  banner('bad', 'Token refused.', 'The server no longer accepts this token (revoked, or minted for another server): nothing here updates any more, and the greyed data is the last seen.', 'Use another token', () => {
    forgetToken();
    showLogin('');
  });
}

let toastTimer = null;
function toast(text) {
  const t = $('toast');
  t.textContent = text;
  t.hidden = false;
  clearTimeout(toastTimer);
  toastTimer = setTimeout(() => (t.hidden = true), 6000);
}

// ---------- login ----------

/** Forgets the token in this tab, the console's too when it was that one
 * (the dashboard opens with the console's token; signing out is both). */
function forgetToken() {
  if (state.token && sessionStorage.getItem(CONSOLE_KEY) === state.token) sessionStorage.removeItem(CONSOLE_KEY);
  sessionStorage.removeItem(TOKEN_KEY);
  state.token = null;
}

function showLogin(message) {
  state.gen++;
  if (state.abort) state.abort.abort();
  state.refused = false;
  state.online = false;
  banner(null);
  closeModal();
  $('app').hidden = true;
  $('app').classList.remove('stale');
  $('login').hidden = false;
  $('forget').hidden = true;
  $('side-toggle').hidden = true;
  $('to-console').hidden = true;
  $('side-console').hidden = true;
  $('whoami').replaceChildren();
  $('side-who').replaceChildren();
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
  state.refused = false;
  let rooms;
  try {
    rooms = await api('/v1/rooms');
  } catch (e) {
    // Only a refusal forgets the token; an unreachable server has not
    // refused it.
    if (e instanceof ApiError && e.status === 401) {
      forgetToken();
      return showLogin('That token was refused (mistyped, revoked, or for another server).');
    }
    state.token = null;
    if (e instanceof ApiError && e.status === 0) return showLogin('Cannot reach the server.');
    return showLogin(e.message);
  }
  sessionStorage.setItem(TOKEN_KEY, token);
  try {
    state.seen = JSON.parse(sessionStorage.getItem(SEEN_KEY) || '{}') || {};
  } catch (_) {
    state.seen = {};
  }
  state.me = rooms;
  state.rooms = rooms.rooms || [];
  $('login').hidden = true;
  $('app').hidden = false;
  $('forget').hidden = false;
  $('side-toggle').hidden = false;
  applySide();
  const flags = [];
  if (rooms.readonly) flags.push('read-only');
  if (rooms.lead) flags.push('lead');
  if (rooms.admin) flags.push('admin');
  if (rooms.all_rooms) flags.push('all rooms');
  const who = () => [el('span', { class: 'agent-name' }, rooms.agent), flags.length ? el('span', { class: 'flags' }, flags.join(' · ')) : null];
  $('whoami').replaceChildren(...who());
  $('side-who').replaceChildren(...who());
  offerConsole(rooms);
  const { room: wanted, task } = hashParams();
  const names = state.rooms.map((r) => r.name);
  const room = names.includes(wanted) ? wanted : names.includes(rooms.default_room) ? rooms.default_room : names[0];
  if (!room) {
    renderRooms();
    setConn('off', 'no rooms');
    return;
  }
  openRoom(room);
  countUnread();
  if (task && room === wanted) openTask(task);
}

/** A whole-server admin gets a link to the console, when it is on. */
async function offerConsole(me) {
  if (!(me.admin && me.all_rooms)) return;
  try {
    // A small asset behind the same gate as the console page.
    const r = await fetch('/admin/app.css', { cache: 'no-store' });
    await r.text();
    $('to-console').hidden = !r.ok;
    $('side-console').hidden = !r.ok;
  } catch (_) {
    /* no console link then */
  }
}

// ---------- the hash: #room=NAME[&task=N] ----------

function hashParams() {
  const p = new URLSearchParams(location.hash.replace(/^#/, ''));
  const task = Number(p.get('task'));
  return { room: p.get('room') || '', task: Number.isInteger(task) && task > 0 ? task : null };
}

function writeHash(task) {
  const h = '#room=' + encodeURIComponent(state.room) + (task ? '&task=' + task : '');
  if (location.hash !== h) history.replaceState(null, '', h);
}

function onHashChange() {
  if ($('app').hidden) return;
  const { room, task } = hashParams();
  if (room && room !== state.room) {
    if (state.rooms.some((r) => r.name === room)) openRoom(room);
    else {
      toast('No room “' + room + '” for this token.');
      writeHash(null);
    }
  }
  if (task && task !== state.openTask) openTask(task);
  if (!task && state.openTask) closeModal();
}

// ---------- sidebar ----------

function applySide() {
  const app = $('app');
  const collapsed = sessionStorage.getItem(SIDE_KEY) === 'collapsed';
  app.classList.toggle('side-collapsed', WIDE.matches && collapsed);
  if (WIDE.matches) app.classList.remove('side-open');
  const open = WIDE.matches ? !collapsed : app.classList.contains('side-open');
  $('side-toggle').setAttribute('aria-expanded', String(open));
  if (state.room) renderRooms();
}

/** Whether the sidebar (and so the other rooms' counts) is on screen. */
function sideShown() {
  const app = $('app');
  return WIDE.matches ? !app.classList.contains('side-collapsed') : app.classList.contains('side-open');
}

function toggleSide() {
  const app = $('app');
  if (WIDE.matches) {
    const collapsed = !app.classList.contains('side-collapsed');
    sessionStorage.setItem(SIDE_KEY, collapsed ? 'collapsed' : 'open');
  } else {
    app.classList.toggle('side-open');
  }
  applySide();
}

function closeDrawer() {
  if (!WIDE.matches) {
    $('app').classList.remove('side-open');
    applySide();
  }
}

// ---------- tabs (phone and tablet) ----------

function showTab(name) {
  $('app').dataset.tab = name;
  for (const t of document.querySelectorAll('.tab')) t.setAttribute('aria-selected', String(t.dataset.tab === name));
  if (name === 'chat') {
    state.unseenChat = 0;
    renderChatBadge();
    const list = $('chat');
    list.scrollTop = list.scrollHeight;
  }
}

function chatVisible() {
  return WIDE.matches || $('app').dataset.tab === 'chat';
}

function renderChatBadge() {
  const b = $('tab-chat-n');
  b.hidden = !state.unseenChat;
  b.textContent = String(state.unseenChat);
}

// ---------- rooms ----------

function renderRooms() {
  const list = $('rooms');
  list.replaceChildren(
    ...state.rooms.map((r) => {
      const u = r.name === state.room ? null : state.unread[r.name];
      const badges = [];
      if (u && u.mentions) badges.push(el('span', { class: 'badge bad tiny', title: plural(u.mentions, 'mention of you', 'mentions of you') }, '@' + u.mentions));
      if (u && u.n) badges.push(el('span', { class: 'badge you tiny', title: plural(u.n, 'unread message', 'unread messages') }, u.n >= 100 ? '99+' : String(u.n)));
      return el(
        'li',
        {
          class: r.name === state.room ? 'room current' : 'room',
          tabindex: '0',
          'data-room': r.name,
          'aria-current': r.name === state.room ? 'true' : null,
          onclick: () => {
            closeDrawer();
            if (r.name !== state.room) openRoom(r.name);
          },
        },
        el('div', { class: 'room-name' }, '#' + r.name),
        badges.length ? el('span', { class: 'unread' }, ...badges) : null,
        el(
          'div',
          { class: 'room-counts' },
          el('span', { title: 'open tasks' }, el('b', {}, String(r.open_tasks)), ' open'),
          el('span', { title: 'messages' }, el('b', {}, String(r.messages)), r.messages === 1 ? ' message' : ' messages'),
          el('span', { title: 'files' }, el('b', {}, String(r.files)), r.files === 1 ? ' file' : ' files'),
        ),
      );
    }),
  );
  for (const li of list.children) {
    li.addEventListener('keydown', (ev) => {
      if (ev.key === 'Enter') li.click();
    });
  }
  if (state.rooms.length === 0) list.append(el('li', { class: 'empty' }, 'No rooms for this token.'));
  const cur = state.rooms.find((r) => r.name === state.room);
  $('room-title').textContent = cur ? '#' + cur.name : '';
  $('room-desc').textContent = cur ? flat(cur.description, 140) : '';
  document.title = cur ? '#' + cur.name + ' · chatroom' : 'chatroom';
  let unread = 0;
  let mentions = 0;
  for (const [name, u] of Object.entries(state.unread)) {
    if (name === state.room) continue;
    unread += u.n;
    mentions += u.mentions;
  }
  const sb = $('side-badge');
  sb.hidden = !(mentions || unread) || sideShown();
  sb.textContent = mentions ? '@' + mentions : String(unread);
  renderInfo(cur);
}

function renderInfo(room) {
  const box = $('info');
  if (!room) return box.replaceChildren();
  const rows = [];
  if (room.description) rows.push(md(room.description));
  if (room.repo_url) {
    const safe = /^https?:\/\//i.test(room.repo_url);
    rows.push(
      el(
        'div',
        { class: 'kv' },
        el('span', { class: 'k' }, 'repo'),
        safe ? el('a', { class: 'v', href: room.repo_url, target: '_blank', rel: 'noopener noreferrer' }, room.repo_url) : el('span', { class: 'v' }, room.repo_url),
      ),
    );
  }
  rows.push(el('div', { class: 'kv' }, el('span', { class: 'k' }, 'retention'), el('span', { class: 'v' }, room.retention_days ? room.retention_days + ' days' : 'keep everything')));
  if (room.onboarding_notes) {
    rows.push(el('details', {}, el('summary', {}, 'Onboarding notes'), md(room.onboarding_notes)));
  }
  box.replaceChildren(...rows);
}

function refreshRoomsSoon() {
  clearTimeout(state.timers.rooms);
  state.timers.rooms = setTimeout(refreshRooms, 1500);
}

async function refreshRooms() {
  try {
    const r = await api('/v1/rooms');
    state.me = r;
    state.rooms = r.rooms || [];
    renderRooms();
    await countUnread();
  } catch (e) {
    handleApiFailure(e);
  }
}

function saveSeen() {
  sessionStorage.setItem(SEEN_KEY, JSON.stringify(state.seen));
}

/** Unread messages and mentions of the reader in every other room, from
 * the room's message events after the last one seen there. */
async function countUnread() {
  const me = state.me ? state.me.agent.toLowerCase() : '';
  let changed = false;
  for (const r of state.rooms) {
    if (r.name === state.room) continue;
    try {
      if (state.seen[r.name] === undefined) {
        const first = await api('/v1/events', { room: r.name, kind: 'message', limit: '1', since_id: '0' });
        state.seen[r.name] = first.latest_event_id || 0;
        changed = true;
        continue;
      }
      const page = await api('/v1/events', { room: r.name, kind: 'message', since_id: String(state.seen[r.name]), limit: '100' });
      const others = (page.events || []).filter((e) => e.actor !== (state.me && state.me.agent));
      const mentions = others.filter((e) => ((e.data && e.data.mentions) || []).some((m) => String(m).toLowerCase() === me)).length;
      state.unread[r.name] = { n: others.length, mentions };
    } catch (e) {
      handleApiFailure(e);
      return;
    }
  }
  if (changed) saveSeen();
  renderRooms();
}

function openRoom(name) {
  if (state.room && state.lastEvent !== null) {
    state.seen[state.room] = Math.max(state.seen[state.room] || 0, state.lastEvent);
  }
  state.gen++;
  if (state.abort) state.abort.abort();
  state.room = name;
  state.readyMsg = Infinity;
  state.readyEvent = Infinity;
  state.lastEvent = null;
  state.lastMsg = null;
  state.tasks = [];
  state.closed = [];
  state.files = [];
  state.agents = [];
  state.messages = new Map();
  state.activity = new Set();
  state.unseenChat = 0;
  state.chatStick = true;
  delete state.unread[name];
  saveSeen();
  closeModal();
  $('chat').replaceChildren();
  $('activity').replaceChildren();
  $('new-pill').hidden = true;
  renderChatBadge();
  renderBoard();
  renderFiles();
  renderAgents();
  renderRooms();
  writeHash(null);
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
  $('agents-count').textContent = agents.length ? active + ' of ' + agents.length + ' active' : '';
  $('agents').replaceChildren(
    ...agents.map((a) => {
      const tags = [];
      if (a.is_you) tags.push('you');
      if (a.lead) tags.push('lead');
      if (a.admin) tags.push('admin');
      if (a.readonly) tags.push('read-only');
      const skills = a.skills && a.skills.length ? a.skills.join(', ') : '';
      return el(
        'li',
        { class: 'agent ' + presence(a.last_seen), title: a.last_seen ? 'last seen ' + new Date(parseTs(a.last_seen)).toLocaleString() : 'never seen' },
        el('span', { class: 'dot' }),
        el('span', { class: 'agent-name' }, a.agent),
        el('span', { class: 'ago' }, ago(a.last_seen)),
        tags.length || skills ? el('span', { class: 'tags' }, tags.join(' · '), skills ? el('span', { class: 'skills' }, (tags.length ? ' · ' : '') + skills) : null) : null,
      );
    }),
  );
  if (!agents.length) $('agents').append(el('li', { class: 'empty' }, 'No agents yet.'));
}

// ---------- board ----------

function renderBoard() {
  const groups = { pending: [], in_progress: [], blocked: [], in_review: [], closed: [] };
  for (const t of state.tasks) (groups[t.status] || groups.pending).push(t);
  const done = state.closed.filter((t) => t.status !== 'cancelled');
  const cancelled = state.closed.filter((t) => t.status === 'cancelled');
  groups.closed = done;
  const rank = { urgent: 0, high: 1, normal: 2, low: 3 };
  for (const k of ['pending', 'in_progress', 'blocked', 'in_review']) {
    groups[k].sort((a, b) => (rank[a.priority] ?? 2) - (rank[b.priority] ?? 2) || a.id - b.id);
  }
  $('board-count').textContent = state.tasks.length + ' open';
  $('tab-board-n').textContent = String(state.tasks.length);
  const wasOpen = $('board').querySelector('.cancelled-box[open]') !== null;
  $('board').replaceChildren(
    ...COLUMNS.map(([key, label]) => {
      const cards = el('div', { class: 'cards' }, ...groups[key].map(card));
      if (key === 'closed' && cancelled.length) {
        cards.append(el('details', { class: 'cancelled-box', open: wasOpen ? '' : null }, el('summary', {}, 'Cancelled (' + cancelled.length + ')'), ...cancelled.map(card)));
      }
      return el(
        'div',
        { class: 'col col-' + key, 'data-col': key },
        el('div', { class: 'col-head', title: label }, el('span', { class: 'label' }, label), el('span', { class: 'n' }, String(groups[key].length))),
        cards,
      );
    }),
  );
}

/** Who has the task: a holder works on it; a pending task with an
 * assignee is only reserved for them until they claim it. */
function holding(t) {
  if (!t.assignee) return null;
  if (t.status === 'pending') return { kind: 'reserved', text: 'reserved for ' + t.assignee };
  if (t.status === 'done' || t.status === 'cancelled') return { kind: 'was', text: 'by ' + t.assignee };
  return { kind: 'held', text: 'held by ' + t.assignee };
}

function card(t) {
  const meta = [];
  const h = holding(t);
  if (h && h.kind === 'held') meta.push(el('span', { class: 'holder', title: 'the agent working on it' }, '● ' + t.assignee));
  else if (h && h.kind === 'reserved') meta.push(el('span', { class: 'reserved', title: 'assigned, not claimed yet' }, 'reserved for ' + t.assignee));
  else if (h) meta.push(el('span', { class: 'holder' }, (t.status === 'done' ? 'done by ' : 'was held by ') + t.assignee));
  if (t.required_skill) meta.push(el('span', { class: 'chip skill', title: 'required skill' }, t.required_skill));
  if (t.needs_review && t.status !== 'done') meta.push(el('span', { class: 'chip review', title: 'a lead reviews the result' }, 'review'));
  if (t.blocked_by_unfinished && t.blocked_by_unfinished.length) {
    meta.push(el('span', { class: 'chip deps', title: 'waits until these are done' }, 'waits on ' + t.blocked_by_unfinished.map((d) => '#' + d).join(' ')));
  }
  if (t.lease_expires_ts && (t.status === 'in_progress' || t.status === 'blocked')) {
    const late = parseTs(t.lease_expires_ts) < Date.now();
    meta.push(el('span', { class: 'chip lease' + (late ? ' late' : ''), 'data-lease': t.lease_expires_ts, title: 'lease ends ' + new Date(parseTs(t.lease_expires_ts)).toLocaleString() }, leaseShort(t.lease_expires_ts)));
  }
  const files = state.files.filter((f) => f.task_id === t.id).length;
  if (files) meta.push(el('span', { class: 'chip file', title: 'files attached' }, plural(files, 'file', 'files')));
  const node = el(
    'article',
    {
      class: 'card prio-' + (t.priority || 'normal') + ' st-' + t.status,
      tabindex: '0',
      'data-task': String(t.id),
      onclick: (ev) => {
        if (ev.target.closest('a')) return;
        openTask(t.id);
      },
    },
    el('div', { class: 'card-top' }, el('span', { class: 'id' }, '#' + t.id), t.priority && t.priority !== 'normal' ? el('span', { class: 'prio' }, t.priority) : null),
    el('div', { class: 'title' }, md(t.title, true)),
    meta.length ? el('div', { class: 'meta' }, ...meta) : null,
    el('div', { class: 'by' }, 'by ' + t.created_by + ' · ' + ago(t.updated_ts)),
  );
  node.addEventListener('keydown', (ev) => {
    if (ev.key === 'Enter') openTask(t.id);
  });
  return node;
}

/** Opens a task through the hash, so Back and a shared link both work. */
function openTask(id) {
  writeHash(id);
  showTask(id);
}

// ---------- task sheet ----------

const HISTORY = {
  task_created: () => 'created it',
  task_claimed: (d) => 'claimed it' + (d.lease_seconds ? ' with a ' + Math.round(d.lease_seconds / 60) + ' min lease' : ''),
  task_updated: (d) => {
    const parts = [];
    if (d.from && d.status && d.from !== d.status) parts.push('moved it ' + STATUS[d.from] + ' → ' + STATUS[d.status]);
    if (d.body_changed) parts.push('edited the description');
    return parts.join(', ') || 'updated it';
  },
  task_released: (d) => 'released it' + (d.reason ? ': ' + d.reason : ''),
  note_added: () => 'added a note',
  task_submitted: (d) => 'submitted a result' + (d.status === 'in_review' ? ' for review' : ''),
  task_reviewed: (d) => (d.approve ? 'approved it' : 'rejected it, back to ' + (STATUS[d.status] || d.status)),
  task_cancelled: (d) => 'cancelled it' + (d.reason ? ': ' + d.reason : ''),
  task_lease_expired: (d) => 'lease lapsed' + (d.previous_assignee ? '; ' + d.previous_assignee + ' no longer holds it' : ''),
  file_added: (d) => 'attached ' + (d.name || 'a file'),
  file_deleted: (d) => 'deleted ' + (d.name || 'a file'),
};

/** Why the task is where it is, in one sentence (null when obvious). */
function why(t, events, notes) {
  const deps = t.blocked_by_unfinished || [];
  const depText = deps.length ? 'Waits on ' + deps.map((d) => '#' + d).join(', ') + ', not done yet.' : '';
  switch (t.status) {
    case 'pending':
      if (t.assignee) return 'Reserved for ' + t.assignee + ': assigned, not claimed yet.' + (depText ? ' ' + depText : '');
      return depText || 'Waiting for an agent to claim it.';
    case 'in_progress':
      return 'Held by ' + t.assignee + (t.lease_expires_ts ? '; the lease ends at ' + clock(t.lease_expires_ts) + ' unless they keep working on it.' : '.');
    case 'blocked': {
      const when = [...events].reverse().find((e) => e.kind === 'task_updated' && e.data && e.data.status === 'blocked');
      const note = when ? notes.find((n) => parseTs(n.ts) >= parseTs(when.ts) && n.author === when.actor) : null;
      const who = when ? when.actor : t.assignee || 'its holder';
      return 'Blocked by ' + who + (note ? ': ' + flat(note.body, 300) : ' (no reason given).') + (depText ? ' ' + depText : '');
    }
    case 'in_review':
      return 'Submitted by ' + (t.assignee || 'its holder') + '; waiting for a lead to approve or reject it.';
    case 'cancelled': {
      const c = events.find((e) => e.kind === 'task_cancelled');
      return 'Cancelled' + (c ? ' by ' + c.actor + (c.data && c.data.reason ? ': ' + c.data.reason : '') : '') + '.';
    }
    default:
      return null;
  }
}

async function showTask(id) {
  id = Number(id);
  const room = state.room;
  state.openTask = id;
  let r;
  let events = [];
  let failure = null;
  try {
    const [task, evs] = await Promise.all([api('/v1/tasks/' + encodeURIComponent(id), { room }), api('/v1/events', { room, task_id: String(id), since_id: '0', limit: '200' })]);
    r = task;
    events = evs.events || [];
  } catch (e) {
    handleApiFailure(e);
    failure = e;
  }
  if (state.openTask !== id || room !== state.room) return;
  let t = r ? r.task : [...state.tasks, ...state.closed].find((x) => x.id === id);
  if (!t) {
    renderSheet([
      el('div', { class: 'modal-id' }, '#' + id),
      el('h3', { id: 'modal-title' }, 'Task #' + id + ' is not available'),
      el('p', { class: 'warn' }, failureText(failure || new Error('no such task in this room'))),
    ]);
    return;
  }
  const notes = t.notes || [];
  const kv = (k, v) => el('div', { class: 'kv' }, el('span', { class: 'k' }, k), el('span', { class: 'v' }, v));
  const h = holding(t);
  const lease = t.lease_expires_ts && (t.status === 'in_progress' || t.status === 'blocked') ? el('span', { class: 'lease-left', 'data-lease': t.lease_expires_ts }, countdown(t.lease_expires_ts) + ' (ends ' + clock(t.lease_expires_ts) + ')') : null;
  const depLinks = (ids) => ids.flatMap((d, i) => [i ? ', ' : '', el('a', { class: 'task-link', href: taskHref(d) }, '#' + d)]);
  const body = [
    el('div', { class: 'modal-id' }, '#' + t.id + ' · ' + (STATUS[t.status] || t.status)),
    el('h3', { id: 'modal-title' }, md(t.title, true)),
  ];
  if (failure) body.push(el('p', { class: 'warn' }, 'Showing the last data seen: ' + failureText(failure) + ' The notes and history need the server.'));
  const reason = why(t, events, notes);
  if (reason) body.push(el('p', { class: 'why box' }, reason));
  body.push(
    el(
      'div',
      { class: 'kvs' },
      kv('status', STATUS[t.status] || t.status),
      h && h.kind === 'reserved' ? kv('reserved for', t.assignee) : h && h.kind === 'was' ? kv(t.status === 'done' ? 'done by' : 'was held by', t.assignee) : kv('held by', h ? t.assignee : 'nobody'),
      lease ? kv('lease', lease) : null,
      kv('priority', t.priority),
      kv('version', String(t.version)),
      kv('created', t.created_by + ', ' + clock(t.created_ts)),
      kv('updated', clock(t.updated_ts)),
      t.depends_on && t.depends_on.length ? kv('depends on', depLinks(t.depends_on)) : null,
      t.required_skill ? kv('skill', t.required_skill) : null,
      t.needs_review ? kv('review', 'a lead approves the result') : null,
      // What this token may do with it, as the server decides (`can`).
      kv('your token may', t.can && t.can.length ? t.can.join(', ') : 'only look'),
    ),
  );
  if (t.body) body.push(el('h4', {}, 'Description'), md(t.body));
  if (t.result) body.push(el('h4', {}, 'Result'), md(t.result));
  const files = state.files.filter((f) => f.task_id === t.id);
  if (files.length) {
    body.push(
      el('h4', {}, 'Files (' + files.length + ')'),
      el('ul', { class: 'task-files' }, ...files.map((f) => el('li', {}, el('button', { class: 'link', type: 'button', onclick: () => download(f) }, f.name), el('span', { class: 'fmeta' }, size(f.size) + ' · ' + f.author + ' · ' + ago(f.ts))))),
    );
  }
  if (events.length) {
    body.push(
      el('h4', {}, 'History'),
      el(
        'ol',
        { class: 'history' },
        ...events.map((e) => {
          const say = HISTORY[e.kind] || (() => e.kind.replace(/_/g, ' '));
          return el('li', { class: 'k-' + e.kind }, el('time', { title: new Date(parseTs(e.ts)).toLocaleString() }, clock(e.ts)), el('span', { class: 'what' }, el('span', { class: 'actor' }, e.actor), ' ', say(e.data || {})));
        }),
      ),
    );
  }
  if (r) {
    body.push(el('h4', {}, notes.length ? 'Notes (' + notes.length + ')' : 'Notes'));
    if (notes.length) body.push(el('ol', { class: 'notes-list' }, ...notes.map((n) => el('li', {}, el('div', { class: 'who' }, n.author + ' · ' + clock(n.ts)), md(n.body)))));
    else body.push(el('p', { class: 'empty' }, 'No notes.'));
  }
  body.push(el('p', { class: 'sheet-foot' }, 'Written by agents: data, not instructions.'));
  renderSheet(body);
}

function renderSheet(children) {
  $('modal-body').replaceChildren(...children);
  const was = !$('modal').hidden;
  $('modal').hidden = false;
  if (!was) $('modal-close').focus();
  clearInterval(state.timers.lease);
  state.timers.lease = setInterval(() => {
    for (const n of $('modal-body').querySelectorAll('[data-lease]')) {
      n.textContent = countdown(n.dataset.lease) + ' (ends ' + clock(n.dataset.lease) + ')';
    }
  }, 1000);
}

function closeModal() {
  $('modal').hidden = true;
  clearInterval(state.timers.lease);
  const had = state.openTask;
  state.openTask = null;
  if (had && state.room && !$('app').hidden) writeHash(null);
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
        el('span', { class: 'fmeta' }, size(f.size) + ' · ' + f.author + ' · ' + ago(f.ts), f.task_id ? [' · ', el('a', { class: 'task-link', href: taskHref(f.task_id) }, '#' + f.task_id)] : null),
      ),
    ),
  );
  if (!state.files.length) $('files').append(el('li', { class: 'empty' }, 'No files.'));
}

/** Fetches a file with the token and hands it to the browser as a download. */
async function download(f) {
  try {
    let res;
    try {
      res = await fetch('/v1/files/' + encodeURIComponent(f.file_id) + '?room=' + encodeURIComponent(state.room), {
        headers: { Authorization: 'Bearer ' + state.token },
      });
    } catch (_) {
      throw new ApiError(0, 'unreachable', 'the server is unreachable');
    }
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
    toast('Cannot download ' + f.name + ': ' + failureText(e));
  }
}

// ---------- chat ----------

function atBottom(list) {
  return list.scrollHeight - list.scrollTop - list.clientHeight < 40;
}

function addMessage(m) {
  if (state.messages.has(m.id)) return;
  state.messages.set(m.id, m);
  state.lastMsg = Math.max(state.lastMsg || 0, m.id);
  const list = $('chat');
  const stick = atBottom(list);
  const mine = state.me && m.author === state.me.agent;
  const mentionsMe = m.mentions_you;
  const parts = [];
  if (m.reply_to) {
    const parent = state.messages.get(m.reply_to);
    parts.push(
      el(
        'button',
        { class: 'quote', type: 'button', 'data-parent': String(m.reply_to), title: 'show the message this replies to', onclick: () => jumpTo(m.reply_to) },
        '↪ ',
        parent ? el('span', { class: 'qa' }, parent.author) : 'an earlier message',
        parent ? ' ' + flat(parent.body, 90) : '',
      ),
    );
  }
  const text = m.body || '';
  const body = el('div', { class: 'body' }, md(text));
  parts.push(el('div', { class: 'mhead' }, el('span', { class: 'author' }, m.author), el('time', { title: new Date(parseTs(m.ts)).toLocaleString() }, clock(m.ts))), body);
  // A wall of text is folded, so one message cannot bury the chat.
  if (text.length > LONG_MESSAGE || text.split('\n').length > 24) {
    body.classList.add('folded');
    const more = el('button', { class: 'more small ghost', type: 'button' }, 'Show all');
    more.addEventListener('click', () => {
      const folded = body.classList.toggle('folded');
      more.textContent = folded ? 'Show all' : 'Show less';
    });
    parts.push(more);
  }
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
  // A message others reply to says how many (hover shows the thread).
  if (m.reply_to) {
    const p = list.querySelector('li[data-id="' + CSS.escape(String(m.reply_to)) + '"] .mhead');
    if (p) {
      let c = p.querySelector('.replies');
      if (!c) {
        c = el('span', { class: 'replies' }, '');
        p.insertBefore(c, p.querySelector('time'));
      }
      c.dataset.n = String(Number(c.dataset.n || 0) + 1);
      c.textContent = plural(Number(c.dataset.n), 'reply', 'replies');
    }
  }
  $('chat-count').textContent = state.messages.size ? String(state.messages.size) : '';
  if (m.id <= state.readyMsg) {
    if (stick) list.scrollTop = list.scrollHeight;
    return;
  }
  if (stick && chatVisible()) list.scrollTop = list.scrollHeight;
  else if (!mine) {
    state.unseenChat++;
    if (!chatVisible()) renderChatBadge();
    const pill = $('new-pill');
    pill.textContent = plural(state.unseenChat, 'new message', 'new messages') + ' ↓';
    pill.hidden = !chatVisible() || stick;
  }
}

function jumpTo(id) {
  const n = $('chat').querySelector('li[data-id="' + CSS.escape(String(id)) + '"]');
  if (!n) return toast('That message is older than what the dashboard keeps.');
  n.scrollIntoView({ block: 'center', behavior: 'smooth' });
  n.classList.add('flash');
  setTimeout(() => n.classList.remove('flash'), 1500);
}

function onChatScroll() {
  state.chatStick = atBottom($('chat'));
  if (state.chatStick) {
    state.unseenChat = 0;
    $('new-pill').hidden = true;
    renderChatBadge();
  }
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
  const d = e.data || {};
  let what = '';
  if (e.kind.startsWith('file_')) what = (d.name || 'a file') + (e.task_id ? ' on #' + e.task_id : '');
  else if (e.task_id) what = '#' + e.task_id + ' ' + flat(d.title || '', 120);
  else if (e.kind === 'message') what = flat(d.body, 120);
  else if (e.kind === 'retention_set') what = d.days ? d.days + ' days' : 'keep everything';
  else if (e.kind === 'room_info_updated') what = (d.fields || []).join(', ');
  let extra = '';
  if (e.kind === 'task_reviewed') extra = d.approve ? '✓ approved' : '✗ rejected';
  else if (d.status && e.task_id && !['note_added', 'file_added', 'file_deleted', 'task_created'].includes(e.kind)) extra = '→ ' + (STATUS[d.status] || d.status);
  const list = $('activity');
  const item = el(
    'li',
    { class: 'act k-' + e.kind + (e.task_id ? ' has-task' : '') + (e.mentions_you ? ' mentions-me' : ''), 'data-id': String(e.id) },
    el('time', { title: new Date(parseTs(e.ts)).toLocaleString() }, clock(e.ts)),
    el('span', { class: 'actor' }, e.actor),
    el('span', { class: 'verb' }, VERBS[e.kind] || e.kind),
    el('span', { class: 'what' }, what),
    extra ? el('span', { class: 'extra' }, extra) : null,
  );
  if (e.task_id) item.addEventListener('click', () => openTask(e.task_id));
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
  if (state.openTask && e.task_id === state.openTask && e.id > state.readyEvent) showTask(e.task_id);
}

// ---------- the stream ----------

/** Waits `ms`, or less when the reader asks to retry now. */
function pause(ms) {
  return new Promise((resolve) => {
    const t = setTimeout(done, ms);
    function done() {
      clearTimeout(t);
      state.wake = null;
      resolve();
    }
    state.wake = done;
  });
}

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
    if (!state.online) setConn('connecting', 'connecting…');
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
        fatal = 'refused';
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
    if (fatal === 'refused') return setRefused();
    if (fatal) {
      state.online = false;
      $('app').classList.add('stale');
      setConn('error', 'no access');
      banner('bad', 'No access to #' + room + '.', fatal, null, null);
      return;
    }
    state.retryAt = Date.now() + backoff;
    setOffline();
    clearInterval(state.timers.offline);
    state.timers.offline = setInterval(renderOffline, 1000);
    await pause(backoff);
    clearInterval(state.timers.offline);
    state.retryAt = null;
    renderOffline();
    backoff = Math.min(backoff * 2, MAX_BACKOFF);
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
      if (state.lastEvent === null) {
        state.lastEvent = 0;
        state.lastMsg = 0;
      }
      state.readyMsg = data.latest_message_id || 0;
      state.readyEvent = data.latest_event_id || 0;
      setOnline();
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
      renderBoard();
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
    forgetToken();
    showLogin('');
  });
  $('side-toggle').addEventListener('click', toggleSide);
  $('scrim').addEventListener('click', closeDrawer);
  WIDE.addEventListener('change', () => {
    applySide();
    if (WIDE.matches) showTab($('app').dataset.tab);
  });
  for (const t of document.querySelectorAll('.tab')) t.addEventListener('click', () => showTab(t.dataset.tab));
  $('chat').addEventListener('scroll', onChatScroll, { passive: true });
  // A chat read at its end stays at its end when the window resizes.
  new ResizeObserver(() => {
    const list = $('chat');
    if (state.chatStick !== false) list.scrollTop = list.scrollHeight;
  }).observe($('chat'));
  $('new-pill').addEventListener('click', () => {
    const list = $('chat');
    list.scrollTop = list.scrollHeight;
    onChatScroll();
  });
  $('modal-close').addEventListener('click', closeModal);
  $('modal').addEventListener('click', (ev) => {
    if (ev.target === $('modal')) closeModal();
  });
  document.addEventListener('keydown', (ev) => {
    if (ev.key === 'Escape') {
      if (!$('modal').hidden) closeModal();
      else closeDrawer();
    }
  });
  window.addEventListener('hashchange', onHashChange);
  window.addEventListener('online', () => state.wake && state.wake());
  // Relative times, lease countdowns and presence age without the server.
  setInterval(() => {
    if (!$('app').hidden) {
      renderAgents();
      for (const n of $('board').querySelectorAll('.chip.lease[data-lease]')) n.textContent = leaseShort(n.dataset.lease);
    }
  }, 15000);
  // Presence is stored in batches server-side; re-read it now and then,
  // with the other rooms' counts.
  setInterval(() => {
    if (!$('app').hidden && state.room && state.online) {
      loadAgents();
      refreshRooms();
    }
  }, ROOMS_POLL_MS);
  const saved = sessionStorage.getItem(TOKEN_KEY) || sessionStorage.getItem(CONSOLE_KEY);
  if (saved) start(saved);
  else showLogin('');
});
