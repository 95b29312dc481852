// chatroom dashboard: the dashboard's constants, its one state object, the API call with the
// reader's token, and the small formatters the sections share.
import { el } from '/assets/dom.js';
import { parseTs } from '/assets/time.js';
import { ApiError, api as call } from '/assets/api.js';
import { plain, render } from '/assets/markdown.js';
import { setRefused } from './conn.js';

export const TOKEN_KEY = 'chatroom.token';
export const CONSOLE_KEY = 'chatroom-admin-token';
export const SEEN_KEY = 'chatroom.seen';
export const SIDE_KEY = 'chatroom.side';
export const MAX_CHAT = 500;
export const MAX_ACTIVITY = 300;
export const LONG_MESSAGE = 1500; // characters; longer ones are folded
export const TAIL = 300;
export const STALL_MS = 40000; // three missed keep-alives
export const MAX_BACKOFF = 10000;
export const ROOMS_POLL_MS = 30000;
export const WIDE = window.matchMedia('(min-width: 1280px)');
export const COLUMNS = [
  ['pending', 'Pending'],
  ['in_progress', 'In progress'],
  ['blocked', 'Blocked'],
  ['in_review', 'In review'],
  ['closed', 'Done'],
];
export const STATUS = {
  pending: 'pending',
  in_progress: 'in progress',
  blocked: 'blocked',
  in_review: 'in review',
  done: 'done',
  cancelled: 'cancelled',
};

export const state = {
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
  /** task id -> when its last task_stuck event came (a badge on its card) */
  stuck: {},
  unseenChat: 0,
  unread: {},
  seen: {},
  openTask: null,
  timers: {},
};

// ---------- API ----------

/** A GET of this server's API with the dashboard's token. */
export function api(path, params) {
  return call(state.token, path, { params });
}

/** What a failed read means to the reader, in one sentence. */
export function failureText(e) {
  if (e instanceof ApiError && e.status === 0) return 'The server is unreachable.';
  if (e instanceof ApiError && e.status === 401) return 'The server refused the token.';
  if (e instanceof ApiError) return e.message;
  return String(e && e.message ? e.message : e);
}

export function handleApiFailure(e) {
  if (e instanceof ApiError && e.status === 401) setRefused();
}

// ---------- formatting ----------

export function presence(ts) {
  const t = parseTs(ts);
  if (t === null) return 'away';
  const s = (Date.now() - t) / 1000;
  if (s < 300) return 'active';
  if (s < 3600) return 'idle';
  return 'away';
}

export function size(n) {
  if (n < 1024) return n + ' B';
  if (n < 1024 * 1024) return (n / 1024).toFixed(1) + ' KB';
  return (n / 1024 / 1024).toFixed(1) + ' MB';
}

export const plural = (n, one, many) => n + ' ' + (n === 1 ? one : many);

export function snippet(text, n) {
  const flat = String(text || '').replace(/\s+/g, ' ').trim();
  return flat.length > n ? flat.slice(0, n - 1) + '…' : flat;
}

export function taskHref(n) {
  return '#room=' + encodeURIComponent(state.room || '') + '&task=' + n;
}

/** Agent text as sanitised Markdown in a `.md` box. */
export function md(text, inline) {
  const frag = render(text, { taskHref, me: state.me && state.me.agent, inline: !!inline });
  return el(inline ? 'span' : 'div', { class: inline ? 'md inline' : 'md' }, frag);
}

/** Agent text flattened for a one-line snippet. */
export function flat(text, n) {
  return snippet(plain(text || ''), n);
}
