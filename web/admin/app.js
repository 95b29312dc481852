// chatroom admin console. An ES module, no build step, served by the
// binary; the DOM, time and API helpers are the shared ones (/assets/).
//
// The admin token lives in sessionStorage (this tab only) and is sent as a
// bearer header; there are no cookies. Everything agents or admins wrote
// (room names, notes, agent names) is put into the page as text
// (textContent), never as HTML.
import { $, clear, el } from '/assets/dom.js';
import { stamp as when } from '/assets/time.js';
import { api as call } from '/assets/api.js';
import { renderHooks, wireHooks } from '/admin/webhooks.js';

const KEY = 'chatroom-admin-token';
let current = null; // the last /v1/admin/state answer

function bytes(n) {
  if (n >= 1 << 30) return `${(n / (1 << 30)).toFixed(1)} GiB`;
  if (n >= 1 << 20) return `${(n / (1 << 20)).toFixed(1)} MiB`;
  if (n >= 1 << 10) return `${(n / (1 << 10)).toFixed(0)} KiB`;
  return `${n} B`;
}

function list(text) {
  return String(text || '').split(',').map((s) => s.trim()).filter(Boolean);
}

// A manual popover sits in the top layer, so messages show above an open dialog too.
let toastTimer = null;
function toast(message, kind) {
  const t = $('toast');
  t.textContent = message;
  t.className = `toast ${kind || 'ok'}`;
  if (t.matches(':popover-open')) t.hidePopover();
  t.showPopover();
  clearTimeout(toastTimer);
  toastTimer = setTimeout(() => { if (t.matches(':popover-open')) t.hidePopover(); }, kind === 'error' ? 8000 : 3500);
}

async function copy(text, button) {
  let ok = false;
  try {
    if (navigator.clipboard && window.isSecureContext) {
      await navigator.clipboard.writeText(text);
      ok = true;
    }
  } catch (_) { ok = false; }
  if (!ok) {
    // Plain-http LAN pages have no async clipboard: copy via a selection.
    const area = el('textarea', { class: 'offscreen', readonly: true });
    area.value = text;
    document.body.append(area);
    area.select();
    try { ok = document.execCommand('copy'); } catch (_) { ok = false; }
    area.remove();
  }
  if (button) {
    const label = button.textContent;
    button.textContent = ok ? 'Copied' : 'Select and copy';
    button.classList.toggle('done', ok);
    setTimeout(() => { button.textContent = label; button.classList.remove('done'); }, 1600);
  }
}

// ---- the API -----------------------------------------------------------

/** A call of the console API with this tab's admin token. */
function api(method, path, body) {
  return call(sessionStorage.getItem(KEY), path, { method, body });
}

async function act(promise, okMessage) {
  try {
    const r = await promise;
    if (okMessage) toast(typeof okMessage === 'function' ? okMessage(r) : okMessage);
    await load();
    return r;
  } catch (e) {
    if (e.status === 401) return signOut('The token is no longer valid.');
    toast(e.message, 'error');
    return null;
  }
}

// ---- sign in / out -----------------------------------------------------

/** A link to the dashboard, when the server serves it (it reads the same
 * token from this tab's session). */
async function offerDashboard() {
  try {
    // A small asset behind the same gate as the page.
    const r = await fetch('/ui/favicon.svg', { cache: 'no-store' });
    await r.text();
    $('to-dashboard').hidden = !r.ok;
  } catch (_) {
    /* no link then */
  }
}

function showLogin(message) {
  $('console').hidden = true;
  $('who').hidden = true;
  $('login').hidden = false;
  const err = $('login-error');
  err.textContent = message || '';
  err.hidden = !message;
}

function signOut(message) {
  sessionStorage.removeItem(KEY);
  current = null;
  for (const id of ['rooms', 'tokens', 'webhooks', 'inbound', 'log', 'posture', 'counts']) clear($(id));
  showLogin(message);
  return null;
}

