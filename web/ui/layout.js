// chatroom dashboard: the sidebar (a drawer below 1280 px) and the tabs of phones and tablets.
import { $ } from '/assets/dom.js';
import { renderRooms } from './rooms.js';
import { SIDE_KEY, state, WIDE } from './state.js';

// ---------- sidebar ----------

export function applySide() {
  const app = $('app');
  const collapsed = sessionStorage.getItem(SIDE_KEY) === 'collapsed';
  app.classList.toggle('side-collapsed', WIDE.matches && collapsed);
  if (WIDE.matches) app.classList.remove('side-open');
  const open = WIDE.matches ? !collapsed : app.classList.contains('side-open');
  $('side-toggle').setAttribute('aria-expanded', String(open));
  if (state.room) renderRooms();
}

/** Whether the sidebar (and so the other rooms' counts) is on screen. */
export function sideShown() {
  const app = $('app');
  return WIDE.matches ? !app.classList.contains('side-collapsed') : app.classList.contains('side-open');
}

export function toggleSide() {
  const app = $('app');
  if (WIDE.matches) {
    const collapsed = !app.classList.contains('side-collapsed');
    sessionStorage.setItem(SIDE_KEY, collapsed ? 'collapsed' : 'open');
  } else {
    app.classList.toggle('side-open');
  }
  applySide();
}

export function closeDrawer() {
  if (!WIDE.matches) {
    $('app').classList.remove('side-open');
    applySide();
  }
}

// ---------- tabs (phone and tablet) ----------

export function showTab(name) {
  $('app').dataset.tab = name;
  for (const t of document.querySelectorAll('.tab')) t.setAttribute('aria-selected', String(t.dataset.tab === name));
  if (name === 'chat') {
    state.unseenChat = 0;
    renderChatBadge();
    const list = $('chat');
    list.scrollTop = list.scrollHeight;
  }
}

export function chatVisible() {
  return WIDE.matches || $('app').dataset.tab === 'chat';
}

export function renderChatBadge() {
  const b = $('tab-chat-n');
  b.hidden = !state.unseenChat;
  b.textContent = String(state.unseenChat);
}
