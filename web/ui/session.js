// chatroom dashboard: signing in and out, and the room and task in the URL hash.
import { $, el } from '/assets/dom.js';
import { ApiError } from '/assets/api.js';
import { closeModal, openTask } from './board.js';
import { banner, setConn, toast } from './conn.js';
import { applySide } from './layout.js';
import { countUnread, openRoom, renderRooms } from './rooms.js';
import { api, CONSOLE_KEY, SEEN_KEY, state, TOKEN_KEY } from './state.js';

// ---------- login ----------

/** Forgets the token in this tab, the console's too when it was that one
 * (the dashboard opens with the console's token; signing out is both). */
export function forgetToken() {
  if (state.token && sessionStorage.getItem(CONSOLE_KEY) === state.token) sessionStorage.removeItem(CONSOLE_KEY);
  sessionStorage.removeItem(TOKEN_KEY);
  state.token = null;
}

export function showLogin(message) {
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

export async function start(token) {
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
export async function offerConsole(me) {
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

export function hashParams() {
  const p = new URLSearchParams(location.hash.replace(/^#/, ''));
  const task = Number(p.get('task'));
  return { room: p.get('room') || '', task: Number.isInteger(task) && task > 0 ? task : null };
}

export function writeHash(task) {
  const h = '#room=' + encodeURIComponent(state.room) + (task ? '&task=' + task : '');
  if (location.hash !== h) history.replaceState(null, '', h);
}

export function onHashChange() {
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
