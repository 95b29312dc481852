// chatroom board: the MCP App a chat host shows beside the conversation.
//
// It talks only to its host, through the ext-apps bridge (postMessage to
// the parent frame): every read and every change is a `tools/call` the
// host forwards to chatroom under the identity the host already has, to
// the app-only tools (`board_*`, hidden from the model, so a person's
// click is told apart from a model's call). The document holds no token,
// no URL and no room data. A host that cannot forward tool calls
// (`hostCapabilities.serverTools` absent) gets the board it sent, without
// buttons. After a person acts, the app tells the model in a line
// (`ui/update-model-context`) when the host takes it.
//
// Everything agents wrote (titles, bodies, notes, results, messages, event
// details) is rendered by the shared markdown.js (escaped HTML, DOMPurify
// after) or set as text; never as markup of ours.
//
// What the caller may do with a task the server says, in the task's `can`
// (the domain's rules); this app keeps no copy of them. The shared modules
// imported below are inlined into the document when the server assembles
// it (src/mcp/app.rs).
import { $, el } from '/assets/dom.js';
import { clock as when } from '/assets/time.js';
import { render as renderMarkdown } from '/assets/markdown.js';

const { App, PostMessageTransport, applyDocumentTheme, applyHostStyleVariables, applyHostFonts } = globalThis.McpExtApps;

const STATUSES = ['pending', 'in_progress', 'blocked', 'in_review', 'done', 'cancelled'];
const LABELS = { pending: 'Pending', in_progress: 'In progress', blocked: 'Blocked', in_review: 'In review', done: 'Done', cancelled: 'Cancelled' };
const REFRESH_MS = 30000;

const state = { me: null, room: null, data: null, replyTo: null, open: null, busy: false, caps: null };

const markdown = (text, inline) =>
  renderMarkdown(String(text ?? ''), { inline, me: state.me?.agent, taskHref: (n) => '#task-' + n });

// ---------- the host ----------

const app = new App({ name: 'chatroom-board', version: '1.0.0' }, {}, { autoResize: true });

/** One tool call through the host; a refusal becomes an Error with its code. */
async function call(name, args) {
  if (!canCall()) throw new Error('this host does not let the app call tools');
  const params = { name, arguments: Object.assign({}, args) };
  if (state.room && params.arguments.room === undefined) params.arguments.room = state.room;
  const result = await app.callServerTool(params);
  let body = result.structuredContent;
  if (!body) {
    const text = (result.content || []).find((c) => c.type === 'text')?.text;
    try { body = text ? JSON.parse(text) : {}; } catch { body = { error: { code: 'error', message: text } }; }
  }
  if (result.isError) {
    const err = new Error(body?.error?.message || 'the call was refused');
    err.code = body?.error?.code || 'error';
    throw err;
  }
  return body;
}

function applyContext(ctx) {
  if (!ctx) return;
  if (ctx.theme) applyDocumentTheme(ctx.theme);
  if (ctx.styles?.variables) applyHostStyleVariables(ctx.styles.variables);
  if (ctx.styles?.css?.fonts) applyHostFonts(ctx.styles.css.fonts);
  const inset = ctx.safeAreaInsets;
  if (inset) {
    document.body.style.padding = `${inset.top || 0}px ${inset.right || 0}px ${inset.bottom || 0}px ${inset.left || 0}px`;
  }
}

function problem(text) {
  const p = $('problem');
  p.textContent = text || '';
  p.hidden = !text;
}

function status(text) {
  $('status').textContent = text || '';
}

// ---------- what the caller may do ----------

/** Whether the host forwards the app's tool calls to the server. */
const canCall = () => !!state.caps?.serverTools;
const writable = () => canCall() && !!state.me && !state.me.readonly;
const mine = (t) => t.assignee && t.assignee === state.me?.agent;
/** Whether the server lists `action` in the task's `can`. */
const may = (t, action) => canCall() && Array.isArray(t.can) && t.can.includes(action);

/** Tells the model, in one line, what the person just did (when the host
 * takes context updates); a host that refuses it changes nothing here. */
function tellModel(text) {
  if (!state.caps?.updateModelContext) return;
  app.updateModelContext({ content: [{ type: 'text', text: 'In the chatroom board app, the person ' + text + ' (room ' + state.room + ').' }] }).catch(() => {});
}

// ---------- actions ----------

/** Runs a change, then shows the board as it is now. */
async function act(label, fn, told) {
  if (state.busy) return;
  state.busy = true;
  document.body.classList.add('busy');
  status(label + '…');
  problem('');
  try {
    const out = await fn();
    if (out && out.claimed === false) problem('Not claimed: ' + (out.reason || 'refused'));
    if (out && out.released === false) problem('Not released: ' + (out.reason || 'refused'));
    else if (told && !(out && out.claimed === false)) tellModel(told);
    await refresh();
    if (state.open !== null) await openTask(state.open);
    status('');
  } catch (e) {
    problem(e.message);
    status('');
  } finally {
    state.busy = false;
    document.body.classList.remove('busy');
  }
}