async function load() {
  let state;
  try {
    state = await api('GET', '/v1/admin/state');
  } catch (e) {
    if (e.status === 401) return signOut('That token was not accepted.');
    if (e.status === 403) return signOut(e.message);
    toast(e.message, 'error');
    return null;
  }
  current = state;
  $('login').hidden = true;
  $('console').hidden = false;
  $('who').hidden = false;
  $('who-agent').textContent = state.you.agent;
  renderCounts(state);
  renderPosture(state.posture);
  renderRooms(state.rooms);
  renderTokens(state.tokens, state.you);
  renderHooks(state.hooks, state.rooms, api, act);
  renderLog(state.log);
  return state;
}

// ---- rendering ---------------------------------------------------------

function renderCounts(s) {
  const c = s.counts;
  const box = $('counts');
  clear(box);
  for (const [label, n] of [
    ['rooms', c.rooms], ['agents', c.agents], ['active tokens', c.active_tokens], ['revoked tokens', c.revoked_tokens],
  ]) {
    box.append(el('div', { class: 'count' }, el('div', { class: 'n', text: n }), el('div', { class: 'label', text: label })));
  }
}

function badge(on, goodWhenOn = true) {
  const good = goodWhenOn ? on : !on;
  return el('span', { class: `badge ${on ? 'on' : 'off'} ${good ? 'good' : 'bad'}`, text: on ? 'on' : 'off' });
}

function chips(items, empty) {
  if (!items || items.length === 0) return el('span', { class: 'muted', text: empty || 'none' });
  return el('span', { class: 'chips' }, items.map((i) => el('code', { class: 'chip', text: i })));
}

function renderPosture(p) {
  const box = $('posture');
  clear(box);
  const item = (title, state, ...detail) => box.append(
    el('div', { class: 'p-item' },
      el('div', { class: 'p-title' }, el('span', { text: title }), state || ''),
      el('div', { class: 'p-detail' }, ...detail)),
  );
  item('Host allowlist', badge(p.host_check.on),
    p.host_check.on ? chips(p.host_check.allowed_hosts) : el('span', { class: 'bad-text', text: 'DNS-rebinding protection is off' }));
  item('Browser origins on /mcp', null, chips(p.allowed_origins));
  item('Failed-auth throttle', badge(p.throttle.on),
    p.throttle.on ? `${p.throttle.limit} failures per ${p.throttle.window_s} s per address` : 'disabled (CHATROOM_AUTH_FAIL_LIMIT=0)');
  item('Rate limit', badge(p.rate_limit.on),
    p.rate_limit.on ? `${p.rate_limit.per_minute} tool calls a minute per token` : 'disabled');
  item('Trust proxy headers', el('span', { class: `badge ${p.trust_proxy ? 'on' : 'off'}`, text: p.trust_proxy ? 'on' : 'off' }),
    p.trust_proxy ? 'client addresses come from CF-Connecting-IP / X-Real-IP / X-Forwarded-For' : 'client address = TCP peer');
  item('Console LAN-only', badge(p.console_lan_only),
    p.console_lan_only ? 'hidden from requests through the public side' : 'reachable from the public side',
    p.public_hosts.length ? el('div', {}, 'public hosts: ', chips(p.public_hosts)) : null);
  item('Dashboard /ui', el('span', { class: `badge ${p.ui ? 'on' : 'off'}`, text: p.ui ? 'on' : 'off' }), 'read-only dashboard');
  item('Admin console', badge(p.admin_api), 'CHATROOM_ADMIN_API');
  item('URLs', null,
    el('div', {}, 'LAN: ', p.urls.lan_url ? el('code', { text: p.urls.lan_url }) : el('span', { class: 'muted', text: 'not set' })),
    el('div', {}, 'public: ', p.urls.public_url ? el('code', { text: p.urls.public_url }) : el('span', { class: 'muted', text: 'not set' })),
    el('div', {}, 'reached at: ', el('code', { text: p.urls.reached })));
  item('Limits', null,
    el('div', { text: `file cap ${bytes(p.max_file_bytes)}` }),
    el('div', { text: `max wait ${p.max_wait_s} s` }),
    el('div', { text: p.prune.on ? `pruning every ${p.prune.interval_s} s` : 'pruning off' }),
    el('div', { text: `database: ${p.database}` }));
  const m = p.mqtt;
  item('MQTT bridge', m.configured
    ? el('span', { class: `badge ${m.connected ? 'on good' : 'off bad'}`, text: m.connected ? 'connected' : 'disconnected' })
    : el('span', { class: 'badge off', text: 'off' }),
  m.configured
    ? [el('div', {}, el('code', { text: `${m.tls ? 'mqtts' : 'mqtt'}://${m.host}:${m.port}` }), ` prefix `, el('code', { text: m.prefix })),
      el('div', { text: `published ${m.published} · dropped ${m.dropped}${m.enabled ? '' : ' · bridge not running'}` })]
    : 'CHATROOM_MQTT_HOST is not set');
}

