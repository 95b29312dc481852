// chatroom dashboard: the chat: messages in id order, threads, folding, the new-messages pill.
import { $, el } from '/assets/dom.js';
import { clock, parseTs } from '/assets/time.js';
import { toast } from './conn.js';
import { chatVisible, renderChatBadge } from './layout.js';
import { flat, LONG_MESSAGE, MAX_CHAT, md, plural, state } from './state.js';

// ---------- chat ----------

export function atBottom(list) {
  return list.scrollHeight - list.scrollTop - list.clientHeight < 40;
}

export function addMessage(m) {
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

export function jumpTo(id) {
  const n = $('chat').querySelector('li[data-id="' + CSS.escape(String(id)) + '"]');
  if (!n) return toast('That message is older than what the dashboard keeps.');
  n.scrollIntoView({ block: 'center', behavior: 'smooth' });
  n.classList.add('flash');
  setTimeout(() => n.classList.remove('flash'), 1500);
}

export function onChatScroll() {
  state.chatStick = atBottom($('chat'));
  if (state.chatStick) {
    state.unseenChat = 0;
    $('new-pill').hidden = true;
    renderChatBadge();
  }
}

export function threadRoot(m) {
  let cur = m;
  for (let i = 0; i < 50 && cur && cur.reply_to; i++) {
    const p = state.messages.get(cur.reply_to);
    if (!p) return cur.reply_to;
    cur = p;
  }
  return cur ? cur.id : m.id;
}

export function highlightThread(root, on) {
  for (const n of $('chat').querySelectorAll('li[data-thread="' + CSS.escape(String(root)) + '"]')) {
    n.classList.toggle('thread-hl', on);
  }
}