const claim = (t) => act('Claiming #' + t.id, () => call('board_claim', { task_id: t.id }), 'claimed task #' + t.id);
const release = (t) => act('Releasing #' + t.id, () => call('board_release', { task_id: t.id }), 'released task #' + t.id);
const approve = (t) => act('Approving #' + t.id, () => call('board_review', { task_id: t.id, approve: true }), 'approved task #' + t.id);
function reject(t, note) {
  if (!note.trim()) {
    problem('A rejection needs a note saying what to change.');
    return;
  }
  return act('Rejecting #' + t.id, () => call('board_review', { task_id: t.id, approve: false, note }), 'sent task #' + t.id + ' back with a note');
}
const addNote = (t, body) => act('Adding a note', () => call('board_note', { task_id: t.id, body }), 'added a note to task #' + t.id);
/** A claim of one's own blocked task takes it up again. */
const claimLabel = (t) => (mine(t) && t.status === 'blocked' ? 'Resume' : 'Claim');

// ---------- rendering ----------

function card(t) {
  const buttons = [];
  if (may(t, 'claim')) buttons.push(el('button', { type: 'button', class: 'small primary', 'data-act': 'claim', onclick: (e) => { e.stopPropagation(); claim(t); } }, claimLabel(t)));
  if (may(t, 'review')) buttons.push(el('button', { type: 'button', class: 'small primary', 'data-act': 'approve', onclick: (e) => { e.stopPropagation(); approve(t); } }, 'Approve'));
  const meta = [
    el('span', { class: 'id' }, '#' + t.id),
    t.priority && t.priority !== 'normal' ? el('span', { class: 'badge prio-' + t.priority }, t.priority) : null,
    t.needs_review ? el('span', { class: 'badge' }, 'review') : null,
    t.assignee ? el('span', { class: 'badge' + (mine(t) ? ' you' : ''), 'data-assignee': t.assignee }, '@' + t.assignee) : null,
    (t.blocked_by_unfinished || []).length ? el('span', { class: 'badge bad' }, 'waits for ' + t.blocked_by_unfinished.map((n) => '#' + n).join(' ')) : null,
  ];
  return el('article', { class: 'card', 'data-id': t.id, 'data-status': t.status, tabindex: 0, onclick: (e) => openTask(t.id, e.currentTarget), onkeydown: (e) => { if (e.key === 'Enter') openTask(t.id, e.currentTarget); } },
    el('div', { class: 'card-title' }, markdown(t.title, true)),
    el('div', { class: 'card-meta' }, meta),
    buttons.length ? el('div', { class: 'card-actions' }, buttons) : null);
}

function renderBoard() {
  const board = state.data.board || {};
  const cols = STATUSES.map((s) => {
    const tasks = board[s] || [];
    return el('div', { class: 'col', 'data-status': s },
      el('h2', {}, LABELS[s], el('span', { class: 'count' }, String(tasks.length))),
      tasks.length ? tasks.map(card) : el('p', { class: 'faint empty' }, 'nothing'));
  });
  $('board').replaceChildren(el('div', { class: 'cols' }, cols));
}

function message(m) {
  const actions = writable() ? el('button', { type: 'button', class: 'small ghost reply', onclick: () => replyTo(m) }, 'Reply') : null;
  return el('div', { class: 'msg' + (m.mentions_you ? ' mention' : ''), 'data-id': m.id },
    el('div', { class: 'msg-head' }, el('strong', {}, m.author), el('span', { class: 'faint' }, when(m.ts)), actions),
    el('div', { class: 'md' }, markdown(m.body, false)));
}

function renderChat() {
  const msgs = state.data.messages || [];
  const byId = new Map(msgs.map((m) => [m.id, m]));
  const replies = new Map();
  const roots = [];
  for (const m of msgs) {
    if (m.reply_to && byId.has(m.reply_to)) {
      if (!replies.has(m.reply_to)) replies.set(m.reply_to, []);
      replies.get(m.reply_to).push(m);
    } else roots.push(m);
  }
  const thread = (m) => {
    const kids = replies.get(m.id) || [];
    return el('div', { class: 'thread' }, message(m), kids.length ? el('div', { class: 'replies' }, kids.map(thread)) : null);
  };
  const box = $('messages');
  box.replaceChildren(...(roots.length ? roots.map(thread) : [el('p', { class: 'faint' }, 'No messages yet.')]));
  box.scrollTop = box.scrollHeight;
  $('composer').hidden = !writable();
}