function renderRooms(rooms) {
  const body = $('rooms');
  clear(body);
  if (rooms.length === 0) {
    body.append(el('tr', {}, el('td', { colspan: 7, class: 'muted empty', text: 'No rooms yet: create one above.' })));
  }
  for (const r of rooms) {
    body.append(el('tr', { data: { room: r.name } },
      el('td', {}, el('strong', { text: r.name }), r.repo_url ? el('div', { class: 'muted small', text: r.repo_url }) : null),
      el('td', { class: 'desc', text: r.description || '' }),
      el('td', { class: 'num', text: r.open_tasks }),
      el('td', { class: 'num', text: r.messages }),
      el('td', { class: 'num', text: r.files }),
      el('td', { text: r.retention_days ? `${r.retention_days} days` : 'keep' }),
      el('td', { class: 'row-actions' },
        el('button', { type: 'button', class: 'small', text: 'Edit', on: { click: () => openRoom(r) } }),
        el('button', { type: 'button', class: 'small danger', text: 'Delete', on: { click: () => deleteRoom(r.name) } }))));
  }
  const select = $('mint-room');
  const previous = select.value;
  clear(select);
  if (rooms.length === 0) select.append(el('option', { value: '', text: 'create a room first' }));
  for (const r of rooms) select.append(el('option', { value: r.name, text: r.name }));
  if (rooms.some((r) => r.name === previous)) select.value = previous;
  $('mint-submit').disabled = rooms.length === 0;
}

function flagsOf(t) {
  return ['readonly', 'lead', 'admin', 'all_rooms'].filter((f) => t[f]);
}

function renderTokens(tokens, you) {
  const body = $('tokens');
  clear(body);
  if (tokens.length === 0) {
    body.append(el('tr', {}, el('td', { colspan: 9, class: 'muted empty', text: 'No tokens.' })));
  }
  for (const t of [...tokens].reverse()) {
    const revoked = !!t.revoked_ts;
    const flags = flagsOf(t);
    body.append(el('tr', { class: revoked ? 'revoked' : '', data: { agent: t.agent } },
      el('td', { class: 'num', text: t.id }),
      el('td', {}, el('strong', { text: t.agent }), t.is_you ? el('span', { class: 'badge you', text: 'you' }) : null),
      el('td', {}, el('span', { text: t.all_rooms ? `${t.room} (all rooms)` : [t.room, ...t.also_rooms].join(', ') })),
      el('td', {}, flags.length ? flags.map((f) => el('span', { class: `flag ${t.whole_server_admin && (f === 'admin' || f === 'all_rooms') ? 'hot' : ''}`, text: f })) : el('span', { class: 'muted', text: 'writer' })),
      el('td', { text: (t.skills || []).join(', ') }),
      el('td', { class: 'small', text: when(t.created_ts) }),
      el('td', { class: 'small', text: when(t.last_seen) }),
      el('td', {}, revoked ? el('span', { class: 'badge off bad', text: `revoked ${when(t.revoked_ts)}` }) : el('span', { class: 'badge on good', text: 'active' })),
      el('td', { class: 'row-actions' }, revoked ? null
        : el('button', { type: 'button', class: 'small danger', text: 'Revoke agent', on: { click: () => revokeAgent(t.agent, you) } }))));
  }
}

