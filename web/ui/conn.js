// chatroom dashboard: the live connection's state as the page shows it: the header dot, the
// banner (offline, token refused), the toast.
import { $ } from '/assets/dom.js';
import { clock } from '/assets/time.js';
import { forgetToken, showLogin } from './session.js';
import { state } from './state.js';

// ---------- connection state and banner ----------

export function setConn(kind, text) {
  $('conn').dataset.state = kind;
  $('conn-text').textContent = text;
}

export function banner(kind, title, text, action, onAction) {
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

export function setOnline() {
  state.online = true;
  state.offlineSince = null;
  $('app').classList.remove('stale');
  if (!state.refused) banner(null);
  setConn('live', 'live');
}

export function setOffline() {
  if (state.refused) return;
  state.online = false;
  if (state.offlineSince === null) state.offlineSince = Date.now();
  $('app').classList.add('stale');
  renderOffline();
}

export function renderOffline() {
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
export function setRefused() {
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

export let toastTimer = null;
export function toast(text) {
  const t = $('toast');
  t.textContent = text;
  t.hidden = false;
  clearTimeout(toastTimer);
  toastTimer = setTimeout(() => (t.hidden = true), 6000);
}