const KIND = {
  message: 'wrote', task_created: 'created', task_claimed: 'claimed', task_updated: 'updated', task_released: 'released',
  note_added: 'noted on', task_submitted: 'submitted', task_reviewed: 'reviewed', task_cancelled: 'cancelled',
  task_lease_expired: 'lease lapsed on', file_added: 'added a file', file_deleted: 'deleted a file',
  room_info_updated: 'updated the room', retention_set: 'set retention',
};

/** One line of agent text for the activity: a fenced code block's fences
 * and language go, its code stays (inline Markdown would show "sh cargo"). */
const oneLine = (text) => String(text).replace(/```[^\n]*\n?/g, ' ').replace(/\s+/g, ' ').trim();

function renderEvents() {
  const all = state.data.events || [];
  // A rejection writes its note as the next event: the line shows the note.
  const noteOf = new Map();
  const merged = new Set();
  all.forEach((e, i) => {
    const next = all[i + 1];
    if (e.kind === 'task_reviewed' && next && next.kind === 'note_added' && next.task_id === e.task_id && next.actor === e.actor) {
      noteOf.set(e.id, next.data?.body || next.detail);
      merged.add(next.id);
    }
  });
  const evs = all.filter((e) => !merged.has(e.id)).reverse();
  $('events').replaceChildren(...evs.map((e) => {
    const d = e.data || {};
    const verdict = e.kind === 'task_reviewed' ? (d.approve ? 'approved: ' : 'sent back: ') : '';
    const said = noteOf.get(e.id) || d.body || d.note || d.reason || d.title || '';
    const extra = verdict + oneLine(said);
    return el('li', { 'data-kind': e.kind },
      el('span', { class: 'faint' }, when(e.ts)), ' ',
      el('strong', {}, e.actor), ' ', KIND[e.kind] || e.kind,
      e.task_id ? el('a', { href: '#task-' + e.task_id, class: 'id' }, ' #' + e.task_id) : null,
      extra ? el('span', { class: 'ev-detail' }, markdown(String(extra).slice(0, 300), true)) : null);
  }));
}

function render() {
  $('room-name').textContent = state.room || 'chatroom';
  renderBoard();
  renderChat();
  renderEvents();
}

function renderMe() {
  const me = state.me;
  $('me').textContent = me ? '@' + me.agent : '';
  $('flags').replaceChildren(
    me?.lead ? el('span', { class: 'badge you' }, 'lead') : '',
    me?.readonly ? el('span', { class: 'badge bad', id: 'readonly-badge' }, 'read-only') : '');
  $('readonly-banner').hidden = !me?.readonly;
}

/** The task's panel, a fixed overlay: its top is in viewport terms, so it
 * opens level with what was clicked (`near`) and never below the visible
 * frame, whether the host sizes the frame to the content or fixes its
 * height and lets the document scroll inside it. */
async function openTask(id, near) {
  state.open = id;
  const top = near ? near.getBoundingClientRect().top : 0;
  $('detail').style.paddingTop = Math.max(12, Math.min(top - 24, window.innerHeight - 320)) + 'px';
  let task;
  try {
    task = (await call('board_task', { task_id: id })).task;
  } catch (e) {
    problem(e.message);
    state.open = null;
    return;
  }
  $('detail-title').replaceChildren(el('span', { class: 'id' }, '#' + task.id + ' '), markdown(task.title, true));
  const parts = [
    el('div', { class: 'card-meta' },
      el('span', { class: 'badge' }, LABELS[task.status] || task.status),
      task.assignee ? el('span', { class: 'badge' + (mine(task) ? ' you' : '') }, '@' + task.assignee) : null,
      el('span', { class: 'faint' }, 'by @' + task.created_by + ' · ' + when(task.created_ts))),
    task.body ? el('div', { class: 'md' }, markdown(task.body, false)) : null,
    task.result ? el('div', { class: 'result' }, el('h4', {}, 'Result'), el('div', { class: 'md' }, markdown(task.result, false))) : null,
  ];
  const notes = task.notes || [];
  parts.push(el('h4', {}, 'Notes'));
  parts.push(notes.length
    ? el('div', { class: 'notes' }, notes.map((n) => el('div', { class: 'msg' }, el('div', { class: 'msg-head' }, el('strong', {}, n.author), el('span', { class: 'faint' }, when(n.ts))), el('div', { class: 'md' }, markdown(n.body, false)))))
    : el('p', { class: 'faint' }, 'No notes.'));
  const buttons = [];
  if (may(task, 'claim')) buttons.push(el('button', { type: 'button', class: 'primary small', 'data-act': 'claim', onclick: () => claim(task) }, claimLabel(task)));
  if (may(task, 'release')) buttons.push(el('button', { type: 'button', class: 'small', 'data-act': 'release', onclick: () => release(task) }, 'Release'));
  if (may(task, 'review')) buttons.push(el('button', { type: 'button', class: 'primary small', 'data-act': 'approve', onclick: () => approve(task) }, 'Approve'));
  if (may(task, 'note') || may(task, 'review')) {
    const text = el('textarea', { id: 'note-body', rows: 2, maxlength: 4000, placeholder: may(task, 'review') ? 'A note (a rejection needs one)' : 'Add a note', 'aria-label': 'Note' });
    const noteBtn = may(task, 'note') ? el('button', { type: 'button', class: 'small', 'data-act': 'note', onclick: () => text.value.trim() ? addNote(task, text.value) : problem('Write the note first.') }, 'Add note') : null;
    const rejectBtn = may(task, 'review') ? el('button', { type: 'button', class: 'small danger', 'data-act': 'reject', onclick: () => reject(task, text.value) }, 'Reject') : null;
    parts.push(el('div', { class: 'note-form' }, text, el('div', { class: 'row' }, noteBtn, rejectBtn)));
  }
  if (buttons.length) parts.push(el('div', { class: 'card-actions' }, buttons));
  $('detail-body').replaceChildren(...parts.filter(Boolean));
  $('detail').hidden = false;
}

function closeTask() {
  state.open = null;
  $('detail').hidden = true;
}

function replyTo(m) {
  state.replyTo = m.id;
  const r = $('replying');
  r.querySelector('span').textContent = 'Replying to @' + m.author + ' (#' + m.id + ')';
  r.hidden = false;
  $('message-body').focus();
}

// ---------- loading ----------

function show(data) {
  if (!data || !data.board) return;
  state.data = data;
  if (data.room) state.room = data.room;
  if (data.you) {
    state.me = data.you;
    renderMe();
  }
  render();
}

async function refresh() {
  show(await call('board_refresh', {}));
}

async function refreshQuietly() {
  if (state.busy || document.hidden || !canCall()) return;
  try { await refresh(); } catch (e) { problem(e.message); }
}

// Links never navigate this frame: task references open the task, other
// links go to the host, which asks the person before opening them.
document.addEventListener('click', (e) => {
  const a = e.target.closest && e.target.closest('a[href]');
  if (!a) return;
  e.preventDefault();
  const href = a.getAttribute('href');
  const task = /^#task-(\d+)$/.exec(href);
  if (task) {
    openTask(Number(task[1]), a);
    return;
  }
  if (/^(https?:|mailto:)/i.test(href)) app.openLink({ url: href }).catch(() => {});
});

$('refresh').addEventListener('click', () => act('Refreshing', async () => {}));
$('detail-close').addEventListener('click', closeTask);
$('detail').addEventListener('click', (e) => { if (e.target === $('detail')) closeTask(); });
document.addEventListener('keydown', (e) => { if (e.key === 'Escape') closeTask(); });
$('cancel-reply').addEventListener('click', () => { state.replyTo = null; $('replying').hidden = true; });
for (const b of document.querySelectorAll('#tabs [data-tab]')) {
  b.addEventListener('click', () => {
    $('main').dataset.tab = b.dataset.tab;
    for (const o of document.querySelectorAll('#tabs [data-tab]')) o.setAttribute('aria-selected', String(o === b));
  });
}
// No <form> submit: hosts sandbox the frame without `allow-forms`.
function send() {
  const body = $('message-body').value;
  if (!body.trim()) return;
  const args = { body };
  if (state.replyTo) args.reply_to = state.replyTo;
  act('Sending', async () => {
    await call('board_post', args);
    $('message-body').value = '';
    state.replyTo = null;
    $('replying').hidden = true;
  });
}
$('send').addEventListener('click', send);
$('message-body').addEventListener('keydown', (e) => {
  if (e.key === 'Enter' && (e.ctrlKey || e.metaKey)) send();
});

// Listeners first: the host may send the tool's input and result as soon
// as the handshake ends.
app.addEventListener('toolinput', (p) => {
  if (p?.arguments?.room) state.room = p.arguments.room;
});
app.addEventListener('toolresult', (p) => show(p?.structuredContent));
app.addEventListener('hostcontextchanged', applyContext);
app.onteardown = async () => ({});

try {
  await app.connect(new PostMessageTransport(window.parent, window.parent));
  state.caps = app.getHostCapabilities() || {};
  applyContext(app.getHostContext());
  if (!canCall()) {
    problem('This host shows the board but does not let it call tools: no actions, and no refresh.');
    $('refresh').hidden = true;
  }
  if (state.data) render();
  else if (canCall()) await refresh();
  document.body.dataset.ready = 'true';
  if (canCall()) setInterval(refreshQuietly, REFRESH_MS);
} catch (e) {
  problem('The board could not load: ' + e.message);
}