function renderLog(entries) {
  const body = $('log');
  clear(body);
  if (entries.length === 0) {
    body.append(el('tr', {}, el('td', { colspan: 5, class: 'muted empty', text: 'Nothing yet: every console change is recorded here.' })));
  }
  for (const e of entries) {
    body.append(el('tr', { class: e.flagged ? 'flagged' : '' },
      el('td', { class: 'small', text: when(e.ts) }),
      el('td', { text: e.actor }),
      el('td', {}, el('code', { text: e.address })),
      el('td', {}, el('code', { text: e.action }), e.flagged ? el('span', { class: 'badge off bad', text: 'whole-server admin' }) : null),
      el('td', { text: e.target })));
  }
}

// ---- dialogs -----------------------------------------------------------

function confirmDialog({ title, text, expect, okLabel }) {
  return new Promise((resolve) => {
    const dlg = $('confirm-dialog');
    $('confirm-title').textContent = title;
    $('confirm-text').textContent = text;
    $('confirm-ok').textContent = okLabel || 'Confirm';
    const typed = $('confirm-typed');
    const input = $('confirm-input');
    input.value = '';
    typed.hidden = !expect;
    $('confirm-expect').textContent = expect || '';
    const ok = $('confirm-ok');
    const sync = () => { ok.disabled = !!expect && input.value !== expect; };
    sync();
    input.oninput = sync;
    let answered = false;
    const finish = (v) => { if (!answered) { answered = true; dlg.close(); resolve(v); } };
    $('confirm-form').onsubmit = (ev) => { ev.preventDefault(); if (!ok.disabled) finish(true); };
    $('confirm-cancel').onclick = () => finish(false);
    dlg.onclose = () => finish(false);
    dlg.showModal();
    if (expect) input.focus(); else $('confirm-cancel').focus();
  });
}

let editing = null;
function openRoom(r) {
  editing = r.name;
  $('room-dialog-name').textContent = r.name;
  $('info-description').value = r.description || '';
  $('info-repo').value = r.repo_url || '';
  $('info-onboarding').value = r.onboarding_notes || '';
  $('retention-days').value = r.retention_days || 0;
  $('room-dialog').showModal();
}

async function deleteRoom(name) {
  const yes = await confirmDialog({
    title: `Delete room ${name}?`,
    text: 'This removes the room with its tasks, chat, files and events. Audit rows stay. It cannot be undone.',
    expect: name,
    okLabel: 'Delete room',
  });
  if (!yes) return;
  await act(api('DELETE', `/v1/admin/rooms/${encodeURIComponent(name)}?confirm=${encodeURIComponent(name)}`), `Room ${name} deleted`);
}

async function revokeAgent(agent, you) {
  const self = you && agent === you.agent;
  const yes = await confirmDialog({
    title: `Revoke agent ${agent}?`,
    text: self
      ? 'This is your own agent: every token of it stops working at once, including the one this console uses. You will be signed out.'
      : 'Every token of this agent stops working at once; other agents are unaffected.',
    expect: self ? agent : null,
    okLabel: 'Revoke',
  });
  if (!yes) return;
  const r = await act(api('POST', '/v1/admin/tokens/revoke', { agent, confirm_self: self }),
    (res) => `Revoked ${res.revoked} token(s) of ${agent}`);
  if (r && self) signOut('You revoked your own agent.');
}

