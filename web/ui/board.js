// chatroom dashboard: the board's columns and cards, the task sheet (why it is where it is,
// history, notes, what the viewer's token may do: `can`), and the files.
import { $, el } from '/assets/dom.js';
import { ago, clock, countdown, leaseShort, parseTs } from '/assets/time.js';
import { ApiError } from '/assets/api.js';
import { toast } from './conn.js';
import { writeHash } from './session.js';
import { api, COLUMNS, failureText, flat, handleApiFailure, md, plural, size, state, STATUS, taskHref } from './state.js';

// ---------- board ----------

export function renderBoard() {
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
export function holding(t) {
  if (!t.assignee) return null;
  if (t.status === 'pending') return { kind: 'reserved', text: 'reserved for ' + t.assignee };
  if (t.status === 'done' || t.status === 'cancelled') return { kind: 'was', text: 'by ' + t.assignee };
  return { kind: 'held', text: 'held by ' + t.assignee };
}

export function card(t) {
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
  const stuck = state.stuck[t.id];
  if (stuck && t.status === 'in_progress' && parseTs(stuck) >= parseTs(t.updated_ts)) {
    meta.push(el('span', { class: 'chip stuck', title: 'no update, note or lease renewal for a while (since ' + new Date(parseTs(stuck)).toLocaleString() + ')' }, 'stuck'));
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
export function openTask(id) {
  writeHash(id);
  showTask(id);
}

// ---------- task sheet ----------

export const HISTORY = {
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
export function why(t, events, notes) {
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

export async function showTask(id) {
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

export function renderSheet(children) {
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

export function closeModal() {
  $('modal').hidden = true;
  clearInterval(state.timers.lease);
  const had = state.openTask;
  state.openTask = null;
  if (had && state.room && !$('app').hidden) writeHash(null);
}

// ---------- files ----------

export function renderFiles() {
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
export async function download(f) {
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
