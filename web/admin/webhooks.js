// The console's webhooks and inbound URLs (SPEC §7a): listed from the
// state, added and removed through /v1/admin/webhooks and /v1/admin/inbound.
// A new secret is shown once, in the result line, as text.
import { $, clear, el } from '/assets/dom.js';
import { stamp as when } from '/assets/time.js';

/** Renders `hooks` ({webhooks, inbound}); `api` and `act` are the console's. */
export function renderHooks(hooks, rooms, api, act) {
  const body = $('webhooks');
  clear(body);
  const list = (hooks && hooks.webhooks) || [];
  if (list.length === 0) {
    body.append(el('tr', {}, el('td', { colspan: 7, class: 'muted empty', text: 'No webhooks yet.' })));
  }
  for (const h of list) {
    const status = h.paused
      ? el('span', { class: 'badge off bad', text: `paused after ${h.failures} failures` })
      : el('span', { class: 'badge on good', text: h.failures ? `retrying (${h.failures})` : 'active' });
    body.append(el('tr', { data: { webhook: String(h.id) } },
      el('td', { text: h.id }),
      el('td', { text: h.room }),
      el('td', { text: h.format }),
      el('td', { class: 'desc', text: h.url }),
      el('td', { text: h.last_ts ? `${when(h.last_ts)} · ${h.last_status}` : 'never' }),
      el('td', {}, status),
      el('td', { class: 'row-actions' },
        el('button', { type: 'button', class: 'small danger', text: 'Remove',
          on: { click: () => act(api('DELETE', `/v1/admin/webhooks/${h.id}`), `Webhook ${h.id} removed`) } }))));
  }
  const inBody = $('inbound');
  clear(inBody);
  const ins = (hooks && hooks.inbound) || [];
  if (ins.length === 0) {
    inBody.append(el('tr', {}, el('td', { colspan: 5, class: 'muted empty', text: 'No inbound URLs yet.' })));
  }
  for (const i of ins) {
    inBody.append(el('tr', {},
      el('td', {}, el('code', { text: i.path })),
      el('td', { text: i.room }),
      el('td', { text: i.agent }),
      el('td', { text: i.last_used_ts ? when(i.last_used_ts) : 'never' }),
      el('td', { class: 'row-actions' },
        el('button', { type: 'button', class: 'small danger', text: 'Remove',
          on: { click: () => act(api('DELETE', `/v1/admin/inbound/${encodeURIComponent(i.key)}`), 'Inbound URL removed') } }))));
  }
  for (const id of ['webhook-room', 'inbound-room']) {
    const select = $(id);
    const previous = select.value;
    clear(select);
    for (const r of rooms) select.append(el('option', { value: r.name, text: r.name }));
    if (rooms.some((r) => r.name === previous)) select.value = previous;
  }
}

/** Wires the two add forms once. */
export function wireHooks(api, act) {
  const shown = $('hooks-secret');
  const show = (text) => { shown.textContent = text; shown.hidden = !text; };
  $('webhook-form').addEventListener('submit', async (ev) => {
    ev.preventDefault();
    const f = ev.target.elements;
    const r = await act(api('POST', '/v1/admin/webhooks', {
      room: f.room.value, url: f.url.value.trim(), events: f.events.value.trim(), format: f.format.value,
    }), (res) => `Webhook ${res.id} added`);
    if (r) show(r.secret ? `Signing secret of webhook ${r.id} (shown once): ${r.secret}` : '');
  });
  $('inbound-form').addEventListener('submit', async (ev) => {
    ev.preventDefault();
    const f = ev.target.elements;
    const r = await act(api('POST', '/v1/admin/inbound', { room: f.room.value, agent: f.agent.value.trim() }),
      'Inbound URL added');
    if (r) show(`POST to ${location.origin}${r.path} with Authorization: Bearer ${r.secret} (shown once)`);
  });
}