const SETUP = [
  ['claude_mcp_add', 'Claude Code: add the MCP server', 'Run on the agent\'s machine.'],
  ['mcp_json', 'Or: .mcp.json', 'For a project-scoped config, or any MCP client that reads this format.'],
  ['hook_env', 'Hook: environment', 'The prompt hook reads these.'],
  ['hook_settings', 'Hook: ~/.claude/settings.json', 'Installs `chatroom hook` as a UserPromptSubmit hook.'],
  ['hook_steps', 'Hook: install steps', null],
  ['hook_curl', 'Hook without the binary (curl)', 'A zero-install hook command.'],
  ['brief', 'Brief to paste to the agent', 'Who it is, where, its role, and the untrusted-data rule. Holds no token.'],
  ['cli', 'Same grant from the command line', 'Mints another token with the same grant.'],
];

let minted = null; // kept only while the modal is open
function showSide(side) {
  for (const tab of document.querySelectorAll('#mint-dialog .tab')) {
    tab.setAttribute('aria-selected', String(tab.dataset.side === side));
  }
  const box = $('mint-setup');
  clear(box);
  if (!minted) return;
  const s = minted.setup[side];
  box.append(el('div', { class: 'side-url' }, `${side === 'lan' ? 'LAN' : 'Remote'} URL: `, el('code', { text: s.url }),
    el('span', { class: 'muted', text: ` (from ${s.url_source === 'request' ? 'how you reached this console' : s.url_source})` })));
  if (s.note) box.append(el('p', { class: 'warn', text: s.note }));
  for (const [key, title, hint] of SETUP) {
    const pre = el('pre', { data: { key }, text: s[key] });
    const button = el('button', { type: 'button', class: 'small', text: 'Copy', on: { click: () => copy(s[key], button) } });
    box.append(el('div', { class: 'block' },
      el('div', { class: 'block-head' }, el('div', {}, el('strong', { text: title }), hint ? el('span', { class: 'muted small', text: ` ${hint}` }) : null), button),
      pre));
  }
}

function showMinted(result) {
  const t = $('toast');
  if (t.matches(':popover-open')) t.hidePopover();
  minted = result;
  $('mint-agent-name').textContent = result.agent;
  $('mint-token').textContent = result.token;
  $('mint-flag').hidden = !result.whole_server_admin;
  showSide('lan');
  $('mint-dialog').showModal();
}

// ---- wiring ------------------------------------------------------------

function formValue(form, name) {
  const f = form.elements.namedItem(name);
  return f ? f.value.trim() : '';
}

function optional(v) { return v === '' ? undefined : v; }

