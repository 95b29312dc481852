// chatroom dashboard: the rooms list with unread counts and mentions, the room's info, and
// the agents with their presence.
import { $, el } from '/assets/dom.js';
import { ago, parseTs } from '/assets/time.js';
import { closeModal, renderBoard, renderFiles } from './board.js';
import { closeDrawer, renderChatBadge, sideShown } from './layout.js';
import { writeHash } from './session.js';
import { api, flat, handleApiFailure, md, plural, presence, SEEN_KEY, state } from './state.js';
import { follow } from './stream.js';

// ---------- rooms ----------

export function renderRooms() {
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

export function renderInfo(room) {
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

export function refreshRoomsSoon() {
  clearTimeout(state.timers.rooms);
  state.timers.rooms = setTimeout(refreshRooms, 1500);
}

export async function refreshRooms() {
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

export function saveSeen() {
  sessionStorage.setItem(SEEN_KEY, JSON.stringify(state.seen));
}

/** Unread messages and mentions of the reader in every other room, from
 * the room's message events after the last one seen there. */
export async function countUnread() {
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

export function openRoom(name) {
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

export async function loadAgents() {
  const room = state.room;
  try {
    // The members, and each one's presence state (a server without
    // /v1/presence still lists its members).
    const [r, p] = await Promise.all([api('/v1/agents', { room }), api('/v1/presence', { room }).catch(() => null)]);
    if (room !== state.room) return;
    const states = new Map(((p && p.agents) || []).map((x) => [x.agent, x]));
    state.agents = (r.agents || []).map((a) => {
      const s = states.get(a.agent);
      return s ? { ...a, state: s.state, state_ts: s.state_ts, state_source: s.state_source, attention: s.attention, push: s.push } : a;
    });
    renderAgents();
  } catch (e) {
    handleApiFailure(e);
  }
}

export function seen(agent, ts) {
  const a = state.agents.find((x) => x.agent === agent);
  if (a && (!a.last_seen || parseTs(ts) > parseTs(a.last_seen))) {
    a.last_seen = ts;
    // A state read from activity follows the agent's calls.
    if (a.state_source === 'activity') {
      a.state = 'online';
      a.state_ts = ts;
    }
    renderAgents();
  }
}

/** A `presence` event of the stream: an agent's hooks said what it does. */
export function presenceChanged(data) {
  if (data.room && data.room !== state.room) return;
  const a = state.agents.find((x) => x.agent === data.agent);
  if (!a) return loadAgents();
  if (data.state) {
    a.state = data.state;
    a.state_ts = data.ts;
    a.state_source = 'reported';
  }
  if (data.attention) a.attention = data.attention;
  renderAgents();
}

const STATES = ['online', 'working', 'waiting', 'idle', 'offline'];
const STATE_HINT = {
  online: 'its session is open',
  working: 'in a turn',
  waiting: 'waiting for its user',
  idle: 'at its prompt, between turns',
  offline: 'its session ended',
};

/** The agent's state: as reported, else from when it was last seen. */
function stateOf(a) {
  if (STATES.includes(a.state)) return a.state;
  const p = presence(a.last_seen);
  return p === 'active' ? 'online' : p === 'idle' ? 'idle' : 'offline';
}

export function renderAgents() {
  const order = { working: 0, waiting: 1, online: 2, idle: 3, offline: 4 };
  const agents = [...state.agents].sort(
    (a, b) => order[stateOf(a)] - order[stateOf(b)] || (parseTs(b.last_seen) || 0) - (parseTs(a.last_seen) || 0),
  );
  const active = agents.filter((a) => stateOf(a) !== 'offline' && stateOf(a) !== 'idle').length;
  $('agents-count').textContent = agents.length ? active + ' of ' + agents.length + ' active' : '';
  $('agents').replaceChildren(
    ...agents.map((a) => {
      const st = stateOf(a);
      const since = a.state_ts || a.last_seen;
      const tags = [];
      if (a.is_you) tags.push('you');
      if (a.lead) tags.push('lead');
      if (a.admin) tags.push('admin');
      if (a.readonly) tags.push('read-only');
      if (a.push) tags.push('push');
      if (a.attention && a.attention !== 'open') tags.push(a.attention);
      const skills = a.skills && a.skills.length ? a.skills.join(', ') : '';
      const from = a.state_source === 'reported' ? STATE_HINT[st] : 'from its last call';
      const title =
        st + ' (' + from + ')' + (since ? ' since ' + new Date(parseTs(since)).toLocaleString() : '') + (a.last_seen ? '; last seen ' + new Date(parseTs(a.last_seen)).toLocaleString() : '; never seen');
      return el(
        'li',
        { class: 'agent st-' + st, title, 'data-agent': a.agent, 'data-state': st },
        el('span', { class: 'dot' }),
        el('span', { class: 'agent-name' }, a.agent),
        el('span', { class: 'pstate' }, el('span', { class: 'state-name' }, st), since ? el('span', { class: 'ago' }, ' · ' + ago(since)) : null),
        tags.length || skills ? el('span', { class: 'tags' }, tags.join(' · '), skills ? el('span', { class: 'skills' }, (tags.length ? ' · ' : '') + skills) : null) : null,
      );
    }),
  );
  if (!agents.length) $('agents').append(el('li', { class: 'empty' }, 'No agents yet.'));
}
