// chatroom dashboard: the activity feed: one line per room event.
import { $, el } from '/assets/dom.js';
import { clock, parseTs } from '/assets/time.js';
import { openTask, renderBoard, showTask } from './board.js';
import { refreshRoomsSoon, seen } from './rooms.js';
import { flat, MAX_ACTIVITY, state, STATUS } from './state.js';

// ---------- activity ----------

export const VERBS = {
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
  task_stuck: 'flagged as stuck',
};

export function addActivity(e) {
  if (state.activity.has(e.id)) return;
  state.activity.add(e.id);
  state.lastEvent = Math.max(state.lastEvent || 0, e.id);
  if (e.kind === 'task_stuck' && e.task_id) {
    // The card shows a badge until the task moves again.
    state.stuck[e.task_id] = e.ts;
    renderBoard();
  }
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