document.addEventListener('DOMContentLoaded', () => {
  wireHooks(api, act);
  $('login-form').addEventListener('submit', async (ev) => {
    ev.preventDefault();
    const token = $('login-token').value.trim();
    if (!token) return;
    sessionStorage.setItem(KEY, token);
    $('login-token').value = '';
    await load();
  });
  $('logout').addEventListener('click', () => signOut());
  $('refresh').addEventListener('click', () => load());

  $('room-form').addEventListener('submit', async (ev) => {
    ev.preventDefault();
    const f = ev.target;
    const name = formValue(f, 'name');
    const r = await act(api('POST', '/v1/admin/rooms', {
      name,
      description: optional(formValue(f, 'description')),
      repo_url: optional(formValue(f, 'repo_url')),
      onboarding_notes: optional(formValue(f, 'onboarding_notes')),
    }), `Room ${name} created`);
    if (r) { f.reset(); $('mint-room').value = r.room.name; }
  });

  const syncWarn = () => { $('mint-warn').hidden = !($('mint-admin').checked && $('mint-all').checked); };
  $('mint-admin').addEventListener('change', syncWarn);
  $('mint-all').addEventListener('change', syncWarn);

  $('mint-form').addEventListener('submit', async (ev) => {
    ev.preventDefault();
    const f = ev.target;
    const body = {
      agent: formValue(f, 'agent'),
      room: formValue(f, 'room'),
      also_rooms: list(formValue(f, 'also_rooms')),
      skills: list(formValue(f, 'skills')),
      readonly: $('mint-readonly').checked,
      lead: $('mint-lead').checked,
      admin: $('mint-admin').checked,
      all_rooms: $('mint-all').checked,
    };
    try {
      const r = await api('POST', '/v1/admin/tokens', body);
      const room = body.room;
      f.reset();
      $('mint-room').value = room;
      syncWarn();
      showMinted(r);
      load();
    } catch (e) {
      if (e.status === 401) return signOut('The token is no longer valid.');
      toast(e.message, 'error');
    }
  });

  $('purge-form').addEventListener('submit', async (ev) => {
    ev.preventDefault();
    const days = Number(formValue(ev.target, 'older_than_days'));
    const yes = await confirmDialog({
      title: 'Purge revoked tokens?',
      text: `Tokens revoked more than ${days} day(s) ago are deleted for good (they already do not work).`,
      okLabel: 'Purge',
    });
    if (!yes) return;
    await act(api('POST', '/v1/admin/tokens/purge', { older_than_days: days }), (r) => `Purged ${r.purged} token(s)`);
  });

  $('info-form').addEventListener('submit', async (ev) => {
    ev.preventDefault();
    const f = ev.target;
    const r = await act(api('POST', `/v1/admin/rooms/${encodeURIComponent(editing)}/info`, {
      description: formValue(f, 'description'),
      repo_url: formValue(f, 'repo_url'),
      onboarding_notes: formValue(f, 'onboarding_notes'),
    }), `Room ${editing} updated`);
    if (r) $('room-dialog').close();
  });

  $('retention-form').addEventListener('submit', async (ev) => {
    ev.preventDefault();
    const days = Number(formValue(ev.target, 'days'));
    const r = await act(api('POST', `/v1/admin/rooms/${encodeURIComponent(editing)}/retention`, { days }),
      (res) => `Room ${editing} keeps ${days ? `${days} day(s)` : 'everything'}; pruned ${res.pruned.messages} message(s), ${res.pruned.events} event(s), ${res.pruned.files} file(s)`);
    if (r) $('room-dialog').close();
  });

  for (const btn of document.querySelectorAll('dialog [data-close]')) {
    btn.addEventListener('click', () => btn.closest('dialog').close());
  }
  for (const tab of document.querySelectorAll('#mint-dialog .tab')) {
    tab.addEventListener('click', () => showSide(tab.dataset.side));
  }
  $('mint-token-copy').addEventListener('click', (ev) => { if (minted) copy(minted.token, ev.currentTarget); });
  // Shown once: closing the modal forgets the token.
  $('mint-dialog').addEventListener('close', () => {
    minted = null;
    $('mint-token').textContent = '';
    clear($('mint-setup'));
  });

  if (sessionStorage.getItem(KEY)) load(); else showLogin();
  offerDashboard();
});

// ---- Connect an app (OAuth sign-in) ------------------------------------
// A button beside "Mint token" that mints a one-time connect code with the
// same choices, shown once in its own dialog with the steps for each app.

/** Whether this page was reached by a loopback or LAN address, one that
 * apps on the internet (claude.ai, ChatGPT) cannot reach. */
function privateAddress(host) {
  const h = host.replace(/^\[|\]$/g, '').toLowerCase();
  if (h === 'localhost' || h.endsWith('.localhost') || h.endsWith('.local') || h.endsWith('.lan') || h.endsWith('.home.arpa') || h.endsWith('.internal')) return true;
  if (!h.includes('.') && !h.includes(':')) return true;
  if (h === '::1' || h.startsWith('fe80:') || h.startsWith('fc') || h.startsWith('fd')) return true;
  const ip = h.split('.').map(Number);
  if (ip.length !== 4 || ip.some((n) => !Number.isInteger(n))) return false;
  return ip[0] === 127 || ip[0] === 10 || (ip[0] === 192 && ip[1] === 168) || (ip[0] === 172 && ip[1] >= 16 && ip[1] <= 31) || (ip[0] === 169 && ip[1] === 254) || (ip[0] === 100 && ip[1] >= 64 && ip[1] <= 127);
}

