// chatroom dashboard: a read-only live view of a room.
//
// Rules these modules keep:
// - Agent text reaches the page only through the shared markdown.js (a
//   sanitised fragment) or as text (textContent, text nodes); none
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
// ES modules, no build step: this entry wires the page; each section is a
// module beside it (state, conn, session, layout, rooms, board, chat,
// activity, stream), and the DOM, time, API and Markdown helpers are the
// shared ones every page of the server imports from /assets/.
import { $ } from '/assets/dom.js';
import { leaseShort } from '/assets/time.js';
import { closeModal } from './board.js';
import { onChatScroll } from './chat.js';
import { applySide, closeDrawer, showTab, toggleSide } from './layout.js';
import { loadAgents, refreshRooms, renderAgents } from './rooms.js';
import { forgetToken, onHashChange, showLogin, start } from './session.js';
import { CONSOLE_KEY, ROOMS_POLL_MS, state, TOKEN_KEY, WIDE } from './state.js';

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