/** The warning for apps that connect from the internet, or null. */
function publicUrlWarning(r) {
  const publicUrl = current && current.posture && current.posture.urls && current.posture.urls.public_url;
  if (publicUrl || !privateAddress(location.hostname)) return null;
  return el('p', { class: 'warn', id: 'connect-public-warning' },
    'claude.ai and ChatGPT connect from the internet: they cannot reach ', el('code', { text: r.mcp_url.lan }),
    '. Give this server a public address (a tunnel: CLOUDFLARE_TUNNEL.md), set ', el('code', { text: 'CHATROOM_PUBLIC_URL' }),
    ' to it and restart, then enter that URL with /mcp in the app. Claude Code on this network can use the LAN address.');
}

document.addEventListener('DOMContentLoaded', () => {
  const form = $('mint-form');
  const submit = $('mint-submit');
  if (!form || !submit) return;
  const dialog = el('dialog', { id: 'connect-dialog', class: 'modal wide-modal', 'aria-label': 'Connect an app' });
  document.body.append(dialog);
  dialog.addEventListener('close', () => clear(dialog));
  const show = (...children) => {
    dialog.replaceChildren(...children);
    dialog.showModal();
  };
  const closeButton = (label) => el('div', { class: 'actions' }, el('button', { type: 'button', class: 'primary', text: label, onclick: () => dialog.close() }));
  const button = el('button', { type: 'button', id: 'connect-submit', text: 'Connect an app', title: 'A one-time code for claude.ai, Claude Desktop or mobile, ChatGPT or Claude Code to sign in with' });
  const apps = el('button', { type: 'button', id: 'connect-apps', text: 'Signed-in apps', title: 'Apps that signed in with a connect code (OAuth)' });
  submit.after(' ', button, ' ', apps);
  apps.addEventListener('click', async () => {
    let s = {};
    try {
      s = await api('GET', '/v1/admin/state');
    } catch (_) {
      s = {};
    }
    const grants = (s.oauth && s.oauth.grants) || [];
    const rows = grants.map((g) => el('li', {},
      el('strong', { text: g.agent }), ` in ${g.room}${g.also_rooms.length ? ' +' + g.also_rooms.length : ''} · `,
      `app “${g.client_name}” · since ${g.created_ts}`,
      g.revoked_ts ? ` · revoked ${g.revoked_ts}` : ' · active'));
    show(
      el('h2', { text: 'Signed-in apps' }),
      grants.length ? el('ul', { id: 'connect-apps-list' }, rows) : el('p', { text: 'No app has signed in yet.' }),
      el('p', { text: 'Revoking the agent (in the tokens list) ends its apps\' access at once.' }),
      closeButton('Close'),
    );
  });
  button.addEventListener('click', async () => {
    if (!form.reportValidity()) return;
    const value = (name) => (form.elements[name] ? form.elements[name].value.trim() : '');
    const body = {
      agent: value('agent'),
      room: value('room'),
      also_rooms: list(value('also_rooms')),
      skills: list(value('skills')),
      readonly: $('mint-readonly').checked,
      lead: $('mint-lead').checked,
      admin: $('mint-admin').checked,
      all_rooms: $('mint-all').checked,
      ttl_minutes: 15,
    };
    let r;
    try {
      r = await api('POST', '/v1/admin/connect', body);
    } catch (e) {
      show(el('p', { class: 'warn', text: e.message }), closeButton('Close'));
      return;
    }
    show(
      el('h2', { text: `Connect an app as ${r.agent}` }),
      el('p', { text: `Room ${r.room}. One use, valid ${r.ttl_minutes} minutes. Shown once.` }),
      el('p', {}, el('code', { class: 'token', id: 'connect-code', text: r.code })),
      publicUrlWarning(r),
      el('ol', {},
        el('li', { text: r.steps.claude_ai }),
        el('li', { text: r.steps.chatgpt }),
        el('li', {}, 'Claude Code: ', el('code', { text: r.steps.claude_code }))),
      el('p', { text: `LAN: ${r.mcp_url.lan} · remote: ${r.mcp_url.remote}` }),
      closeButton('Done'),
    );
  });
});
